//! Run-time probes of what the running kernel supports. Each is tried once and cached.
//!
//! Where each feature pagewise uses arrived (kernel version):
//! - cachestat(2): 6.5 ([`probe_cachestat`]; otherwise mincore(2), see `mincore_is_truthful`).
//! - io_uring: 5.1; the ops used here (IORING_OP_READ): 5.6 ([`probe_io_uring`]).
//! - `RWF_DONTCACHE` for preadv2/pwritev2: 6.14 (no probe: EOPNOTSUPP from the call says so).
//! - `MADV_POPULATE_READ`: 5.14 (no probe: `populate_read` fails with EINVAL before it).
//! - `O_TMPFILE`: 3.11 (no probe: `open_tmpfile` fails with EOPNOTSUPP/EISDIR/EINVAL).
//! - `STATX_DIOALIGN`: 6.1 (`dio_align` returns None before it).
//! - perf_event_open(2) on tracepoints: 2.6.31; `use_clockid`: 4.1.
//! - SEEK_DATA/SEEK_HOLE: 3.1; copy_file_range(2): 4.5; preadv2(2): 4.6; syncfs(2): 2.6.39.
//! - open_by_handle_at(2): 2.6.39; PR_SET_CHILD_SUBREAPER: 3.4; close_range(2): 5.9.
//! - mincore(2) reporting every page resident for files the caller may not write: since 5.2.
//! - Transparent huge pages for file readahead: `thp_file_readahead` reads the sysfs setting.

use std::sync::OnceLock;

use super::cachestat;

/// Whether this kernel has cachestat(2): probes it on a descriptor of this program's own binary.
/// EPERM counts as present (the call exists; it refused this file).
pub fn probe_cachestat() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| match std::fs::File::open("/proc/self/exe") {
        Ok(f) => {
            use std::os::fd::AsFd;
            !matches!(cachestat(f.as_fd(), 0, 0), Err(e) if e.raw_os_error() == Some(libc::ENOSYS))
        }
        Err(_) => true,
    })
}

/// Whether io_uring can be set up here (Linux 5.1+, not disabled by sysctl or seccomp).
pub fn probe_io_uring() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| io_uring::IoUring::new(2).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (major, minor) of the running kernel, from /proc/sys/kernel/osrelease.
    fn kernel() -> (u32, u32) {
        let s = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut it = s.trim().split(|c: char| !c.is_ascii_digit());
        let major = it.next().unwrap().parse().unwrap();
        let minor = it.next().unwrap().parse().unwrap();
        (major, minor)
    }

    #[test]
    fn probe_cachestat_finds_it_since_6_5() {
        if kernel() >= (6, 5) {
            assert!(probe_cachestat());
        }
        assert_eq!(probe_cachestat(), probe_cachestat(), "cached answer");
    }

    #[test]
    fn probe_io_uring_is_stable() {
        // io_uring may be disabled by sysctl or seccomp, so only consistency is checked, and
        // that it is absent before 5.1.
        let has = probe_io_uring();
        assert_eq!(has, probe_io_uring());
        if kernel() < (5, 1) {
            assert!(!has);
        }
    }
}
