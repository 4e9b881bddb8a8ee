//! The loader's own tests: the same batches at any worker count, across epochs, in host
//! memory, taken out and given back, and after a restart.

use super::*;
use crate::config::seed_transforms;
use crate::data::Synthetic;
use crate::shape::ImageShape;

fn loader(workers: usize, persistent: bool, len: usize) -> Loader {
    loader_in(workers, persistent, len, None)
}

fn loader_in(
    workers: usize,
    persistent: bool,
    len: usize,
    memory: Option<Arc<dyn HostMemory>>,
) -> Loader {
    let cfg = LoaderConfig {
        batch_size: 16,
        workers,
        prefetch_factor: 2,
        shuffle: true,
        drop_last: true,
        persistent_workers: persistent,
        seed: 9,
        read_ahead: 1,
        shard: Shard::WHOLE,
    };
    Loader::with_memory(
        Arc::new(Synthetic::new(len, 10, 9)),
        Arc::new(Pipeline::new(&seed_transforms(), 9, ImageShape::GREY_28)),
        cfg,
        memory,
    )
    .unwrap()
}

fn fingerprints(mut l: Loader, n: usize) -> Vec<(u64, u64, u64)> {
    (0..n)
        .map(|_| {
            let b = l.next_batch().unwrap();
            (b.index, b.epoch, b.fingerprint)
        })
        .collect()
}

#[test]
fn same_batches_for_any_worker_count_across_epochs() {
    // 100 images / 16 = 6 batches per epoch: 20 batches cross three epoch boundaries.
    let serial = fingerprints(loader(0, true, 100), 20);
    assert_eq!(serial[6].1, 1);
    for workers in [1, 3] {
        assert_eq!(
            fingerprints(loader(workers, true, 100), 20),
            serial,
            "workers={workers}"
        );
    }
    assert_eq!(
        fingerprints(loader(2, false, 100), 20),
        serial,
        "non-persistent"
    );
    let distinct: std::collections::HashSet<u64> = serial.iter().map(|s| s.2).collect();
    assert_eq!(distinct.len(), 20);
}

/// Host memory that counts its allocations, standing in for CUDA's pinned memory.
struct Counting(std::sync::atomic::AtomicUsize);
struct Block(Vec<f32>);
impl HostBlock for Block {
    fn as_slice(&self) -> &[f32] {
        &self.0
    }
    fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.0
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
impl HostMemory for Counting {
    fn alloc(&self, len: usize) -> Result<Box<dyn HostBlock>, String> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Box::new(Block(vec![0.0; len])))
    }
}

#[test]
fn host_memory_holds_the_same_batches_and_is_reused() {
    let serial = fingerprints(loader(0, true, 100), 20);
    for workers in [0, 2] {
        let memory = Arc::new(Counting(Default::default()));
        let mut l = loader_in(workers, true, 100, Some(memory.clone()));
        for want in &serial {
            let b = l.next_batch().unwrap();
            assert!(b.host_block().is_some());
            assert_eq!(
                (b.index, b.epoch, b.fingerprint),
                *want,
                "workers={workers}"
            );
        }
        drop(l);
        // One buffer per slot in flight (prefetch x workers, or two taking turns at
        // workers = 0, so batch k+1 never waits for the copy of batch k), never per batch.
        let slots = if workers == 0 { 2 } else { 2 * workers };
        assert_eq!(memory.0.load(std::sync::atomic::Ordering::SeqCst), slots);
    }
}

#[test]
fn batches_taken_out_are_the_same_whether_kept_or_given_back() {
    let serial = fingerprints(loader(0, true, 100), 20);
    for (workers, persistent) in [(0, true), (2, true), (2, false)] {
        let mut l = loader(workers, persistent, 100);
        // Every batch kept: the loader never waits for a buffer to come back.
        let kept: Vec<Batch> = (0..10)
            .map(|_| l.next_owned(Batch::default()).unwrap())
            .collect();
        // Each one given back at once, as a spare for the next.
        let mut spare = Batch::default();
        let mut given_back = Vec::new();
        for _ in 10..20 {
            let b = l.next_owned(spare).unwrap();
            given_back.push((b.index, b.epoch, b.fingerprint));
            spare = b;
        }
        let got: Vec<(u64, u64, u64)> = kept
            .iter()
            .map(|b| (b.index, b.epoch, b.fingerprint))
            .chain(given_back)
            .collect();
        assert_eq!(got, serial, "workers={workers} persistent={persistent}");
        // A batch kept still holds its own images.
        let mut fp = Fingerprint::default();
        fp.floats(kept[3].images());
        fp.labels(kept[3].labels());
        assert_eq!(fp.finish(), serial[3].2);
    }
}

#[test]
fn lending_and_taking_out_mix_on_one_loader() {
    let serial = fingerprints(loader(0, true, 100), 12);
    for workers in [0, 2] {
        let mut l = loader(workers, true, 100);
        let got: Vec<u64> = (0..12)
            .map(|k| match k % 3 {
                0 => l.next_batch().unwrap().fingerprint,
                _ => l.next_owned(Batch::default()).unwrap().fingerprint,
            })
            .collect();
        let want: Vec<u64> = serial.iter().map(|s| s.2).collect();
        assert_eq!(got, want, "workers={workers}");
    }
}

#[test]
fn a_restart_at_an_epoch_gives_that_epochs_batches() {
    let serial = fingerprints(loader(0, true, 100), 20);
    for (workers, persistent) in [(0, true), (2, true), (2, false)] {
        let mut l = loader(workers, persistent, 100);
        l.next_batch().unwrap();
        // 6 batches per epoch: epoch 2 starts at batch 12.
        l.restart_at(12).unwrap();
        assert_eq!(l.position(), 12);
        let got: Vec<u64> = (12..20)
            .map(|_| l.next_batch().unwrap().fingerprint)
            .collect();
        let want: Vec<u64> = serial[12..20].iter().map(|s| s.2).collect();
        assert_eq!(got, want, "workers={workers} persistent={persistent}");
    }
}

#[test]
fn epochs_reshuffle() {
    let mut s = Sampler::new(
        10,
        &LoaderConfig {
            batch_size: 10,
            workers: 0,
            prefetch_factor: 1,
            shuffle: true,
            drop_last: true,
            persistent_workers: true,
            seed: 1,
            read_ahead: 1,
            shard: Shard::WHOLE,
        },
        None,
    );
    let a = s.batch(0).1.to_vec();
    let b = s.batch(1).1.to_vec();
    assert_ne!(a, b);
    let mut sorted = b.clone();
    sorted.sort();
    assert_eq!(sorted, (0..10).collect::<Vec<u32>>());
}

#[test]
fn partial_last_batch_without_drop_last() {
    let cfg = LoaderConfig {
        batch_size: 16,
        workers: 2,
        prefetch_factor: 2,
        shuffle: false,
        drop_last: false,
        persistent_workers: true,
        seed: 1,
        read_ahead: 1,
        shard: Shard::WHOLE,
    };
    let mut l = Loader::new(
        Arc::new(Synthetic::new(40, 10, 1)),
        Arc::new(Pipeline::new(&seed_transforms(), 1, ImageShape::GREY_28)),
        cfg,
    )
    .unwrap();
    let lens: Vec<usize> = (0..4).map(|_| l.next_batch().unwrap().len).collect();
    assert_eq!(lens, [16, 16, 8, 16]);
}
