//! The only module with `unsafe`: one thin, documented wrapper per system call, plus run-time
//! probes for what the kernel supports.
//!
//! Every wrapper returns `std::io::Result` with the raw OS error, so callers can name the path
//! and the syscall (`SysError`) when something fails. Nothing here allocates per page or holds
//! state beyond the file descriptors it is handed.
//!
//! One file per family, after rustix's layout; everything is re-exported here, so callers name
//! `sys::cachestat`, `sys::OpenFlags`, ... whatever file it lives in:
//! - `cache`: page-cache state and control (cachestat, mincore, fadvise, ...);
//! - `fs`: files, directories, filesystems;
//! - `io`: positioned reads and writes, aligned buffers;
//! - `uring`: batched reads through io_uring;
//! - `perf`: tracepoints through perf_event_open;
//! - `process`: signals, limits, child processes, clocks;
//! - `probe`: what the running kernel supports, and since which version.
//!
//! Wrappers kept here because rustix (not a dependency today) has no API for them:
//! - cachestat(2): page-cache counters of a file range ([`cachestat`]).
//! - FIEMAP (`FS_IOC_FIEMAP` ioctl): physical extents of a file ([`fiemap`]).
//! - open_by_handle_at(2): open a file by inode number ([`open_by_inode`]).
//! - perf_event_open(2): tracepoint events and their ring buffers ([`perf_tracepoint_open`]).
//! - `RWF_DONTCACHE`: uncached buffered preadv2/pwritev2 ([`RWF_DONTCACHE`]).
//! - `BLKGETSIZE64` ioctl: the size of a block device ([`block_device_size`]).
//! - `MADV_POPULATE_READ`: fault a file range into the page cache ([`populate_read`]).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

mod cache;
mod fs;
mod io;
mod perf;
mod probe;
mod process;
mod uring;

pub use cache::*;
pub use fs::*;
pub use io::*;
pub use perf::*;
pub use probe::*;
pub use process::*;
pub use uring::*;

// Helpers shared by the family files (private to `sys`; child modules see them).

fn cvt(ret: libc::c_int) -> std::io::Result<libc::c_int> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_long(ret: libc::c_long) -> std::io::Result<libc::c_long> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cstring(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains a NUL byte")
    })
}
