//! Emulated remote storage (`[dataset.storage]`): every read of an image waits a request
//! latency, then its bytes over a bandwidth all readers share, with at most `max_in_flight`
//! requests outstanding — a what-if for NFS or an object store on any machine. Waiting sleeps,
//! so it burns no CPU. A loader's reader asks for each image before decoding it, one at a time
//! as PyTorch's DataLoader's worker does, or keeps `loader.read_ahead` requests outstanding as a
//! rolling window (the next images' reads in flight while this one decodes).
//!
//! The shared link is a FIFO reservation: a request's transfer starts when its latency has
//! passed and the link is free, and occupies it for bytes / bandwidth. A request is issued at
//! once ([`Storage::issue`] answers when its bytes will have arrived) and counts as in flight
//! until then.
//!
//! Images stored together (a WebDataset shard, [`Dataset::storage_unit`]) are streamed: a
//! reader (a loader worker) pays the request's latency when it opens a shard and then only the
//! bytes of each image it reads from it, for as long as the shard is among the last
//! [`OPEN_STREAMS`] it opened — as a shard reader streams each shard into its shuffle buffer.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::StorageSection;
use super::{Adapt, Adapted, Dataset, StorageHints};

/// The emulated device behind the dataset.
pub struct Storage {
    latency: Duration,
    /// Bytes per second; 0 = unlimited.
    bytes_per_s: f64,
    /// 0 = unlimited.
    max_in_flight: usize,
    state: Mutex<Link>,
    freed: Condvar,
}

#[derive(Default)]
struct Link {
    /// When each request in flight has its bytes (those past are dropped as requests come).
    arrivals: Vec<Instant>,
    free_at: Option<Instant>,
}

impl Storage {
    pub fn new(s: &StorageSection) -> Storage {
        Storage {
            latency: Duration::from_secs_f64(s.latency_ms.max(0.0) / 1e3),
            bytes_per_s: s.bandwidth_mb_s.max(0.0) * 1e6,
            max_in_flight: s.max_in_flight as usize,
            state: Mutex::new(Link::default()),
            freed: Condvar::new(),
        }
    }

    /// One request of `bytes`: returns when they have arrived.
    pub fn request(&self, bytes: u64) {
        sleep_until(self.issue(bytes, true));
    }

    /// Issue a request of `bytes` (after the request's latency when `new`, else the next bytes
    /// of a stream already open) and return when they will have arrived. Blocks only while
    /// `max_in_flight` requests are in flight.
    pub fn issue(&self, bytes: u64, new: bool) -> Instant {
        let mut link = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            link.arrivals.retain(|&t| t > now);
            if self.max_in_flight == 0 || link.arrivals.len() < self.max_in_flight {
                break;
            }
            // A slot frees when the earliest request in flight has its bytes.
            let first = link.arrivals.iter().min().copied().unwrap_or(now);
            link = self
                .freed
                .wait_timeout(link, first.saturating_duration_since(now))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let first_byte = Instant::now() + if new { self.latency } else { Duration::ZERO };
        let done = if self.bytes_per_s > 0.0 {
            let start = link.free_at.map_or(first_byte, |f| f.max(first_byte));
            let done = start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_s);
            link.free_at = Some(done);
            done
        } else {
            first_byte
        };
        link.arrivals.push(done);
        done
    }
}

/// Sleep until `t` (at once if it has passed).
pub fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// A dataset behind emulated storage: reads are the dataset's own; its batches' requests wait
/// for the storage ([`StorageHints::request_batch`]).
pub struct Stored(pub Storage);

impl Adapt for Stored {
    fn describe(&self, inner: &dyn Dataset) -> String {
        format!("{} behind emulated storage", inner.describe())
    }
    /// Issue the request for image `index` on this reader: a new request, or the next bytes of
    /// a stored unit this reader has open.
    fn request(&self, stored: &Adapted<Self>, index: u32) -> Option<Instant> {
        let (bytes, new) = self.transfer_of(stored.inner.storage(), index);
        Some(self.0.issue(bytes, new))
    }
}

/// Streams a reader keeps open (per loader worker): a shard it opened this recently is read on
/// without a new request.
pub const OPEN_STREAMS: usize = 32;

thread_local! {
    /// (storage, unit) of the streams this thread opened, most recent last.
    static OPEN: RefCell<VecDeque<(usize, u32)>> = const { RefCell::new(VecDeque::new()) };
}

/// Forget the streams this thread opened: a new loader's reader starts with none open.
pub fn close_streams() {
    OPEN.with(|open| open.borrow_mut().clear());
}

impl Stored {
    /// Image `index`'s (bytes, whether it starts a new request) on this reader: every image of a
    /// dataset read file by file; the first of a stored unit this reader has not open.
    fn transfer_of(&self, inner: &dyn StorageHints, index: u32) -> (u64, bool) {
        let me = std::ptr::from_ref(self) as usize;
        OPEN.with(|open| {
            let mut open = open.borrow_mut();
            let bytes = inner.stored_len(index as usize).unwrap_or(0);
            let Some(unit) = inner.storage_unit(index as usize) else {
                return (bytes, true);
            };
            let key = (me, unit);
            if let Some(at) = open.iter().position(|k| *k == key) {
                open.remove(at);
                open.push_back(key);
                return (bytes, false);
            }
            if open.len() >= OPEN_STREAMS {
                open.pop_front();
            }
            open.push_back(key);
            (bytes, true)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::ImageShape;
    use std::sync::Arc;

    fn storage(latency_ms: f64, bandwidth_mb_s: f64, max_in_flight: u64) -> Arc<Storage> {
        Arc::new(Storage::new(&StorageSection {
            latency_ms,
            bandwidth_mb_s,
            max_in_flight,
        }))
    }

    fn parallel(s: &Arc<Storage>, threads: usize, each: usize, bytes: u64) -> Duration {
        let t = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    for _ in 0..each {
                        s.request(bytes);
                    }
                });
            }
        });
        t.elapsed()
    }

    #[test]
    fn latency_overlaps_across_readers_up_to_the_in_flight_limit() {
        // 8 readers × 2 requests of 10 ms: 20 ms when all may be in flight, 4 × 20 = 80 ms
        // when only 2 may.
        let free = parallel(&storage(10.0, 0.0, 0), 8, 2, 1000);
        assert!((19..40).contains(&free.as_millis()), "{free:?}");
        let capped = parallel(&storage(10.0, 0.0, 2), 8, 2, 1000);
        assert!((79..110).contains(&capped.as_millis()), "{capped:?}");
    }

    /// Images 0–9 in unit 0, 10–19 in unit 1; each 1000 bytes.
    struct Units;
    impl Dataset for Units {
        fn len(&self) -> usize {
            20
        }
        fn label(&self, _: usize) -> u8 {
            0
        }
        fn shape(&self) -> ImageShape {
            ImageShape::GREY_28
        }
        fn image_into(&self, _: usize, _: &mut [u8]) {}
        fn classes(&self) -> usize {
            1
        }
        fn describe(&self) -> String {
            "units".into()
        }
        fn storage(&self) -> &dyn StorageHints {
            self
        }
    }
    impl StorageHints for Units {
        fn stored_len(&self, _: usize) -> Option<u64> {
            Some(1000)
        }
        fn storage_unit(&self, index: usize) -> Option<u32> {
            Some(index as u32 / 10)
        }
    }

    #[test]
    fn a_stored_unit_is_one_request_per_reader() {
        let stored = Adapted {
            inner: Arc::new(Units),
            adapt: Stored(Storage::new(&StorageSection {
                latency_ms: 10.0,
                ..Default::default()
            })),
        };
        // Two batches spanning both units: one latency per unit, on this reader.
        let transfers = |indices: &[u32]| {
            indices
                .iter()
                .filter(|&&i| stored.adapt.transfer_of(&Units, i).1)
                .count()
        };
        assert_eq!(transfers(&[0, 1, 12, 2]), 2);
        assert_eq!(transfers(&[3, 13, 19]), 0);
        // Another reader opens its own streams.
        let other = std::thread::scope(|s| s.spawn(|| transfers(&[4])).join());
        assert_eq!(other.unwrap(), 1);
        // Ten images of one unit, one at a time: about one latency, not ten.
        let t = Instant::now();
        for i in 0..10 {
            sleep_until(stored.storage().request(i).unwrap());
        }
        assert!(t.elapsed() < Duration::from_millis(10), "{:?}", t.elapsed());
    }

    #[test]
    fn bandwidth_is_shared_by_every_reader() {
        // 20 requests of 100 kB at 20 MB/s: 100 ms whether 1 or 4 readers ask.
        for readers in [1, 4] {
            let took = parallel(&storage(0.0, 20.0, 0), readers, 20 / readers, 100_000);
            assert!((99..125).contains(&took.as_millis()), "{readers}: {took:?}");
        }
    }
}
