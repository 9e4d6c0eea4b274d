//! perf_event_open(2): kernel tracepoints sampled into per-CPU ring buffers, and what keeps
//! them alive or spreads them over CPUs.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, page_size};

/// Bytes of `struct perf_event_attr` we pass (PERF_ATTR_SIZE_VER7).
const PERF_ATTR_SIZE: usize = 128;
const PERF_TYPE_TRACEPOINT: u32 = 2;
/// sample_type bits: PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW.
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
const PERF_SAMPLE_RAW: u64 = 1 << 10;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// ioctls: _IO('$', 0), _IO('$', 1), _IO('$', 5).
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
/// Record types in the ring.
pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_SAMPLE: u32 = 9;

/// Opens a perf event counting kernel tracepoint `id` (from tracefs `events/SYS/NAME/id`) for
/// the calling thread on `cpu`, sampling every hit with the thread id, a CLOCK_MONOTONIC time
/// and the tracepoint's raw record: `perf_event_open(2)`
/// (<https://man7.org/linux/man-pages/man2/perf_event_open.2.html>). With `inherit`, every
/// thread and process created afterwards by this thread (and theirs) is counted too, into this
/// event's ring buffer. The ring's reader is woken when `wakeup_bytes` are waiting, or at every
/// sample with None. The event counts from now on.
pub fn perf_tracepoint_open(
    id: u64,
    cpu: i32,
    inherit: bool,
    wakeup_bytes: Option<u32>,
) -> io::Result<OwnedFd> {
    let mut attr = [0u8; PERF_ATTR_SIZE];
    let put32 =
        |a: &mut [u8], off: usize, v: u32| a[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    let put64 =
        |a: &mut [u8], off: usize, v: u64| a[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    put32(&mut attr, 0, PERF_TYPE_TRACEPOINT);
    put32(&mut attr, 4, PERF_ATTR_SIZE as u32);
    put64(&mut attr, 8, id);
    put64(&mut attr, 16, 1); // sample_period: every hit
    put64(
        &mut attr,
        24,
        PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW,
    );
    // Flags: inherit (bit 1), watermark (bit 14: wake up by bytes), use_clockid (bit 25).
    let mut flags: u64 = 1 << 25;
    if inherit {
        flags |= 1 << 1;
    }
    if wakeup_bytes.is_some() {
        flags |= 1 << 14;
    }
    put64(&mut attr, 40, flags);
    // wakeup_watermark (bytes) with the watermark flag, else wakeup_events.
    put32(&mut attr, 48, wakeup_bytes.unwrap_or(1).max(1));
    put32(&mut attr, 92, libc::CLOCK_MONOTONIC as u32); // clockid
                                                        // SAFETY: attr is a valid, fully initialised perf_event_attr of the size it declares.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0 as libc::pid_t,
            cpu,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by perf_event_open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `fd`'s samples into the ring buffer of `target` (same CPU):
/// `ioctl(PERF_EVENT_IOC_SET_OUTPUT)`.
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

/// Stops an event (and its inherited children) from counting: `ioctl(PERF_EVENT_IOC_DISABLE)`.
pub fn perf_disable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fd is an open perf event; the ioctl takes no argument.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_DISABLE, 0) }).map(drop)
}

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
    /// Maps `data_pages` (a power of two) of ring for the perf event `fd`.
    pub fn map(fd: BorrowedFd<'_>, data_pages: usize) -> io::Result<PerfRing> {
        let len = (data_pages + 1) * page_size() as usize;
        // SAFETY: a fresh shared mapping of the event's ring; checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
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
        // are naturally aligned u64s at offsets 1024 and 1032 of struct perf_event_mmap_page,
        // read with acquire (head: the kernel's writes before it are visible) and written with
        // release (tail: our reads are done before the kernel may overwrite).
        let (head_a, tail_a, data, size) = unsafe {
            let head = &*(self.base.add(1024) as *const AtomicU64);
            let tail = &*(self.base.add(1032) as *const AtomicU64);
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
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// CPUs that are online, from /sys/devices/system/cpu/online ("0-3,6"); [0..n) if unreadable.
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
                let mut from: libc::c_uint = 0;
                for &k in &keep {
                    if k > from {
                        libc::syscall(libc::SYS_close_range, from, k - 1, 0);
                    }
                    from = k + 1;
                }
                libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0);
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
    use super::*;

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
}
