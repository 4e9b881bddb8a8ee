//! The page cache under a dataset's files: how much of them it holds (`mincore` over a
//! read-only mapping of each file) and dropping them from it (`posix_fadvise(DONTNEED)`, which
//! needs no privileges and drops only clean pages). `dataset.page_cache = "cold"` drops them
//! before each timed window, so "reading" costs what the disk costs; the residency measured
//! at the window's start says whether that worked (tmpfs and some filesystems ignore the
//! advice).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Drop every file's pages from the page cache (written back first where a recent write left
/// them dirty); returns how many files could not be opened or advised.
pub fn evict(files: &[PathBuf]) -> usize {
    let mut failed = 0;
    for path in files {
        let Ok(file) = File::open(path) else {
            failed += 1;
            continue;
        };
        // Only clean pages can be dropped: write back any a recent write left dirty.
        let _ = file.sync_data();
        // SAFETY: the descriptor is open for the call's duration; offset 0 and length 0 mean
        // the whole file; the call only advises the kernel.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            failed += 1;
        }
    }
    failed
}

/// Read every file once, so the page cache holds them (as far as memory allows).
pub fn warm(files: &[PathBuf]) {
    let mut buf = vec![0u8; 1 << 20];
    for path in files {
        let Ok(mut file) = File::open(path) else {
            continue;
        };
        while matches!(std::io::Read::read(&mut file, &mut buf), Ok(n) if n > 0) {}
    }
}

/// At most this many files are measured by [`resident`], evenly spaced (a folder of a million
/// images would otherwise take seconds per run).
pub const RESIDENT_SAMPLE: usize = 4096;

/// The share of the files' pages the page cache holds (over an even sample of at most
/// [`RESIDENT_SAMPLE`] files), or None when no file could be measured.
pub fn resident(files: &[PathBuf]) -> Option<f64> {
    let every = files.len().div_ceil(RESIDENT_SAMPLE).max(1);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let (mut held, mut total) = (0u64, 0u64);
    let mut vec = Vec::new();
    for path in files.iter().step_by(every) {
        let Ok(file) = File::open(path) else { continue };
        let Ok(len) = file.metadata().map(|m| m.len() as usize) else {
            continue;
        };
        if len == 0 {
            continue;
        }
        let pages = len.div_ceil(page);
        // SAFETY: a fresh read-only shared mapping of an open file of `len` bytes; nothing
        // reads through it (mincore only asks which of its pages are resident), and it is
        // unmapped below before `file` closes.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            continue;
        }
        vec.clear();
        vec.resize(pages, 0u8);
        // SAFETY: `map` is page-aligned and spans `len` bytes; `vec` holds one byte per page
        // of that span, as mincore requires.
        let rc = unsafe { libc::mincore(map, len, vec.as_mut_ptr()) };
        // SAFETY: `map` and `len` are exactly what mmap returned and was given.
        unsafe { libc::munmap(map, len) };
        if rc != 0 {
            continue;
        }
        held += vec.iter().filter(|&&b| b & 1 == 1).count() as u64;
        total += pages as u64;
    }
    (total > 0).then(|| held as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn a_read_file_is_resident_and_an_evicted_one_is_not() {
        // Under the target folder (a disk), not /tmp, which may be a tmpfs that cannot evict.
        let dir = tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/target")).unwrap();
        let path = dir.path().join("data.bin");
        {
            let mut f = File::create(&path).unwrap();
            let block: Vec<u8> = (0..1 << 20).map(|i| (i * 7 % 251) as u8).collect();
            for _ in 0..16 {
                f.write_all(&block).unwrap();
            }
            f.sync_all().unwrap();
        }
        let files = vec![path.clone()];
        assert_eq!(evict(&files), 0);
        warm(&files);
        let held = resident(&files).unwrap();
        assert!(held > 0.95, "{held} resident after a read");
        assert_eq!(evict(&files), 0);
        let cold = resident(&files).unwrap();
        if cold > 0.05 {
            eprintln!("this filesystem ignores POSIX_FADV_DONTNEED: {cold} still resident");
        } else {
            assert!(cold <= 0.05);
        }
        assert_eq!(resident(&[dir.path().join("missing")]), None);
    }
}
