//! The only module with `unsafe` (the crate denies `unsafe_code`; the family files that make
//! system calls allow it at their top): one thin, documented wrapper per system call, plus run-time
//! probes for what the kernel supports.
//!
//! Every wrapper returns `std::io::Result` with the raw OS error, so callers can name the path
//! and the syscall (`FileError::io(path, Op::X, &e)`) when something fails. Nothing here
//! allocates per page or holds state beyond the file descriptors it is handed. Each wrapper's
//! doc opens with the C signature and its man page, then the kernel that added it where that
//! matters.
//!
//! One file per family, after rustix's layout; everything is re-exported here, so callers name
//! `sys::cachestat`, `sys::OpenFlags`, ... whatever file it lives in:
//! - `cache`: page-cache state and control (cachestat, mincore, fadvise, sync_file_range,
//!   populate);
//! - `fs`: files, directories, filesystems;
//! - `io`: positioned reads and writes with typed `RWF_*` flags, aligned buffers;
//! - `uring`: batched reads through io_uring (the `io-uring` crate);
//! - `perf`: tracepoints through perf_event_open, with a `#[repr(C)]` attribute struct;
//! - `process`: limits, memory locks, polling, clocks, scheduling, pidfds;
//! - `signal`: signal handlers, forwarding to a child, waiting for an interrupt;
//! - `daemon`: detaching `load --lock --daemon` (fork with a report pipe, setsid, stdio onto
//!   /dev/null, waitpid);
//! - `probe`: what the running kernel supports, and since which version;
//! - `kpage`: which memory cgroup cached pages are charged to (pagemap + kpagecgroup).
//!
//! # rustix, and what it lacks
//! The calls go through [`rustix`] (raw system calls, typed flags, `&CStr` paths without
//! allocation) wherever it has them: openat, fstat/fstatat, statx, getdents64 (`RawDir`),
//! lseek SEEK_DATA/SEEK_HOLE, fallocate, copy_file_range, xattrs, linkat, syncfs, fstatfs,
//! flock, posix_fadvise, mmap/munmap/mlock/madvise, pread/preadv2/pwritev2, geteuid,
//! getpgid/getpgrp, kill, getrlimit/setrlimit, prctl(PR_SET_CHILD_SUBREAPER), poll, eventfd,
//! clock_gettime, mount, uname, fcntl(F_GETFL/F_SETFL), fdatasync, ftruncate and the page size.
//!
//! Own wrappers, over `libc`, only where rustix 1.1 has no API for the call:
//! - cachestat(2) (Linux 6.5): page-cache counters of a file range ([`cachestat`]).
//! - mincore(2): residency of the pages of a mapping ([`mincore_count`]).
//! - sync_file_range(2): write back a range's data pages ([`sync_file_range`]).
//! - `FS_IOC_FIEMAP` ioctl: physical extents of a file ([`fiemap`]).
//! - `BLKGETSIZE64` ioctl: the size of a block device ([`block_device_size`]).
//! - open_by_handle_at(2): open a file by inode number ([`open_by_inode`]).
//! - perf_event_open(2) and its `PERF_EVENT_IOC_*` ioctls: tracepoint events and their ring
//!   buffers ([`perf_tracepoint_open`], [`PerfEventAttr`]).
//! - `RWF_DONTCACHE` (Linux 6.14): rustix has preadv2/pwritev2 but no name for this flag;
//!   [`RwFlags::DONTCACHE`] passes its bit through rustix's `ReadWriteFlags`.
//! - sigaction(2), sigtimedwait(2), pthread_sigmask(3), signal(3): rustix has them only in its
//!   unstable `runtime` API for programs without libc, which must not be mixed with libc's
//!   signal handling ([`interrupt_flag`], [`wait_for_interrupt`], [`default_sigpipe`]).
//! - fork(2) and what runs between it and _exit(2) in the detached helper processes
//!   (setsid, signal, close_range, read, open, write, close, rmdir, nanosleep; waitpid in the
//!   parent) ([`watchdog`], [`linger_detached`]): fork is in the same unstable API, and the
//!   child makes only these async-signal-safe libc calls on memory prepared before it.
//! - fork(2) of a single-threaded process and dup2(2) onto the standard descriptors, to
//!   detach a daemon ([`fork_with_report`], [`detach_stdio`]): fork is in the unstable API,
//!   dup2 onto stdio behind rustix's `stdio` feature.
//! - sysconf(`_SC_NPROCESSORS_ONLN`): the fallback of [`online_cpus`].

#![deny(missing_docs)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

mod cache;
mod clock;
mod daemon;
mod fs;
mod io;
mod kpage;
mod perf;
mod probe;
mod process;
mod seccomp;
mod signal;
mod uring;
mod users;

pub use cache::*;
pub use clock::*;
pub use daemon::*;
pub use fs::*;
pub use io::*;
pub use kpage::*;
pub use perf::*;
pub use probe::*;
pub use process::*;
pub use seccomp::*;
pub use signal::*;
pub use uring::*;
pub use users::*;

/// A file's identity: its device `(major, minor)` and inode, as the tracepoints, /proc/PID/maps
/// and stat(2) (through [`FileId::from_dev`]) all give it. The one key pagewise files are
/// matched by across those sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FileId(
    /// Device major.
    pub u32,
    /// Device minor.
    pub u32,
    /// Inode.
    pub u64,
);

impl FileId {
    /// From a `dev_t` (stat(2)'s `st_dev`) and an inode.
    pub fn from_dev(dev: u64, ino: u64) -> FileId {
        FileId(libc::major(dev), libc::minor(dev), ino)
    }

    /// The device as a `dev_t`.
    pub fn dev(self) -> u64 {
        libc::makedev(self.0, self.1)
    }

    /// The inode.
    pub fn ino(self) -> u64 {
        self.2
    }
}

// Helpers shared by the family files (private to `sys`; child modules see them).

/// A libc call's `int` result: negative means failure, with the reason in errno.
fn cvt(ret: libc::c_int) -> std::io::Result<libc::c_int> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// [`cvt`] for `syscall(2)`, which returns a `long`.
fn cvt_long(ret: libc::c_long) -> std::io::Result<libc::c_long> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A path as a C string, for the libc calls that need one prepared in advance (after fork(2)
/// nothing may allocate).
/// `path` itself when it has no NUL byte, else the error pagewise has always given for one
/// (InvalidInput, "path contains a NUL byte", no errno) rather than the kernel's EINVAL.
fn no_nul(path: &Path) -> std::io::Result<&Path> {
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(nul_error());
    }
    Ok(path)
}

fn nul_error() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains a NUL byte")
}

fn cstring(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| nul_error())
}

/// The end-to-end tests' capability gate, whose `require` the unit tests use too.
#[cfg(test)]
#[path = "../../../../tests/common/require.rs"]
mod require_gate;

/// Test helpers shared by the families' tests.
#[cfg(test)]
mod testing {
    use std::io::Write;
    use std::os::fd::AsFd;

    /// A scratch directory on a disk filesystem: the system's temporary directory unless it
    /// is tmpfs (whose pages no advice drops), else next to the test binary.
    pub fn scratch_dir() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let f = std::fs::File::open(tmp.path()).unwrap();
        if !super::is_shmem(f.as_fd()) {
            return tmp;
        }
        let exe = std::env::current_exe().unwrap();
        tempfile::tempdir_in(exe.parent().unwrap()).unwrap()
    }

    /// A file of `pages` pages of a known pattern in `dir`, written back and then dropped
    /// from the page cache, so each test starts from cold pages.
    pub fn cold_file(dir: &std::path::Path, name: &str, pages: u64) -> std::fs::File {
        let page = super::page_size() as usize;
        let path = dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .unwrap();
        let data: Vec<u8> = (0..pages as usize * page)
            .map(|i| (i % 251) as u8)
            .collect();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        super::fadvise(f.as_fd(), 0, 0, super::Advice::DontNeed).unwrap();
        f
    }

    /// The capability gate of the unit tests: the end-to-end tests' own (tests/common
    /// `require`), included from its file so there is one rule.
    pub use super::require_gate::require;
}
