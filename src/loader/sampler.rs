//! Which samples make up each batch: the epoch's order (the dataset's own, or a permutation
//! drawn from (seed, epoch)) cut into batches. A pure function of its inputs, so every worker
//! count builds the same batches.

use std::sync::Arc;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::LoaderConfig;
use crate::data::Dataset;
use crate::hash::splitmix;

/// The order in which an epoch visits the dataset: a permutation drawn from (seed, epoch), or
/// the identity without shuffling.
pub fn epoch_order(len: usize, shuffle: bool, seed: u64, epoch: u64, order: &mut Vec<u32>) {
    order.clear();
    order.extend(0..len as u32);
    if shuffle {
        let mut rng =
            ChaCha8Rng::seed_from_u64(splitmix(seed ^ 0x0073_6875_6666_6c65 ^ splitmix(epoch)));
        order.shuffle(&mut rng);
    }
}

/// Which share of every epoch a loader serves: rank `rank` of `ranks` takes positions `rank`,
/// `rank + ranks`, … of the epoch's order, as PyTorch's `DistributedSampler` deals them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub rank: usize,
    pub ranks: usize,
}

impl Shard {
    /// The whole epoch: one rank.
    pub const WHOLE: Shard = Shard { rank: 0, ranks: 1 };

    /// Samples per epoch in this shard of `len`: with `drop_last` the epoch is cut to a
    /// multiple of the ranks (`DistributedSampler(drop_last=True)`), else padded with its
    /// first samples (its default), so every rank steps the same number of times.
    pub fn len(&self, len: usize, drop_last: bool) -> usize {
        match self.ranks {
            0 | 1 => len,
            r if drop_last => len / r,
            r => len.div_ceil(r),
        }
    }
}

/// Which samples make up each batch.
#[derive(Clone)]
pub(super) struct Sampler {
    /// Asked for each epoch's order first (WebDataset sets its own).
    dataset: Option<Arc<dyn Dataset>>,
    len: usize,
    shard: Shard,
    /// This shard's samples per epoch.
    shard_len: usize,
    batch_size: usize,
    shuffle: bool,
    seed: u64,
    pub(super) batches_per_epoch: u64,
    epoch: Option<u64>,
    order: Vec<u32>,
    /// The whole epoch's order, when this sampler serves one shard of it.
    whole: Vec<u32>,
}

impl Sampler {
    pub(super) fn new(len: usize, cfg: &LoaderConfig, dataset: Option<Arc<dyn Dataset>>) -> Self {
        let shard_len = cfg.shard.len(len, cfg.drop_last);
        let full = shard_len / cfg.batch_size;
        let batches = if cfg.drop_last || shard_len.is_multiple_of(cfg.batch_size) {
            full
        } else {
            full + 1
        };
        Sampler {
            dataset,
            len,
            shard: cfg.shard,
            shard_len,
            batch_size: cfg.batch_size,
            shuffle: cfg.shuffle,
            seed: cfg.seed,
            batches_per_epoch: batches as u64,
            epoch: None,
            order: Vec::new(),
            whole: Vec::new(),
        }
    }

    /// (epoch, dataset indices) of global batch `k`.
    pub(super) fn batch(&mut self, k: u64) -> (u64, &[u32]) {
        let epoch = k / self.batches_per_epoch;
        let b = (k % self.batches_per_epoch) as usize;
        if self.epoch != Some(epoch) {
            let sharded = self.shard.ranks > 1;
            let order = if sharded {
                &mut self.whole
            } else {
                &mut self.order
            };
            let own = self.dataset.as_ref().is_some_and(|d| {
                d.storage()
                    .epoch_order(self.shuffle, self.seed, epoch, order)
            });
            if !own {
                epoch_order(self.len, self.shuffle, self.seed, epoch, order);
            }
            if sharded {
                // Positions rank, rank + ranks, …; past the end (padding) from the start.
                let Shard { rank, ranks } = self.shard;
                let whole = &self.whole;
                self.order.clear();
                self.order
                    .extend((0..self.shard_len).map(|i| whole[(rank + i * ranks) % whole.len()]));
            }
            self.epoch = Some(epoch);
        }
        let start = b * self.batch_size;
        let end = (start + self.batch_size).min(self.shard_len);
        (epoch, &self.order[start..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(shard: Shard, drop_last: bool) -> LoaderConfig {
        LoaderConfig {
            batch_size: 4,
            workers: 0,
            prefetch_factor: 1,
            shuffle: true,
            drop_last,
            persistent_workers: true,
            seed: 7,
            read_ahead: 1,
            shard,
        }
    }

    /// Every epoch's samples, over all ranks, as `DistributedSampler` deals them.
    fn epoch_of_ranks(len: usize, ranks: usize, drop_last: bool, epoch: u64) -> Vec<Vec<u32>> {
        (0..ranks)
            .map(|rank| {
                let mut s = Sampler::new(len, &config(Shard { rank, ranks }, drop_last), None);
                let per = s.batches_per_epoch;
                (epoch * per..(epoch + 1) * per)
                    .flat_map(|k| s.batch(k).1.to_vec())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_ranks_deal_each_epoch_between_them_once() {
        for epoch in [0, 1] {
            // 40 samples, 4 ranks, batches of 4: 10 each, 2 full batches (8) per rank.
            let ranks = epoch_of_ranks(40, 4, true, epoch);
            let mut whole = Vec::new();
            epoch_order(40, true, 7, epoch, &mut whole);
            for (r, got) in ranks.iter().enumerate() {
                let dealt: Vec<u32> = whole.iter().skip(r).step_by(4).copied().collect();
                assert_eq!(got[..], dealt[..8], "rank {r}, epoch {epoch}");
            }
            // Without drop_last: 10 each in batches 4, 4, 2; all 40 exactly once.
            let mut all: Vec<u32> = epoch_of_ranks(40, 4, false, epoch).concat();
            all.sort_unstable();
            assert_eq!(all, (0..40).collect::<Vec<u32>>());
        }
        // 42 samples over 4 ranks without drop_last: padded to 44 with the first two.
        let all = epoch_of_ranks(42, 4, false, 0).concat();
        assert_eq!(all.len(), 44);
        let mut distinct = all.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 42);
        assert_eq!(Shard { rank: 1, ranks: 4 }.len(42, true), 10);
        assert_eq!(Shard::WHOLE.len(42, true), 42);
    }
}
