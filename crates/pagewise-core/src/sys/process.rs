//! The process and its signals: sigaction(2), kill(2), prctl(2), getrlimit(2), mlock(2),
//! eventfd(2), poll(2), clock_gettime(2), mount(2), sysconf(3).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use super::cache::Mapping;
use super::{cstring, cvt};

/// Size of a page of the page cache, from `sysconf(_SC_PAGESIZE)`.
pub fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if v > 0 {
            v as u64
        } else {
            4096
        }
    })
}

/// A read-only shared mapping of a file range locked with mlock(2); unlocked and unmapped on drop.
pub struct LockedMapping {
    _map: Mapping,
}

// SAFETY: the mapping is never dereferenced by pagewise; it only pins pages. Moving the handle
// between threads is harmless.
unsafe impl Send for LockedMapping {}
unsafe impl Sync for LockedMapping {}

/// Maps `[off, off+len)` of `fd` (MAP_SHARED, PROT_READ) and locks it with
/// `int mlock(const void *addr, size_t len)` (<https://man7.org/linux/man-pages/man2/mlock.2.html>).
/// Fails with ENOMEM past RLIMIT_MEMLOCK (unprivileged) or vm.max_map_count, EPERM without
/// CAP_IPC_LOCK and a zero limit. The error says which call failed.
pub fn mmap_lock(
    fd: BorrowedFd<'_>,
    off: u64,
    len: u64,
) -> Result<LockedMapping, (crate::Op, io::Error)> {
    let map = Mapping::new(fd, off, len).map_err(|e| (crate::Op::Mmap, e))?;
    // SAFETY: locks exactly the live mapping created above.
    if unsafe { libc::mlock(map.addr, map.len) } < 0 {
        return Err((crate::Op::Mlock, io::Error::last_os_error()));
    }
    Ok(LockedMapping { _map: map })
}

/// The effective user id, from geteuid(2).
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Raises the soft RLIMIT_NOFILE to the hard limit, so batches of open files fit.
/// Returns the new soft limit.
pub fn raise_nofile_limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: rl is valid for reads and writes.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 {
            return 1024;
        }
        if rl.rlim_cur < rl.rlim_max {
            let want = libc::rlimit {
                rlim_cur: rl.rlim_max,
                rlim_max: rl.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return want.rlim_cur;
            }
        }
    }
    rl.rlim_cur
}

/// The soft RLIMIT_MEMLOCK in bytes (`u64::MAX` when unlimited).
pub fn memlock_limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: rl is valid for writes.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 {
        return 0;
    }
    if rl.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        rl.rlim_cur
    }
}

/// Blocks SIGINT and SIGTERM in the calling thread (and threads it spawns later), then waits for
/// one of them or for `timeout`. Returns the signal number, or None on timeout.
/// Uses `sigtimedwait(2)` (<https://man7.org/linux/man-pages/man2/sigtimedwait.2.html>).
pub fn wait_for_interrupt(timeout: Option<Duration>) -> Option<i32> {
    // SAFETY: set is initialised by sigemptyset before use; all pointers are to locals.
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        let mut set = set.assume_init();
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        loop {
            let r = match timeout {
                Some(t) => {
                    let ts = libc::timespec {
                        tv_sec: t.as_secs() as libc::time_t,
                        tv_nsec: t.subsec_nanos() as libc::c_long,
                    };
                    libc::sigtimedwait(&set, std::ptr::null_mut(), &ts)
                }
                None => libc::sigwaitinfo(&set, std::ptr::null_mut()),
            };
            if r > 0 {
                return Some(r);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EAGAIN) {
                return None;
            }
            // EINTR: try again (timeout restarts; acceptable for a hold loop).
        }
    }
}

/// Current number of memory mappings of this process (lines of /proc/self/maps) and the
/// system's vm.max_map_count, for a clear message before mapping thousands of files.
pub fn map_count_and_limit() -> (u64, u64) {
    let used = std::fs::read("/proc/self/maps")
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .unwrap_or(0);
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65530);
    (used, limit)
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The last signal received by [`on_interrupt`] (0: none).
static LAST_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// The child that received signals are forwarded to (0: none yet).
static FORWARD_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// A signal sent with kill(2) before [`forward_signals_to`] named the child (0: none).
static FORWARD_PENDING: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// `si_code` of signals the kernel generates itself, such as the terminal's SIGINT/SIGQUIT
/// (sent to the whole foreground process group, so the child has it already).
const SI_KERNEL: i32 = 0x80;

extern "C" fn on_interrupt(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    use std::sync::atomic::Ordering::SeqCst;
    INTERRUPTED.store(true, SeqCst);
    LAST_SIGNAL.store(sig, SeqCst);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_code }
    };
    let child = FORWARD_TO.load(SeqCst);
    // The terminal's signals reach its whole foreground process group, the command included,
    // unless the command left the group (setsid) — then it is sent here. A hangup goes to the
    // session leader, which pagewise may be: always passed on.
    // SAFETY: getpgid/getpgrp are plain syscalls without pointers.
    if code == SI_KERNEL
        && sig != libc::SIGHUP
        && (child <= 0 || unsafe { libc::getpgid(child) == libc::getpgrp() })
    {
        return;
    }
    // Stored first, taken by whoever sees both: this handler, or forward_signals_to naming
    // the child at the same moment. The signal is sent once, never lost.
    FORWARD_PENDING.store(sig, SeqCst);
    let child = FORWARD_TO.load(SeqCst);
    if child > 0 {
        let pending = FORWARD_PENDING.swap(0, SeqCst);
        if pending > 0 {
            // SAFETY: kill(2) is async-signal-safe; no pointers.
            unsafe { libc::kill(child, pending) };
        }
    }
}

fn install_handlers(sigs: &[libc::c_int]) {
    for &sig in sigs {
        // SAFETY: sa is fully initialised (zeroed, then handler, flags and mask set); the
        // handler only stores to atomics and calls kill(2), which are async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_interrupt as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Installs SIGINT/SIGTERM handlers that only set a flag (async-signal-safe), so long
/// operations can stop between I/Os and clean up (never leave a half file under a final name).
/// Returns the flag. `sigaction(2)`: <https://man7.org/linux/man-pages/man2/sigaction.2.html>.
pub fn interrupt_flag() -> &'static std::sync::atomic::AtomicBool {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| install_handlers(&[libc::SIGINT, libc::SIGTERM]));
    &INTERRUPTED
}

/// Signals a supervisor (`record`, `run`) survives and forwards to its command.
pub const FORWARDED_SIGNALS: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Makes this process survive SIGINT, SIGTERM, SIGHUP and SIGQUIT; call before starting the
/// command, then name it with [`forward_signals_to`]. Signals sent with kill(2) are forwarded
/// to the command as they are; those the terminal sends (si_code SI_KERNEL) reach the whole
/// foreground process group, the command included, and are not sent twice.
pub fn supervise_signals() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    let _ = interrupt_flag();
    INSTALLED.get_or_init(|| install_handlers(&FORWARDED_SIGNALS));
}

/// Stops forwarding (call once the child is reaped: its PID may be reused).
pub fn stop_forwarding() {
    FORWARD_TO.store(0, std::sync::atomic::Ordering::SeqCst);
}

/// Names the child that signals received from now on are forwarded to; one received while
/// it was being started is sent now.
pub fn forward_signals_to(pid: u32) {
    use std::sync::atomic::Ordering::SeqCst;
    FORWARD_TO.store(pid as i32, SeqCst);
    let pending = FORWARD_PENDING.swap(0, SeqCst);
    if pending > 0 {
        let _ = kill(pid, pending);
    }
}

/// The last of the handled signals received (None: none).
pub fn last_signal() -> Option<i32> {
    match LAST_SIGNAL.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Makes this process the subreaper of what it starts (`prctl(PR_SET_CHILD_SUBREAPER)`,
/// Linux 3.4): descendants orphaned by the command are reparented here, not to init, so they
/// can be found with [`children_of`].
pub fn become_subreaper() {
    // SAFETY: no pointers; the flag only changes who adopts orphans.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Processes whose parent is `pid` (from /proc/PID/stat), zombies excluded.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for ent in dir.flatten() {
        let Some(child) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_ascii_whitespace();
        let state = f.next();
        let ppid = f.next().and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) && state != Some("Z") {
            out.push(child);
        }
    }
    out
}

/// Sends `sig` to `pid` (`kill(2)`).
pub fn kill(pid: u32, sig: i32) -> io::Result<()> {
    // SAFETY: no pointers involved.
    cvt(unsafe { libc::kill(pid as libc::pid_t, sig) }).map(drop)
}

/// Waits up to `timeout_ms` for `fd` to become readable: poll(2) with POLLIN
/// (<https://man7.org/linux/man-pages/man2/poll.2.html>). Ok(true) when readable.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: p is one valid pollfd for the duration of the call.
    let n = cvt(unsafe { libc::poll(&mut p, 1, timeout_ms) })?;
    Ok(n > 0)
}

/// `eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)` (<https://man7.org/linux/man-pages/man2/eventfd.2.html>):
/// a descriptor that [`eventfd_signal`] makes readable, to wake a thread in poll.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no pointers involved.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: fd was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes an [`eventfd`] readable (adds 1 to its counter).
pub fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64.
    cvt(unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) as libc::c_int })
        .map(drop)
}

/// Waits up to `timeout_ms` for any of `fds` to become readable: poll(2) with POLLIN.
pub fn poll_any_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> io::Result<bool> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: p holds p.len() valid pollfds for the duration of the call.
    let n = cvt(unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) })?;
    Ok(n > 0)
}

/// Mounts tracefs at `target`: `mount("nodev", target, "tracefs", 0, NULL)`
/// (<https://man7.org/linux/man-pages/man2/mount.2.html>; needs CAP_SYS_ADMIN).
pub fn mount_tracefs(target: &Path) -> io::Result<()> {
    let t = cstring(target)?;
    // SAFETY: all strings are valid C strings; data is NULL.
    cvt(unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            t.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// CLOCK_MONOTONIC in nanoseconds (`clock_gettime(2)`), the clock of tracefs' `mono` trace clock.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is valid for writes.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Restores the default SIGPIPE action, so `pagewise ... | head` ends quietly like other
/// Unix tools instead of reporting EPIPE (Rust ignores SIGPIPE by default).
pub fn default_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_DFL has no memory-safety preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn page_size_is_a_power_of_two() {
        let p = page_size();
        assert!(p >= 4096 && p.is_power_of_two(), "{p}");
    }

    #[test]
    fn monotonic_clock_does_not_go_back() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }

    #[test]
    fn eventfd_wakes_poll() {
        let e = eventfd().unwrap();
        assert!(!poll_readable(e.as_fd(), 0).unwrap());
        eventfd_signal(e.as_fd()).unwrap();
        assert!(poll_readable(e.as_fd(), 0).unwrap());
        assert!(poll_any_readable(&[e.as_fd()], 0).unwrap());
    }

    #[test]
    fn limits_and_maps_are_sane() {
        let (used, limit) = map_count_and_limit();
        assert!(used > 0 && limit > 0);
        // Signal 0 checks that this process exists and may be signalled.
        kill(std::process::id(), 0).unwrap();
    }
}
