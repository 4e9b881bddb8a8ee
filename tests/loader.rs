//! The loader's failure behaviour: a panicking worker becomes an error naming the worker and
//! the batch, never a hang, and dropping a loader joins its threads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use loaderlab::config::seed_transforms;
use loaderlab::data::{Dataset, ImageShape, Synthetic};
use loaderlab::loader::{Loader, LoaderConfig, LoaderError};
use loaderlab::transforms::Pipeline;

/// A dataset whose image `bad` cannot be read.
struct Faulty {
    inner: Synthetic,
    bad: usize,
}

impl Dataset for Faulty {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn label(&self, index: usize) -> u8 {
        self.inner.label(index)
    }
    fn shape(&self) -> ImageShape {
        self.inner.shape()
    }
    fn image_into(&self, index: usize, buf: &mut [u8]) {
        assert!(index != self.bad, "image {index} is unreadable");
        self.inner.image_into(index, buf);
    }
    fn classes(&self) -> usize {
        10
    }
    fn describe(&self) -> String {
        "faulty".into()
    }
}

fn config(workers: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: 8,
        workers,
        prefetch_factor: 2,
        shuffle: false,
        drop_last: true,
        persistent_workers: true,
        seed: 3,
    }
}

/// A loader over 64 images of which image 45 (in batch 5, without shuffling) cannot be read.
fn faulty_loader(workers: usize) -> Loader {
    let dataset = Arc::new(Faulty {
        inner: Synthetic::new(64, 10, 3),
        bad: 45,
    });
    let pipeline = Arc::new(Pipeline::new(&seed_transforms(), 3, ImageShape::GREY_28));
    Loader::new(dataset, pipeline, config(workers)).unwrap()
}

/// The first error among the first 8 batches; the bad batch must surface as one.
fn first_error(loader: &mut Loader) -> LoaderError {
    (0..8)
        .find_map(|_| loader.next_batch().err())
        .expect("the bad batch must surface as an error")
}

#[test]
fn a_panicking_worker_is_an_error_naming_worker_and_batch() {
    // Without shuffling, sample 45 is in batch 5, which worker 5 mod 3 = 2 builds.
    let mut loader = faulty_loader(3);
    let started = Instant::now();
    let err = first_error(&mut loader);
    assert!(started.elapsed() < Duration::from_secs(10), "no hang");
    match &err {
        LoaderError::WorkerPanicked {
            worker,
            batch,
            message,
        } => {
            assert_eq!((*worker, *batch), (2, 5));
            assert!(message.contains("image 45 is unreadable"), "{message}");
        }
        other => panic!("unexpected {other}"),
    }
    assert!(
        err.to_string()
            .contains("loader worker 2 panicked while building batch 5")
    );
    drop(loader); // joins the other workers without hanging
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn dropping_a_busy_loader_returns_promptly() {
    let dataset = Arc::new(Synthetic::new(4096, 10, 1));
    let pipeline = Arc::new(Pipeline::new(&seed_transforms(), 1, ImageShape::GREY_28));
    let mut loader = Loader::new(dataset, pipeline, config(2)).unwrap();
    loader.next_batch().unwrap();
    let started = Instant::now();
    drop(loader);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn independent_builders_report_a_panic_instead_of_hanging() {
    use loaderlab::bench::independent_rate;
    let pipeline = Arc::new(Pipeline::new(&seed_transforms(), 3, ImageShape::GREY_28));
    let good = Arc::new(Synthetic::new(64, 10, 3));
    let rate = independent_rate(good, pipeline.clone(), config(2), 2, 2, 8).unwrap();
    assert!(rate.is_finite() && rate > 0.0);
    // Sample 45 is in batch 5 (timed, thread 1); sample 12 in batch 1 (thread 1's warm-up).
    for (bad, batch) in [(45, 5), (12, 1)] {
        let dataset = Arc::new(Faulty {
            inner: Synthetic::new(64, 10, 3),
            bad,
        });
        let started = Instant::now();
        let err = independent_rate(dataset, pipeline.clone(), config(2), 2, 2, 8).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10), "no hang");
        assert!(
            err.to_string().contains(&format!(
                "loader worker 1 panicked while building batch {batch}"
            )),
            "{err}"
        );
    }
}

#[test]
fn a_panic_with_no_workers_is_the_same_clear_error_naming_the_batch() {
    // workers = 0: the training thread builds batch 5 itself; the panic must not kill the
    // process but come back as an error, as it does from a worker.
    let mut loader = faulty_loader(0);
    let err = first_error(&mut loader);
    match &err {
        LoaderError::BuildPanicked { batch, message } => {
            assert_eq!(*batch, 5);
            assert!(message.contains("image 45 is unreadable"), "{message}");
        }
        other => panic!("unexpected {other}"),
    }
    assert!(
        err.to_string()
            .contains("panicked while building batch 5 (workers = 0)"),
        "{err}"
    );
    // The loader goes on with the next batch after the failed one.
    assert!(loader.next_batch().is_ok());
}
