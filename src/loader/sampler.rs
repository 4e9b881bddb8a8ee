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

/// Which samples make up each batch.
#[derive(Clone)]
pub(super) struct Sampler {
    /// Asked for each epoch's order first (WebDataset sets its own).
    dataset: Option<Arc<dyn Dataset>>,
    len: usize,
    batch_size: usize,
    shuffle: bool,
    seed: u64,
    pub(super) batches_per_epoch: u64,
    epoch: Option<u64>,
    order: Vec<u32>,
}

impl Sampler {
    pub(super) fn new(len: usize, cfg: &LoaderConfig, dataset: Option<Arc<dyn Dataset>>) -> Self {
        let full = len / cfg.batch_size;
        let batches = if cfg.drop_last || len.is_multiple_of(cfg.batch_size) {
            full
        } else {
            full + 1
        };
        Sampler {
            dataset,
            len,
            batch_size: cfg.batch_size,
            shuffle: cfg.shuffle,
            seed: cfg.seed,
            batches_per_epoch: batches as u64,
            epoch: None,
            order: Vec::new(),
        }
    }

    /// (epoch, dataset indices) of global batch `k`.
    pub(super) fn batch(&mut self, k: u64) -> (u64, &[u32]) {
        let epoch = k / self.batches_per_epoch;
        let b = (k % self.batches_per_epoch) as usize;
        if self.epoch != Some(epoch) {
            let own = self
                .dataset
                .as_ref()
                .is_some_and(|d| d.epoch_order(self.shuffle, self.seed, epoch, &mut self.order));
            if !own {
                epoch_order(self.len, self.shuffle, self.seed, epoch, &mut self.order);
            }
            self.epoch = Some(epoch);
        }
        let start = b * self.batch_size;
        let end = (start + self.batch_size).min(self.len);
        (epoch, &self.order[start..end])
    }
}
