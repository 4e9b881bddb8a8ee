//! The loader without training at 0, 1 and 2 workers, and the ceilings for its speed-up: the
//! same batches built with no hand-off (and waking a consumer per batch), and arithmetic alone.

use std::sync::Arc;
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::Settings;
use crate::data::Dataset;
use crate::loader::{Batch, BatchBuilder, Loader, LoaderConfig, LoaderError};
use crate::transforms::Pipeline;

/// Rates per repetition, each list indexed by worker or thread count.
pub(super) struct LoaderRates {
    /// The loader at 0, 1, 2 workers, img/s.
    pub(super) rates: [Vec<f64>; 3],
    /// The independent builders on 1, 2 threads (the no-hand-off ceiling), img/s.
    pub(super) alone: [Vec<f64>; 2],
    /// The independent builders on 2 threads waking a consumer per batch, img/s.
    pub(super) woken: Vec<f64>,
    /// Register-only arithmetic on 1, 2 threads, rounds/s.
    pub(super) arithmetic: [Vec<f64>; 2],
}

/// The loader's rates at 0, 1 and 2 workers and the two ceilings beside them, interleaved
/// within each repetition.
pub(super) fn loader_rates(
    dataset: &Arc<dyn Dataset>,
    pipeline: &Arc<Pipeline>,
    settings: &Settings,
    repeats: usize,
) -> anyhow::Result<LoaderRates> {
    let batches = batches_per_timing(dataset, pipeline, settings)?;
    let mut rates = [Vec::new(), Vec::new(), Vec::new()]; // the loader at 0, 1, 2 workers
    let mut alone = [Vec::new(), Vec::new()]; // independent builders on 1, 2 threads
    let mut woken = Vec::new(); // on 2 threads, waking a consumer
    let mut arithmetic = [Vec::new(), Vec::new()]; // the cores alone, on 1, 2 threads
    for r in 0..repeats {
        for case in Case::order(r as u64) {
            let rate = case.measure(dataset, pipeline, settings, batches)?;
            match case {
                Case::Workers { workers } => rates[workers].push(rate),
                Case::Alone { threads } => alone[threads - 1].push(rate),
                Case::Woken => woken.push(rate),
                Case::Arithmetic { threads } => arithmetic[threads - 1].push(rate),
            }
        }
    }
    Ok(LoaderRates {
        rates,
        alone,
        woken,
        arithmetic,
    })
}

/// Batches per timing: ≈ 65,536 images (0.1–0.3 s), for the same reason as the chain's. Each
/// repetition also builds the same batches on one and on two threads that hand nothing over
/// (`independent_rate`): the machine's own ceiling for the speed-up. Within a repetition the
/// figures of each ratio are measured close together, in an order drawn per repetition
/// ([`Case::order`]), because this machine's speed drifts by tens of percent within a minute;
/// each speed-up is the median of per-repetition ratios. A costly pipeline (decoding large
/// images) gets fewer: about 2 s of building per timing.
fn batches_per_timing(
    dataset: &Arc<dyn Dataset>,
    pipeline: &Arc<Pipeline>,
    settings: &Settings,
) -> anyhow::Result<u64> {
    let batch = settings.loader.batch_size as usize;
    let mut probe = BatchBuilder::new(
        Arc::clone(dataset),
        Arc::clone(pipeline),
        LoaderConfig::from_settings(settings),
    );
    let mut b = Batch::default();
    probe.build(0, 0, &mut b)?;
    let t = Instant::now();
    probe.build(0, 1, &mut b)?;
    let per_batch = t.elapsed().as_secs_f64().max(1e-6);
    let by_time = (2.0 / per_batch) as usize;
    Ok((65_536 / batch).min(by_time).clamp(8, 1024) as u64)
}

/// What one timing in a repetition measures: the loader, or the independent builders.
#[derive(Clone, Copy)]
enum Case {
    Workers {
        workers: usize,
    },
    Alone {
        threads: usize,
    },
    /// Two builders and a consumer they wake per batch.
    Woken,
    Arithmetic {
        threads: usize,
    },
}

impl Case {
    /// Repetition `r`'s timings. The four timings of the loader's share of its ceiling
    /// (workers 0 and 2, 1 and 2 threads without hand-off) back to back, so the least drift
    /// falls between them; their order, and whether they come before or after the other four,
    /// drawn afresh each repetition (seeded), so no figure always follows the same one: with a
    /// fixed order (each repetition reversing the last) the share moved by about 3 % with the
    /// order.
    fn order(r: u64) -> Vec<Case> {
        use Case::{Alone, Arithmetic, Woken, Workers};
        let mut rng = ChaCha8Rng::seed_from_u64(r);
        let mut share = [
            Workers { workers: 0 },
            Workers { workers: 2 },
            Alone { threads: 1 },
            Alone { threads: 2 },
        ];
        let mut others = [
            Workers { workers: 1 },
            Woken,
            Arithmetic { threads: 1 },
            Arithmetic { threads: 2 },
        ];
        share.shuffle(&mut rng);
        others.shuffle(&mut rng);
        let mut order: Vec<Case> = [share, others].concat();
        if rng.random_bool(0.5) {
            order.rotate_left(4);
        }
        order
    }

    /// One timing: img/s (rounds/s for arithmetic).
    fn measure(
        self,
        dataset: &Arc<dyn Dataset>,
        pipeline: &Arc<Pipeline>,
        settings: &Settings,
        batches: u64,
    ) -> anyhow::Result<f64> {
        let mut cfg = LoaderConfig::from_settings(settings);
        Ok(match self {
            Case::Arithmetic { threads } => arithmetic_rate(threads),
            Case::Alone { .. } | Case::Woken => {
                let (threads, woken) = match self {
                    Case::Alone { threads } => (threads, false),
                    _ => (2, true),
                };
                // As workers = 0 (one thread, its buffers) and as workers = 2 (two threads,
                // the loader's buffers shared out between them).
                cfg.workers = if threads == 1 { 0 } else { threads };
                let buffers = cfg.buffers(false) / threads;
                independent_rate(
                    Arc::clone(dataset),
                    Arc::clone(pipeline),
                    cfg,
                    threads,
                    buffers,
                    batches,
                    woken,
                )?
            }
            Case::Workers { workers } => {
                cfg.workers = workers;
                // Warm-up touches every buffer the loader will cycle through: no first-touch
                // page faults are timed.
                let warm_up = cfg.buffers(false) + 1;
                let mut loader = Loader::new(Arc::clone(dataset), Arc::clone(pipeline), cfg)?;
                for _ in 0..warm_up {
                    loader.next_batch()?;
                }
                let t = Instant::now();
                let mut images = 0;
                for _ in 0..batches {
                    images += loader.next_batch()?.len;
                }
                images as f64 / t.elapsed().as_secs_f64()
            }
        })
    }
}

/// The loader's batch work with the hand-off taken away: `threads` threads each build every
/// `threads`-th of `batches` batches into a private ring of `buffers` batch buffers, with no
/// channels, no ordering and no consumer; timed until the last thread is done. Returns images
/// per second, or the first builder's failure (a panic names thread and batch, as a worker's).
///
/// With one buffer on one thread this is the serial loader's work (workers = 0); with
/// `prefetch_factor` buffers on N threads, N workers' work. The ratio of the two is the ceiling
/// of the loader's speed-up on this machine: equal fixed shares, so a slower core holds the
/// total back (the loader's workers share out batches as they free up and can beat it), but
/// nothing ever waits for anything else. `bench` sets the loader's speed-up beside it, so a
/// loader shortfall can be told apart from a machine that does not scale (shared caches and
/// memory, cores of unequal speed on a busy host).
///
/// With `consumer`, the calling thread stands in for a training thread that does nothing but
/// take batches: each builder wakes it once per batch it finishes (one byte through a pipe, as
/// the loader wakes its training thread) and it sleeps until then. That is the least any
/// loader with a separate training thread pays per batch: on 2 cores the third thread takes
/// its turns on the builders' cores.
pub fn independent_rate(
    dataset: Arc<dyn Dataset>,
    pipeline: Arc<Pipeline>,
    cfg: LoaderConfig,
    threads: usize,
    buffers: usize,
    batches: u64,
    consumer: bool,
) -> Result<f64, LoaderError> {
    use std::io::{Read, Write};
    let (threads, buffers) = (threads.max(1), buffers.max(1));
    let wait_error = |e: std::io::Error| LoaderError::Wait {
        message: e.to_string(),
    };
    let (mut woken, wake) = match consumer {
        true => std::io::pipe()
            .map(|(r, w)| (Some(r), Some(w)))
            .map_err(wait_error)?,
        false => (None, None),
    };
    // One write end per builder and none kept here: when every builder has returned (done or
    // failed), the consumer reads the end of the pipe instead of waiting for ever.
    let mut wakes = (0..threads)
        .map(|_| wake.as_ref().map(|w| w.try_clone()).transpose())
        .collect::<Result<Vec<_>, _>>()
        .map_err(wait_error)?;
    drop(wake);
    let start = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .zip(wakes.drain(..))
            .map(|(t, wake)| {
                let start = &start;
                let mut builder =
                    BatchBuilder::new(Arc::clone(&dataset), Arc::clone(&pipeline), cfg.clone());
                scope.spawn(move || {
                    let mut ring: Vec<Batch> = (0..buffers).map(|_| Batch::default()).collect();
                    // Every buffer of the ring is built into once before the clock starts, as
                    // the loader's warm-up does; a failure still reaches the barrier (no hang).
                    let warm = ring.iter_mut().enumerate().try_for_each(|(i, batch)| {
                        builder.build(t, (t + i * threads) as u64, batch)
                    });
                    start.wait();
                    warm?;
                    let mut images = 0;
                    for (i, k) in (t as u64..batches).step_by(threads).enumerate() {
                        let batch = &mut ring[i % buffers];
                        builder.build(t, k, batch)?;
                        images += batch.len;
                        if let Some(wake) = &wake {
                            let _ = (&*wake).write(&[1]);
                        }
                    }
                    Ok::<usize, LoaderError>(images)
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        if let Some(woken) = &mut woken {
            // One batch at a time: a batch already built is taken without sleeping.
            let mut byte = [0];
            let mut taken = 0;
            while taken < batches {
                match woken.read(&mut byte) {
                    Ok(0) => break,
                    Ok(_) => taken += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(wait_error(e)),
                }
            }
        }
        let mut images = 0;
        for h in handles {
            // Builders catch their own panics; anything else is a bug, passed on as a panic.
            images += h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        }
        Ok(images as f64 / started.elapsed().as_secs_f64())
    })
}

/// Rounds of register-only integer arithmetic per second on `threads` threads, each doing
/// the same fixed share (≈ 0.1 s on a 2020s core), timed until the last is done: no memory,
/// no data, nothing shared. Two threads over one is what this machine's cores give to perfectly
/// parallel work, so a speed-up below 2 that this ratio shares is the machine's, not the
/// loader's (a virtual machine's cores can run at different, drifting speeds).
fn arithmetic_rate(threads: usize) -> f64 {
    const ROUNDS: u64 = 1 << 17;
    const PER_ROUND: u64 = 1024;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                // Four independent chains keep several ALUs busy without touching memory.
                let (mut a, mut b, mut c, mut d) = (1u64, 2u64, 3u64, 4u64);
                for _ in 0..ROUNDS {
                    for _ in 0..PER_ROUND {
                        a = a.wrapping_mul(3).wrapping_add(1);
                        b = b.wrapping_mul(5).wrapping_add(7);
                        c ^= c << 1;
                        d = d.wrapping_add(d >> 3);
                    }
                    (a, b, c, d) = std::hint::black_box((a, b, c, d));
                }
            });
        }
    });
    (threads as u64 * ROUNDS) as f64 / started.elapsed().as_secs_f64()
}
