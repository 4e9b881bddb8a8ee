//! The compute threads of the training step: a rayon pool of a fixed size, built once per
//! thread count. Steps run inside [`ComputePool::install`], so the fast CPU layers (and candle's
//! kernels, which run on the current rayon pool) use exactly that many threads; no environment
//! variable is changed while threads run.

/// A fixed-size pool for the training step's CPU work.
pub struct ComputePool {
    pool: rayon::ThreadPool,
}

impl ComputePool {
    /// A pool of `threads` threads (at least one), named `compute-N` in traces and `top`.
    pub fn new(threads: usize) -> Result<ComputePool, rayon::ThreadPoolBuildError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("compute-{i}"))
            .build()?;
        Ok(ComputePool { pool })
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Run `f` with this pool as the current rayon pool.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_inside_the_pool_sees_its_thread_count() {
        for n in [1, 3] {
            let pool = ComputePool::new(n).unwrap();
            assert_eq!(pool.threads(), n);
            assert_eq!(pool.install(rayon::current_num_threads), n);
        }
    }
}
