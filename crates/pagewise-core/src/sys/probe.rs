//! Run-time probes of what the running kernel supports, every one in this file. Each is tried
//! once and cached.
//!
//! Where each feature pagewise uses arrived (kernel version), and how its absence shows:
//! - cachestat(2): 6.5 ([`probe_cachestat`]; otherwise mmap(2) + mincore(2)).
//! - mincore(2) reporting every page resident for files the caller may not write: since 5.2
//!   (`mincore_is_truthful`, per file).
//! - io_uring: 5.1; the op used here (IORING_OP_READ): 5.6 ([`probe_io_uring`]).
//! - Transparent huge pages for file readahead ([`thp_file_readahead`]: the sysfs setting).
//! - `RWF_DONTCACHE` for preadv2/pwritev2: 6.14 (no probe: EOPNOTSUPP from the call says so,
//!   per filesystem).
//! - `RWF_NOWAIT`: 4.14; preadv2(2)/pwritev2(2): 4.6 (EOPNOTSUPP / ENOSYS from the call).
//! - `MADV_POPULATE_READ`: 5.14 (no probe: `populate_read` fails with EINVAL before it).
//! - `O_TMPFILE`: 3.11 (no probe: `open_tmpfile` fails with EOPNOTSUPP/EISDIR/EINVAL).
//! - `STATX_DIOALIGN`: 6.1 (`dio_align` returns None before it).
//! - perf_event_open(2) on tracepoints: 2.6.31; `use_clockid`: 4.1; tracefs: 4.1.
//! - SEEK_DATA/SEEK_HOLE: 3.1; copy_file_range(2): 4.5 (across filesystems: 5.19);
//!   syncfs(2): 2.6.39; sync_file_range(2): 2.6.17; FIEMAP: 2.6.28.
//! - open_by_handle_at(2): 2.6.39; PR_SET_CHILD_SUBREAPER: 3.4; close_range(2): 5.9;
//!   faccessat2(2) (`AT_EACCESS` without emulation): 5.8.

use std::sync::OnceLock;

use super::cachestat;

/// `int uname(struct utsname *buf)` — <https://man7.org/linux/man-pages/man2/uname.2.html>,
/// through rustix.
///
/// (major, minor) of the running kernel, from its release string ("6.8.0-45-generic" gives
/// (6, 8)); None if it does not start with two numbers. For messages and tests: the probes
/// below try the call itself, which also sees backports and sysctls.
pub fn kernel_version() -> Option<(u32, u32)> {
    static VERSION: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let uts = rustix::system::uname();
        let release = uts.release().to_str().ok()?;
        let mut it = release.split(|c: char| !c.is_ascii_digit());
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    })
}

/// Whether this kernel has cachestat(2) (Linux 6.5): probes it on a descriptor of this
/// program's own binary. EPERM counts as present (the call exists; it refused this file).
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

/// Whether io_uring can be set up here (Linux 5.1+, not disabled by the
/// `kernel.io_uring_disabled` sysctl or seccomp): sets up a two-entry ring and drops it.
pub fn probe_io_uring() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| io_uring::IoUring::new(2).is_ok())
}

/// Whether mappings marked MADV_HUGEPAGE get huge-folio readahead: transparent huge pages are
/// built in and not set to `never` (`/sys/kernel/mm/transparent_hugepage/enabled`, which shows
/// the active mode in brackets). Probed once.
pub fn thp_file_readahead() -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    *PROBE.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .map(|s| !s.contains("[never]"))
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel() -> (u32, u32) {
        kernel_version().expect("a numeric kernel release")
    }

    #[test]
    fn kernel_version_matches_proc() {
        let s = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let (major, minor) = kernel();
        assert!(
            s.starts_with(&format!("{major}.{minor}")),
            "{s} vs {major}.{minor}"
        );
        assert!(major >= 3);
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

    #[test]
    fn thp_probe_follows_sysfs() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        let want = mode.is_ok_and(|m| !m.contains("[never]"));
        assert_eq!(thp_file_readahead(), want);
    }
}
