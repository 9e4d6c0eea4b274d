//! perf_event_open(2): kernel tracepoints sampled into per-CPU ring buffers, and what keeps
//! them alive or spreads them over CPUs.
//!
//! rustix has no perf_event_open: the attribute is [`PerfEventAttr`], a `#[repr(C)]` copy of
//! the kernel's `struct perf_event_attr` (`PERF_ATTR_SIZE_VER7`, 128 bytes) with named fields
//! and named flag bits ([`AttrFlags`]), its layout asserted at compile time. The ring is mapped
//! with rustix's mmap. The attribute lives in `attr`; this file opens events, controls them
//! with their ioctls and reads their rings.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, cvt_long, page_size};

mod attr;
pub use attr::*;

/// `PERF_FLAG_FD_CLOEXEC` (since Linux 3.14): the event's descriptor is close-on-exec.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `PERF_EVENT_IOC_DISABLE`: `_IO('$', 1)`.
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
/// `PERF_EVENT_IOC_SET_OUTPUT`: `_IO('$', 5)`.
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
/// Record type in the ring: samples were lost (the ring was full).
pub const PERF_RECORD_LOST: u32 = 2;
/// Record type in the ring: one sample.
pub const PERF_RECORD_SAMPLE: u32 = 9;

/// `int perf_event_open(struct perf_event_attr *attr, pid_t pid, int cpu, int group_fd,
/// unsigned long flags)` — <https://man7.org/linux/man-pages/man2/perf_event_open.2.html>
/// (Linux 2.6.31; not in rustix: own wrapper). Always `PERF_FLAG_FD_CLOEXEC`.
///
/// Opens the event `attr` describes for `pid` (0: the calling thread, -1: any) on `cpu`
/// (-1: any), alone in its group. Fails with EACCES/EPERM when `perf_event_paranoid` and the
/// caller's capabilities forbid it, E2BIG when the kernel predates `attr.size`.
pub fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // The kernel writes its own size back into the attribute on E2BIG: give it a copy.
    let mut attr = *attr;
    // SAFETY: attr is a valid, fully initialised perf_event_attr of the size it declares
    // (asserted above), writable for the duration of the call.
    let fd = cvt_long(unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &mut attr as *mut PerfEventAttr,
            pid as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    })?;
    // SAFETY: fd was just returned by perf_event_open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// [`perf_event_open`] of [`PerfEventAttr::tracepoint`] for the calling thread on `cpu`.
///
/// Opens a perf event counting kernel tracepoint `id` (from tracefs `events/SYS/NAME/id`),
/// sampling every hit with the thread id, a CLOCK_MONOTONIC time (`use_clockid`: Linux 4.1)
/// and the tracepoint's raw record. With `inherit`, every thread and process created
/// afterwards by this thread (and theirs) is counted too, into this event's ring buffer. The
/// ring's reader is woken as `wake` says. The event counts from now on.
pub fn perf_tracepoint_open(
    id: u64,
    cpu: i32,
    inherit: bool,
    wake: PerfWake,
) -> io::Result<OwnedFd> {
    perf_tracepoint_open_for(id, 0, cpu, inherit, wake)
}

/// [`perf_tracepoint_open`] for thread `tid` (0: the calling thread) instead of the caller:
/// with `inherit`, the threads and processes `tid` starts from now on are counted too
/// (`assist -p`). Needs CAP_PERFMON (or CAP_SYS_ADMIN) for another user's thread.
pub fn perf_tracepoint_open_for(
    id: u64,
    tid: i32,
    cpu: i32,
    inherit: bool,
    wake: PerfWake,
) -> io::Result<OwnedFd> {
    perf_event_open(&PerfEventAttr::tracepoint(id, inherit, wake), tid, cpu)
}

/// [`perf_event_open`] of [`PerfEventAttr::software`] for thread `tid` (0: the calling thread)
/// on `cpu`: software counter `config` (e.g. [`PERF_COUNT_SW_PAGE_FAULTS_MAJ`]), every count
/// sampled with the thread, the time and the address; with `inherit`, the threads and
/// processes `tid` starts from now on are counted too. Counted in the kernel as well unless
/// `user_only` (page faults the kernel takes on user memory, e.g. `write(2)` from a mapped
/// file, are then not seen). Needs CAP_PERFMON for another user's thread, and for
/// `user_only = false` at `perf_event_paranoid` >= 2; nobody but root passes Debian's 3.
pub fn perf_software_open_for(
    config: u64,
    tid: i32,
    cpu: i32,
    inherit: bool,
    wake: PerfWake,
    user_only: bool,
) -> io::Result<OwnedFd> {
    perf_event_open(
        &PerfEventAttr::software(config, inherit, wake, user_only),
        tid,
        cpu,
    )
}

/// `int ioctl(int fd, PERF_EVENT_IOC_SET_OUTPUT, int target)` —
/// <https://man7.org/linux/man-pages/man2/perf_event_open.2.html> (own wrapper).
///
/// Sends `fd`'s samples into the ring buffer of `target` (an event on the same CPU).
pub fn perf_set_output(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both descriptors are open perf events; the argument is a descriptor number.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PERF_EVENT_IOC_SET_OUTPUT,
            target.as_raw_fd(),
        )
    })
    .map(drop)
}

/// `int ioctl(int fd, PERF_EVENT_IOC_DISABLE, 0)` —
/// <https://man7.org/linux/man-pages/man2/perf_event_open.2.html> (own wrapper).
///
/// Stops an event (and its inherited children) from counting.
pub fn perf_disable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fd is an open perf event; the ioctl takes no argument.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_DISABLE, 0) }).map(drop)
}

/// Offset of `data_head` in `struct perf_event_mmap_page`: after 1 KiB of fixed fields and
/// padding (`__reserved[118 * 8 + 4]`), so it starts a cache line of its own.
const MMAP_PAGE_DATA_HEAD: usize = 1024;
/// Offset of `data_tail`, the u64 after `data_head`: where the reader says what it has read.
const MMAP_PAGE_DATA_TAIL: usize = 1032;

/// A perf event's ring buffer, mapped: one metadata page (`struct perf_event_mmap_page`)
/// then 2^n data pages the kernel writes records into.
pub struct PerfRing {
    base: *mut u8,
    len: usize,
    /// Scratch for a record that wraps around the end of the data area.
    wrap: Vec<u8>,
}

// SAFETY: the mapping is owned by this value alone; the kernel is the only other writer and
// synchronisation with it goes through data_head/data_tail with acquire/release ordering.
unsafe impl Send for PerfRing {}

impl PerfRing {
    /// `mmap(NULL, (1 + data_pages) * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)` —
    /// <https://man7.org/linux/man-pages/man2/perf_event_open.2.html> ("MMAP layout"),
    /// through rustix.
    ///
    /// Maps `data_pages` (a power of two) of ring for the perf event `fd`. EINVAL when
    /// `data_pages` is not a power of two, EPERM/ENOMEM past `perf_event_mlock_kb`.
    pub fn map(fd: BorrowedFd<'_>, data_pages: usize) -> io::Result<PerfRing> {
        use rustix::mm::{MapFlags, ProtFlags};
        let len = (data_pages + 1) * page_size() as usize;
        // SAFETY: a fresh shared mapping of the event's ring, placed by the kernel.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        Ok(PerfRing {
            base: p.cast(),
            len,
            wrap: Vec::new(),
        })
    }

    /// Hands every complete record waiting in the ring to `f` as (type, body without the
    /// 8-byte header), then frees their space for the kernel.
    pub fn drain(&mut self, mut f: impl FnMut(u32, &[u8])) {
        use std::sync::atomic::{AtomicU64, Ordering};
        let page = page_size() as usize;
        // SAFETY: the metadata page is mapped for the life of self; data_head and data_tail
        // are naturally aligned u64s of struct perf_event_mmap_page, read with acquire (head:
        // the kernel's writes before it are visible) and written with release (tail: our
        // reads are done before the kernel may overwrite).
        let (head_a, tail_a, data, size) = unsafe {
            let head = &*(self.base.add(MMAP_PAGE_DATA_HEAD) as *const AtomicU64);
            let tail = &*(self.base.add(MMAP_PAGE_DATA_TAIL) as *const AtomicU64);
            let data = std::slice::from_raw_parts(self.base.add(page), self.len - page);
            (head, tail, data, self.len - page)
        };
        let head = head_a.load(Ordering::Acquire);
        let mut tail = tail_a.load(Ordering::Relaxed);
        while tail + 8 <= head {
            let at = (tail % size as u64) as usize;
            let hdr = |i: usize| data[(at + i) % size];
            let typ = u32::from_ne_bytes([hdr(0), hdr(1), hdr(2), hdr(3)]);
            let rsize = u16::from_ne_bytes([hdr(6), hdr(7)]) as usize;
            if rsize < 8 || tail + rsize as u64 > head {
                break;
            }
            let start = (at + 8) % size;
            let n = rsize - 8;
            if start + n <= size {
                f(typ, &data[start..start + n]);
            } else {
                self.wrap.clear();
                self.wrap.extend_from_slice(&data[start..]);
                self.wrap.extend_from_slice(&data[..n - (size - start)]);
                f(typ, &self.wrap);
            }
            tail += rsize as u64;
        }
        tail_a.store(tail, Ordering::Release);
    }
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: base/len describe the mapping made in map(), unmapped once.
        let _ = unsafe { rustix::mm::munmap(self.base.cast(), self.len) };
    }
}

/// CPUs that are online, from /sys/devices/system/cpu/online ("0-3,6"); [0..n) from
/// `sysconf(_SC_NPROCESSORS_ONLN)` (<https://man7.org/linux/man-pages/man3/sysconf.3.html>)
/// if unreadable. Per-CPU perf events are opened on each.
pub fn online_cpus() -> Vec<i32> {
    let mut v = Vec::new();
    if let Ok(s) = std::fs::read_to_string("/sys/devices/system/cpu/online") {
        for part in s.trim().split(',').filter(|p| !p.is_empty()) {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                v.extend(a..=b);
            }
        }
    }
    if v.is_empty() {
        // SAFETY: sysconf has no memory-safety preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1);
        v.extend(0..n as i32);
    }
    v
}

/// `pid_t fork(void)` twice, `pid_t setsid(void)`, `int close_range(unsigned first, unsigned
/// last, int flags)` (Linux 5.9) — <https://man7.org/linux/man-pages/man2/fork.2.html>,
/// <https://man7.org/linux/man-pages/man2/close_range.2.html>; libc, not rustix (see the list
/// in `sys`).
///
/// Starts a detached process (double fork, own session) that keeps the descriptors `keep`
/// open for `secs` seconds, then exits; every other descriptor is closed in it (close_range),
/// so no pipe a caller waits on stays open. Used to keep perf events — and so their
/// tracepoints' registration — alive after this process is done: the last close of a
/// tracepoint's perf events waits for an RCU grace period (tens of ms) under the kernel's
/// event lock, which a recording started right after would wait for. Returns once the
/// grandchild exists.
pub fn linger_detached(keep: &[BorrowedFd<'_>], secs: u32) -> io::Result<()> {
    let mut keep: Vec<libc::c_uint> = keep.iter().map(|f| f.as_raw_fd() as libc::c_uint).collect();
    keep.sort_unstable();
    keep.dedup();
    // SAFETY: between fork and _exit the children only call async-signal-safe functions
    // (fork, setsid, close_range, nanosleep, _exit) on memory prepared before the first fork.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            libc::setsid();
            if libc::fork() == 0 {
                super::close_all_but(&keep);
                let ts = libc::timespec {
                    tv_sec: secs as libc::time_t,
                    tv_nsec: 0,
                };
                libc::nanosleep(&ts, std::ptr::null_mut());
                libc::_exit(0);
            }
            libc::_exit(0);
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cold_file, require, scratch_dir};
    use super::*;
    use std::os::fd::AsFd;
    use std::path::PathBuf;

    #[test]
    fn online_cpus_are_listed_once_each() {
        let cpus = online_cpus();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]), "{cpus:?}");
        assert!(cpus.iter().all(|&c| c >= 0));
    }

    #[test]
    fn record_types_match_the_kernel_abi() {
        // include/uapi/linux/perf_event.h: PERF_RECORD_LOST = 2, PERF_RECORD_SAMPLE = 9.
        assert_eq!((PERF_RECORD_LOST, PERF_RECORD_SAMPLE), (2, 9));
    }

    /// tracefs, mounted at /sys/kernel/tracing already or here on a private directory
    /// (unmounted on drop).
    struct Tracefs {
        root: PathBuf,
        _private: Option<tempfile::TempDir>,
    }

    impl Tracefs {
        fn find() -> Option<Tracefs> {
            let sys = PathBuf::from("/sys/kernel/tracing");
            if sys.join("events").is_dir() {
                return Some(Tracefs {
                    root: sys,
                    _private: None,
                });
            }
            let dir = tempfile::tempdir().unwrap();
            if let Err(e) = super::super::mount_tracefs(dir.path()) {
                require(false, &format!("cannot mount tracefs (root): {e}"));
                return None;
            }
            Some(Tracefs {
                root: dir.path().to_path_buf(),
                _private: Some(dir),
            })
        }
    }

    impl Drop for Tracefs {
        fn drop(&mut self) {
            if self._private.is_some() {
                let _ = rustix::mount::unmount(&self.root, rustix::mount::UnmountFlags::DETACH);
            }
        }
    }

    #[test]
    fn a_tracepoint_samples_this_threads_page_cache_adds() {
        let Some(tfs) = Tracefs::find() else { return };
        let id_file = tfs
            .root
            .join("events/filemap/mm_filemap_add_to_page_cache/id");
        let id: u64 = std::fs::read_to_string(id_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let ev = match perf_tracepoint_open(id, -1, false, PerfWake::Samples(1)) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                require(false, &format!("perf_event_open refused: {e}"));
                return;
            }
            r => r.unwrap(),
        };
        let ev2 = perf_tracepoint_open(id, -1, false, PerfWake::Samples(1)).unwrap();
        // Only an event with a ring can be the target of another's samples.
        let e = perf_set_output(ev2.as_fd(), ev.as_fd()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let e = PerfRing::map(ev.as_fd(), 3).err().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "not a power of two");
        let mut ring = PerfRing::map(ev.as_fd(), 16).unwrap();
        perf_set_output(ev2.as_fd(), ev.as_fd()).unwrap();

        let dir = scratch_dir();
        let f = cold_file(dir.path(), "f", 8);
        let mut buf = vec![0u8; 8 * page_size() as usize];
        super::super::pread(f.as_fd(), &mut buf, 0).unwrap();

        let (mut samples, mut lost) = (0u64, 0u64);
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        ring.drain(|typ, body| match typ {
            PERF_RECORD_SAMPLE => {
                // TID: pid, tid; TIME: u64; RAW: u32 size, then the record.
                let u32_at = |o: usize| u32::from_ne_bytes(body[o..o + 4].try_into().unwrap());
                assert_eq!((u32_at(0), u32_at(4)), (std::process::id(), tid));
                let t = u64::from_ne_bytes(body[8..16].try_into().unwrap());
                assert!(t > 0 && t <= super::super::monotonic_ns());
                assert!(u32_at(16) > 0, "a raw record");
                samples += 1;
            }
            PERF_RECORD_LOST => lost += 1,
            _ => {}
        });
        // Both events count each page added: one per page (folios may be larger) per event.
        assert!(samples >= 2, "{samples} samples");
        assert_eq!(lost, 0);

        perf_disable(ev.as_fd()).unwrap();
        perf_disable(ev2.as_fd()).unwrap();
        let g = cold_file(dir.path(), "g", 8);
        super::super::pread(g.as_fd(), &mut buf, 0).unwrap();
        let mut after = 0;
        ring.drain(|_, _| after += 1);
        assert_eq!(after, 0, "disabled events sample nothing");
    }
}
