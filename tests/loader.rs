//! The loader's failure behaviour: a panicking worker becomes an error naming the worker and
//! the batch, never a hang, and dropping a loader joins its threads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use loaderlab::config::seed_transforms;
use loaderlab::data::{Dataset, ImageShape, Synthetic};
use loaderlab::loader::{Loader, LoaderConfig, LoaderError, Shard};
use loaderlab::transforms::Pipeline;

/// A dataset whose image `bad` cannot be read and whose image 0 is read only once `first` is
/// open; it counts the images read.
struct Faulty {
    inner: Synthetic,
    bad: usize,
    first: Gate,
    read: std::sync::atomic::AtomicUsize,
}

/// A gate a reader waits at until the test opens it (no clock decides the order).
#[derive(Default)]
struct Gate {
    closed: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

impl Gate {
    fn closed() -> Gate {
        Gate {
            closed: std::sync::Mutex::new(true),
            opened: Default::default(),
        }
    }
    fn wait(&self) {
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            closed = self.opened.wait(closed).unwrap();
        }
    }
    fn open(&self) {
        *self.closed.lock().unwrap() = false;
        self.opened.notify_all();
    }
}

impl Faulty {
    fn new(inner: Synthetic, bad: usize) -> Self {
        Faulty {
            inner,
            bad,
            first: Gate::default(),
            read: Default::default(),
        }
    }
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
        if index == 0 {
            self.first.wait();
        }
        self.inner.image_into(index, buf);
        self.read.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
        read_ahead: 1,
        shard: Shard::WHOLE,
    }
}

/// A loader over 64 images of which image 45 (in batch 5, without shuffling) cannot be read.
fn faulty_loader(workers: usize) -> Loader {
    let dataset = Arc::new(Faulty::new(Synthetic::new(64, 10, 3), 45));
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
    // Without shuffling, sample 45 is in batch 5; whichever of the 3 workers took it is named.
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
            assert!(*worker < 3 && *batch == 5, "worker {worker}, batch {batch}");
            assert!(message.contains("image 45 is unreadable"), "{message}");
            assert!(err.to_string().contains(&format!(
                "loader worker {worker} panicked while building batch 5"
            )));
        }
        other => panic!("unexpected {other}"),
    }
    // Asked again, the loader repeats the error instead of waiting for the batch.
    let again = loader.next_batch().unwrap_err();
    assert_eq!(again.to_string(), err.to_string());
    assert!(started.elapsed() < Duration::from_secs(10), "no hang");
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
    use loaderlab::commands::bench::independent_rate;
    let pipeline = Arc::new(Pipeline::new(&seed_transforms(), 3, ImageShape::GREY_28));
    // With a consumer woken per batch, too: a builder that stops must not leave it waiting.
    for consumer in [false, true] {
        let good = Arc::new(Synthetic::new(64, 10, 3));
        let rate = independent_rate(good, pipeline.clone(), config(2), 2, 2, 8, consumer);
        let rate = rate.unwrap();
        assert!(rate.is_finite() && rate > 0.0);
        // Sample 45 is in batch 5 (timed, thread 1); sample 12 in batch 1 (thread 1's warm-up).
        for (bad, batch) in [(45, 5), (12, 1)] {
            let dataset = Arc::new(Faulty::new(Synthetic::new(64, 10, 3), bad));
            let started = Instant::now();
            let err = independent_rate(dataset, pipeline.clone(), config(2), 2, 2, 8, consumer)
                .unwrap_err();
            assert!(started.elapsed() < Duration::from_secs(10), "no hang");
            assert!(
                err.to_string().contains(&format!(
                    "loader worker 1 panicked while building batch {batch}"
                )),
                "{err}"
            );
        }
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

#[test]
fn a_slow_batch_does_not_stop_the_other_workers() {
    // 2 workers, 2 buffers each: while one worker is held at the first image of batch 0, the
    // other fills every other buffer (batches 1, 2 and 3: 24 images) and then has none left.
    // Round robin (batch k to worker k mod 2) let it build only its own two, 1 and 3, and
    // then wait (16 images, never 24: the wait below runs out).
    let dataset = Arc::new(Faulty {
        first: Gate::closed(),
        ..Faulty::new(Synthetic::new(256, 10, 3), usize::MAX)
    });
    let pipeline = Arc::new(Pipeline::new(&seed_transforms(), 3, ImageShape::GREY_28));
    let mut loader = Loader::new(dataset.clone(), pipeline, config(2)).unwrap();
    let images_read = || dataset.read.load(std::sync::atomic::Ordering::SeqCst);
    let started = Instant::now();
    while images_read() < 3 * 8 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(2));
    }
    // Every buffer is full, so the count cannot pass 24 while batch 0 is held.
    assert_eq!(images_read(), 3 * 8, "images read while batch 0 was held");
    dataset.first.open();
    assert_eq!(loader.next_batch().unwrap().index, 0);
    // Delivery stays in order and the content does not depend on who built what.
    let mut reference = Loader::new(
        Arc::new(Synthetic::new(256, 10, 3)),
        Arc::new(Pipeline::new(&seed_transforms(), 3, ImageShape::GREY_28)),
        config(0),
    )
    .unwrap();
    let fp0 = loader.next_batch().unwrap().fingerprint;
    let _ = reference.next_batch().unwrap();
    assert_eq!(fp0, reference.next_batch().unwrap().fingerprint);
    for k in 2..20 {
        let (a, b) = (
            loader.next_batch().unwrap().fingerprint,
            reference.next_batch().unwrap().fingerprint,
        );
        assert_eq!(a, b, "batch {k}");
    }
}

#[test]
fn every_batch_buffer_is_used_once_before_any_is_reused() {
    // The warm-up of `bench` and of a run touches the first prefetch × workers batches, and
    // with them every buffer, so no first-touch page fault lands in a timed step. A consumer
    // faster than the workers (as here) handed the most recently freed buffer straight back
    // with a last-in-first-out free list, leaving some buffers untouched until later.
    let dataset = Arc::new(Synthetic::new(256, 10, 3));
    let pipeline = Arc::new(Pipeline::new(&seed_transforms(), 3, ImageShape::GREY_28));
    let mut loader = Loader::new(dataset, pipeline, config(2)).unwrap();
    let mut buffers: Vec<usize> = (0..4)
        .map(|_| loader.next_batch().unwrap().images().as_ptr() as usize)
        .collect();
    buffers.sort_unstable();
    buffers.dedup();
    assert_eq!(buffers.len(), 4, "2 workers × prefetch 2");
}
