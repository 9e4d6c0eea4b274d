//! The process and its signals: sigaction(2), kill(2), prctl(2), getrlimit(2), mlock(2),
//! eventfd(2), poll(2), clock_gettime(2), mount(2), the page size.
//!
//! rustix has all of these but the signal-handling calls (sigaction, sigtimedwait,
//! pthread_sigmask, signal), which stay on libc: rustix offers them only to programs without
//! libc.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use rustix::process::{Pid, Resource, Rlimit, Signal};

use super::cache::Mapping;

/// `long sysconf(_SC_PAGESIZE)` — <https://man7.org/linux/man-pages/man3/sysconf.3.html>; read
/// by rustix from the auxiliary vector (`AT_PAGESZ`), no system call.
///
/// Size of a page of the page cache in bytes.
pub fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// A read-only shared mapping of a file range locked with mlock(2); unlocked and unmapped on drop.
pub struct LockedMapping {
    _map: Mapping,
    /// The file offset the mapping starts at.
    off: u64,
}

impl LockedMapping {
    /// `int mincore(void *addr, size_t length, unsigned char *vec)` over this mapping —
    /// <https://man7.org/linux/man-pages/man2/mincore.2.html>, one window of at most
    /// [`super::MINCORE_WINDOW`] at a time.
    ///
    /// The bytes of the file range `[start, end)` whose pages are resident in this locked
    /// mapping, i.e. locked: the kernel's figure, each page counted only for its bytes inside
    /// the range (a 10,000-byte file locks 10,000 bytes in three pages).
    pub fn resident_bytes(&self, start: u64, end: u64) -> io::Result<u64> {
        let page = page_size();
        let map_len = self._map.len as u64;
        let mut vec: Vec<u8> = Vec::new();
        let mut done = 0u64;
        let mut bytes = 0u64;
        while done < map_len {
            let win = (map_len - done).min(super::MINCORE_WINDOW);
            let pages = win.div_ceil(page) as usize;
            vec.clear();
            vec.try_reserve(pages)
                .map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
            vec.resize(pages, 0);
            // SAFETY: `done + win` lies within the live mapping this value owns (`done` is a
            // multiple of the page-aligned window), and vec has one byte per page of it.
            super::cvt(unsafe {
                libc::mincore(
                    (self._map.addr as *mut u8).add(done as usize).cast(),
                    win as usize,
                    vec.as_mut_ptr(),
                )
            })?;
            for (i, b) in vec.iter().enumerate() {
                if b & 1 == 1 {
                    let a = self.off + done + i as u64 * page;
                    bytes += (a + page).min(end).saturating_sub(a.max(start));
                }
            }
            done += win;
        }
        Ok(bytes)
    }
}

// SAFETY: the mapping is never dereferenced by pagewise; it only pins pages. Moving the handle
// between threads is harmless.
unsafe impl Send for LockedMapping {}
unsafe impl Sync for LockedMapping {}

/// `int mlock(const void *addr, size_t len)` —
/// <https://man7.org/linux/man-pages/man2/mlock.2.html>, after mmap(2), through rustix.
///
/// Maps `[off, off+len)` of `fd` (MAP_SHARED, PROT_READ) and locks it: its pages are read in
/// and stay in the page cache until the returned value is dropped. Fails with ENOMEM past
/// RLIMIT_MEMLOCK (unprivileged) or vm.max_map_count, EPERM without CAP_IPC_LOCK and a zero
/// limit. The error says which call failed.
pub fn mmap_lock(
    fd: BorrowedFd<'_>,
    off: u64,
    len: u64,
) -> Result<LockedMapping, (crate::Op, io::Error)> {
    let map = Mapping::new(fd, off, len).map_err(|e| (crate::Op::Mmap, e))?;
    // SAFETY: locks exactly the live mapping created above (munmap on drop unlocks it).
    unsafe { rustix::mm::mlock(map.addr, map.len) }.map_err(|e| (crate::Op::Mlock, e.into()))?;
    Ok(LockedMapping { _map: map, off })
}

/// `uid_t geteuid(void)` — <https://man7.org/linux/man-pages/man2/geteuid.2.html>, through
/// rustix. The effective user id.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// `int getrlimit(int resource, struct rlimit *rlim)` then `setrlimit` —
/// <https://man7.org/linux/man-pages/man2/getrlimit.2.html>, through rustix.
///
/// Raises the soft RLIMIT_NOFILE to the hard limit, so batches of open files fit.
/// Returns the new soft limit (`u64::MAX` when unlimited); the old one if raising fails.
pub fn raise_nofile_limit() -> u64 {
    let rl = rustix::process::getrlimit(Resource::Nofile);
    let soft = rl.current.unwrap_or(u64::MAX);
    let hard = rl.maximum.unwrap_or(u64::MAX);
    if soft < hard {
        let want = Rlimit {
            current: rl.maximum,
            maximum: rl.maximum,
        };
        if rustix::process::setrlimit(Resource::Nofile, want).is_ok() {
            return hard;
        }
    }
    soft
}

/// Descriptors a verb may hold open at once: RLIMIT_NOFILE (raised to its hard limit first,
/// see [`raise_nofile_limit`]) less a reserve of 64 for what every run opens anyway. Verbs
/// that keep files open in batches size the batches from it, so a tree of 100k files fits a
/// limit of 1024 as well as one of 1M.
pub fn fd_budget() -> usize {
    let soft = raise_nofile_limit().min(1 << 20) as usize;
    soft.saturating_sub(64).max(64)
}

/// Each of `workers` threads' share of half the [`fd_budget`] (the other half left for what
/// the run holds besides their batches).
pub fn fd_budget_per_worker(workers: usize) -> usize {
    fd_budget() / 2 / workers.max(1)
}

/// `int getrlimit(RLIMIT_MEMLOCK, struct rlimit *rlim)` —
/// <https://man7.org/linux/man-pages/man2/getrlimit.2.html>, through rustix.
///
/// The soft RLIMIT_MEMLOCK in bytes (`u64::MAX` when unlimited).
pub fn memlock_limit() -> u64 {
    rustix::process::getrlimit(Resource::Memlock)
        .current
        .unwrap_or(u64::MAX)
}

/// `int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *timeout)` —
/// <https://man7.org/linux/man-pages/man2/sigtimedwait.2.html>, after pthread_sigmask(3);
/// libc (see the list in `sys`).
///
/// Blocks SIGINT and SIGTERM in the calling thread (and threads it spawns later), then waits for
/// one of them or for `timeout`. Returns the signal number, or None on timeout.
pub fn wait_for_interrupt(timeout: Option<Duration>) -> Option<i32> {
    let set = block_interrupts();
    // SAFETY: set is initialised; all pointers are to locals.
    unsafe {
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

/// `int pthread_sigmask(int how, const sigset_t *set, sigset_t *oldset)` with `SIG_BLOCK` —
/// <https://man7.org/linux/man-pages/man3/pthread_sigmask.3.html>; libc.
///
/// Blocks SIGINT and SIGTERM in the calling thread, so one sent from now on stays pending for
/// [`wait_for_interrupt`] instead of killing the process: call it before saying "holding"
/// (a signal sent right after that line used to kill `load --lock` by the default action).
/// Returns the blocked set (SIGINT and SIGTERM).
pub fn block_interrupts() -> libc::sigset_t {
    // SAFETY: set is initialised by sigemptyset before use; all pointers are to locals.
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        let mut set = set.assume_init();
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
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
    // getpgid, getpgrp and kill are plain system calls through rustix: async-signal-safe.
    if code == SI_KERNEL
        && sig != libc::SIGHUP
        && (child <= 0
            || rustix::process::getpgid(Pid::from_raw(child)).ok()
                == Some(rustix::process::getpgrp()))
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
            let _ = kill(child as u32, pending);
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

/// `int sigaction(int signum, const struct sigaction *act, struct sigaction *oldact)` —
/// <https://man7.org/linux/man-pages/man2/sigaction.2.html>; libc (see the list in `sys`).
///
/// Installs SIGINT/SIGTERM handlers that only set a flag (async-signal-safe), so long
/// operations can stop between I/Os and clean up (never leave a half file under a final name).
/// Returns the flag. Installed once per process.
pub fn interrupt_flag() -> &'static std::sync::atomic::AtomicBool {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| install_handlers(&[libc::SIGINT, libc::SIGTERM]));
    &INTERRUPTED
}

/// Signals a supervisor (`record`, `run`) survives and forwards to its command.
pub const FORWARDED_SIGNALS: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// sigaction(2) for [`FORWARDED_SIGNALS`], like [`interrupt_flag`].
///
/// Makes this process survive SIGINT, SIGTERM, SIGHUP and SIGQUIT; call before starting the
/// command, then name it with [`forward_signals_to`]. Signals sent with kill(2) are forwarded
/// to the command as they are; those the terminal sends (si_code SI_KERNEL) reach the whole
/// foreground process group, the command included, and are not sent twice.
///
/// Installed again at every call (sigaction is idempotent): a host process that put its own
/// handlers back after a command (the Python binding, with [`SignalActions`]) has them
/// replaced again for the next one.
pub fn supervise_signals() {
    let _ = interrupt_flag();
    install_handlers(&FORWARDED_SIGNALS);
}

/// The actions of some signals as they were when [`SignalActions::save`] read them, to put
/// back with [`SignalActions::restore`]: a host process (the Python interpreter) keeps its
/// own handlers around a `record` or `run`, which install pagewise's.
pub struct SignalActions(Vec<(libc::c_int, libc::sigaction)>);

impl SignalActions {
    /// `int sigaction(int signum, NULL, struct sigaction *oldact)` —
    /// <https://man7.org/linux/man-pages/man2/sigaction.2.html>; libc (see the list in `sys`).
    ///
    /// Reads the current action of each of `sigs`.
    pub fn save(sigs: &[i32]) -> SignalActions {
        let mut v = Vec::with_capacity(sigs.len());
        for &sig in sigs {
            // SAFETY: querying only (act is NULL), into a zeroed sigaction owned here.
            let old = unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    continue;
                }
                old
            };
            v.push((sig, old));
        }
        SignalActions(v)
    }

    /// `int sigaction(int signum, const struct sigaction *act, NULL)` — puts the saved actions
    /// back.
    pub fn restore(&self) {
        for (sig, act) in &self.0 {
            // SAFETY: act is an action the kernel handed out for this signal in save().
            unsafe { libc::sigaction(*sig, act, std::ptr::null_mut()) };
        }
    }
}

/// `pid_t gettid(void)` — <https://man7.org/linux/man-pages/man2/gettid.2.html>, through
/// rustix. The calling thread's id (the process id on the main thread).
pub fn gettid() -> u32 {
    rustix::thread::gettid().as_raw_nonzero().get() as u32
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

/// `int prctl(PR_SET_CHILD_SUBREAPER, 1)` —
/// <https://man7.org/linux/man-pages/man2/PR_SET_CHILD_SUBREAPER.2const.html> (Linux 3.4),
/// through rustix.
///
/// Makes this process the subreaper of what it starts: descendants orphaned by the command
/// are reparented here, not to init, so they can be found with [`children_of`]. Cannot fail
/// on 3.4+; a failure before that only loses the orphans, so it is ignored.
pub fn become_subreaper() {
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
}

/// Every process and its parent `(pid, ppid)`, from /proc/PID/stat, zombies excluded.
fn parents() -> Vec<(u32, u32)> {
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
        if let (Some(ppid), false) = (ppid, state == Some("Z")) {
            out.push((child, ppid));
        }
    }
    out
}

/// Processes whose parent is `pid` (from /proc/PID/stat), zombies excluded.
pub fn children_of(pid: u32) -> Vec<u32> {
    parents()
        .into_iter()
        .filter(|&(_, ppid)| ppid == pid)
        .map(|(child, _)| child)
        .collect()
}

/// Processes descending from `pids` now (children, their children, ...; `pids` themselves
/// not included), zombies excluded: one scan of /proc.
pub fn descendants_of(pids: &[u32]) -> Vec<u32> {
    let all = parents();
    let mut out = Vec::new();
    let mut todo: Vec<u32> = pids.to_vec();
    while let Some(p) = todo.pop() {
        for &(child, _) in all.iter().filter(|&&(_, ppid)| ppid == p) {
            if !out.contains(&child) && !pids.contains(&child) {
                out.push(child);
                todo.push(child);
            }
        }
    }
    out
}

/// `int kill(pid_t pid, int sig)` — <https://man7.org/linux/man-pages/man2/kill.2.html>,
/// through rustix.
///
/// Sends `sig` to the process `pid`; signal 0 only checks that it exists and may be signalled.
/// EINVAL for pid 0 or past `i32::MAX` (process groups are not addressed here) and for signal
/// numbers that are neither 0 nor a named signal.
pub fn kill(pid: u32, sig: i32) -> io::Result<()> {
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(einval)?;
    if sig == 0 {
        return Ok(rustix::process::test_kill_process(pid)?);
    }
    let sig = Signal::from_named_raw(sig).ok_or_else(einval)?;
    Ok(rustix::process::kill_process(pid, sig)?)
}

/// `int poll(struct pollfd *fds, nfds_t nfds, int timeout)` with POLLIN —
/// <https://man7.org/linux/man-pages/man2/poll.2.html>, through rustix.
///
/// Waits up to `timeout_ms` (negative: forever) for `fd` to become readable. Ok(true) when
/// readable.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    poll_any_readable(&[fd], timeout_ms)
}

/// `int eventfd(unsigned int initval, int flags)` with `(0, EFD_CLOEXEC | EFD_NONBLOCK)` —
/// <https://man7.org/linux/man-pages/man2/eventfd.2.html>, through rustix.
///
/// A descriptor that [`eventfd_signal`] makes readable, to wake a thread in poll.
pub fn eventfd() -> io::Result<OwnedFd> {
    use rustix::event::EventfdFlags;
    Ok(rustix::event::eventfd(
        0,
        EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
    )?)
}

/// `ssize_t write(int fd, const void *buf, size_t count)` of one u64 1 —
/// <https://man7.org/linux/man-pages/man2/eventfd.2.html>, through rustix.
///
/// Makes an [`eventfd`] readable (adds 1 to its counter).
pub fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::io::write(fd, &1u64.to_ne_bytes())?;
    Ok(())
}

/// `int poll(struct pollfd *fds, nfds_t nfds, int timeout)` with POLLIN on each —
/// <https://man7.org/linux/man-pages/man2/poll.2.html>, through rustix.
///
/// Waits up to `timeout_ms` (negative: forever) for any of `fds` to become readable. Ok(true)
/// when one is; EINTR is returned, not retried.
pub fn poll_any_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut p: Vec<PollFd<'_>> = fds
        .iter()
        .map(|&fd| PollFd::from_borrowed_fd(fd, PollFlags::IN))
        .collect();
    let timeout = (timeout_ms >= 0).then(|| Timespec {
        tv_sec: (timeout_ms / 1000).into(),
        tv_nsec: ((timeout_ms % 1000) * 1_000_000).into(),
    });
    let n = rustix::event::poll(&mut p, timeout.as_ref())?;
    Ok(n > 0)
}

/// `int mount(const char *source, const char *target, const char *filesystemtype, unsigned
/// long mountflags, const void *data)` with `("nodev", target, "tracefs", 0, NULL)` —
/// <https://man7.org/linux/man-pages/man2/mount.2.html> (tracefs: Linux 4.1), through rustix.
///
/// Mounts tracefs at `target`; needs CAP_SYS_ADMIN.
pub fn mount_tracefs(target: &Path) -> io::Result<()> {
    use rustix::mount::MountFlags;
    Ok(rustix::mount::mount(
        c"nodev",
        target,
        c"tracefs",
        MountFlags::empty(),
        None,
    )?)
}

/// `int clock_gettime(CLOCK_MONOTONIC, struct timespec *tp)` —
/// <https://man7.org/linux/man-pages/man2/clock_gettime.2.html>, through rustix (vDSO).
///
/// CLOCK_MONOTONIC in nanoseconds, the clock of tracefs' `mono` trace clock and of the
/// perf samples' `use_clockid`.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `sighandler_t signal(int signum, sighandler_t handler)` with `(SIGPIPE, SIG_DFL)` —
/// <https://man7.org/linux/man-pages/man2/signal.2.html>; libc (see the list in `sys`).
///
/// Restores the default SIGPIPE action, so `pagewise ... | head` ends quietly like other
/// Unix tools instead of reporting EPIPE (Rust ignores SIGPIPE by default).
pub fn default_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_DFL has no memory-safety preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cold_file, require, scratch_dir};
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn page_size_is_a_power_of_two() {
        let p = page_size();
        assert!(p >= 4096 && p.is_power_of_two(), "{p}");
        // SAFETY: sysconf has no memory-safety preconditions.
        assert_eq!(p, unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64);
    }

    #[test]
    fn monotonic_clock_does_not_go_back() {
        let a = monotonic_ns();
        std::thread::sleep(Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(a > 0 && b >= a + 2_000_000, "{a} {b}");
    }

    #[test]
    fn eventfd_wakes_poll() {
        let e = eventfd().unwrap();
        let other = eventfd().unwrap();
        assert!(!poll_readable(e.as_fd(), 0).unwrap());
        assert!(!poll_any_readable(&[e.as_fd(), other.as_fd()], 10).unwrap());
        eventfd_signal(e.as_fd()).unwrap();
        assert!(poll_readable(e.as_fd(), 0).unwrap());
        assert!(
            poll_readable(e.as_fd(), -1).unwrap(),
            "no timeout: ready at once"
        );
        assert!(poll_any_readable(&[other.as_fd(), e.as_fd()], 0).unwrap());
    }

    #[test]
    fn limits_and_maps_are_sane() {
        let (used, limit) = map_count_and_limit();
        assert!(used > 0 && limit > 0);
        let before = rustix::process::getrlimit(Resource::Nofile);
        let soft = raise_nofile_limit();
        assert_eq!(Some(soft).filter(|&s| s != u64::MAX), before.maximum);
        assert_eq!(raise_nofile_limit(), soft, "already raised");
        let memlock = rustix::process::getrlimit(Resource::Memlock).current;
        assert_eq!(memlock_limit(), memlock.unwrap_or(u64::MAX));
    }

    #[test]
    fn euid_is_the_one_proc_shows() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        // Uid: real effective saved filesystem
        let effective: u32 = uids.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert_eq!(euid(), effective);
    }

    #[test]
    fn mmap_lock_brings_pages_in_and_holds_them() {
        let dir = scratch_dir();
        let f = cold_file(dir.path(), "f", 8);
        let len = 8 * page_size();
        let lock = match mmap_lock(f.as_fd(), 0, len) {
            Err((op, e)) if euid() != 0 => {
                require(false, &format!("{op:?} refused without privileges: {e}"));
                return;
            }
            r => r.unwrap(),
        };
        let resident = || super::super::mincore_count(f.as_fd(), 0, len, None).unwrap();
        assert_eq!(resident(), 8);
        // Locked pages survive DONTNEED (they are mapped), and are droppable once unlocked.
        super::super::fadvise(f.as_fd(), 0, 0, super::super::Advice::DontNeed).unwrap();
        assert_eq!(resident(), 8);
        drop(lock);
        super::super::fadvise(f.as_fd(), 0, 0, super::super::Advice::DontNeed).unwrap();
        assert_eq!(resident(), 0);
        let (op, e) = mmap_lock(f.as_fd(), 0, 0).err().unwrap();
        assert_eq!(
            (op, e.raw_os_error()),
            (crate::Op::Mmap, Some(libc::EINVAL))
        );
    }

    #[test]
    fn kill_and_children_of_see_a_child() {
        let me = std::process::id();
        kill(me, 0).unwrap(); // exists and may be signalled
        let einval = |r: io::Result<()>| r.unwrap_err().raw_os_error() == Some(libc::EINVAL);
        assert!(einval(kill(0, libc::SIGTERM)), "no process groups");
        assert!(einval(kill(me, 1000)), "no such signal");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(children_of(me).contains(&child.id()));
        kill(child.id(), libc::SIGKILL).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(!children_of(me).contains(&child.id()), "reaped");
    }

    #[test]
    fn wait_for_interrupt_times_out() {
        let t = std::time::Instant::now();
        assert_eq!(wait_for_interrupt(Some(Duration::from_millis(20))), None);
        assert!(t.elapsed() >= Duration::from_millis(20));
    }

    /// Runs [`signals_in_a_child_process`] in a fresh copy of this test binary: handlers,
    /// the subreaper flag and SIGPIPE's action are process-wide, and signalling this process
    /// would stop the other tests' work.
    #[test]
    fn signals_are_handled_and_forwarded() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "sys::process::tests::signals_in_a_child_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    const CHILD_ENV: &str = "PAGEWISE_SYS_SIGNAL_CHILD";

    /// Only does something under [`signals_are_handled_and_forwarded`].
    #[test]
    fn signals_in_a_child_process() {
        if std::env::var_os(CHILD_ENV).is_none() {
            return;
        }
        use std::os::unix::process::ExitStatusExt;
        become_subreaper();
        assert!(rustix::process::child_subreaper().unwrap().is_some());

        // SIGPIPE: ignored by Rust's runtime, default again after default_sigpipe.
        let action = || {
            // SAFETY: querying the disposition only (act is NULL), into a zeroed sigaction.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old);
                old.sa_sigaction
            }
        };
        assert_eq!(action(), libc::SIG_IGN);
        default_sigpipe();
        assert_eq!(action(), libc::SIG_DFL);

        supervise_signals();
        let flag = interrupt_flag();
        assert!(!flag.load(SeqCst) && last_signal().is_none());
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        forward_signals_to(sleeper.id());
        // Sent with kill(2) (si_code SI_USER): this process survives and passes it on.
        kill(std::process::id(), libc::SIGTERM).unwrap();
        let status = sleeper.wait().unwrap();
        stop_forwarding();
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        assert!(flag.load(SeqCst));
        assert_eq!(last_signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn descendants_are_found_through_every_generation() {
        // sh -> sh -> sleep: both generations below the first are found.
        let mut top = std::process::Command::new("sh")
            .args(["-c", "sh -c 'sleep 5 & wait' & wait"])
            .spawn()
            .unwrap();
        let me = top.id();
        let comms_of = |pids: &[u32]| -> Vec<String> {
            pids.iter()
                .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).ok())
                .map(|c| c.trim().to_string())
                .collect()
        };
        // Until the grandchild has exec'd sleep (a forked child is "sh" for a moment).
        let (mut found, mut comms) = (Vec::new(), Vec::new());
        for _ in 0..300 {
            found = descendants_of(&[me]);
            comms = comms_of(&found);
            if comms.iter().any(|c| c == "sleep") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Ends exactly the processes this test started, by PID.
        let _ = std::process::Command::new("kill")
            .args(found.iter().map(|p| p.to_string()))
            .status();
        let _ = top.kill();
        let _ = top.wait();
        assert!(comms.contains(&"sleep".to_string()), "{found:?} {comms:?}");
        assert!(!found.contains(&me));
    }

    #[test]
    fn maps_lines_parse_file_mappings_only() {
        let m = parse_maps_line(
            b"7f1c2a400000-7f1c2a600000 r--s 00200000 fe:01 15597634                   /var/tmp/a b",
        )
        .unwrap();
        assert_eq!(
            m,
            FileMapping {
                start: 0x7f1c2a400000,
                end: 0x7f1c2a600000,
                offset: 0x200000,
                dev: (0xfe, 1),
                ino: 15597634
            }
        );
        assert!(
            parse_maps_line(b"7ffd1c9e2000-7ffd1ca03000 rw-p 00000000 00:00 0  [stack]").is_none()
        );
        assert!(parse_maps_line(b"garbage").is_none());
        assert_eq!(m.addresses_of(0x200000, 4096), Some((0x7f1c2a400000, 4096)));
        assert_eq!(m.addresses_of(0x1ff000, 8192), Some((0x7f1c2a400000, 4096)));
        assert_eq!(
            m.addresses_of(0x3ff000, 0x10000),
            Some((0x7f1c2a5ff000, 4096))
        );
        assert_eq!(m.addresses_of(0x400000, 4096), None);
        assert_eq!(m.addresses_of(0, 4096), None);
        let mut bad = b"55d0c0a00000-55d0c0a02000 r--p 00000000 08:02 42 /x/".to_vec();
        bad.extend_from_slice(&[0xff, 0xfe]);
        assert_eq!(parse_maps_line(&bad).unwrap().ino, 42);
    }

    #[test]
    fn own_mapping_of_a_file_is_found() {
        let dir = std::env::temp_dir().join(format!("pw-maps-{}", std::process::id()));
        std::fs::write(&dir, vec![1u8; 8192]).unwrap();
        let f = std::fs::File::open(&dir).unwrap();
        let st = crate::sys::fstat(std::os::fd::AsFd::as_fd(&f)).unwrap();
        // SAFETY: a fresh read-only shared mapping of an open file, unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        let maps = file_mappings(std::process::id()).unwrap();
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(addr, 8192) };
        std::fs::remove_file(&dir).unwrap();
        assert!(maps
            .iter()
            .any(|m| m.start == addr as u64 && m.ino == st.ino));
        assert_eq!(tgid_of(gettid()), Some(std::process::id()));
    }
}

/// How a thread of ours is scheduled (see [`set_thread_class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadClass {
    /// `SCHED_IDLE`: runs only when nothing else wants the CPU; any other thread waking up
    /// takes the CPU from it (background work that must not delay the target).
    Background,
    /// `SCHED_OTHER`, the default (its nice value is kept).
    Normal,
}

/// `sched_setscheduler(tid, ...)` — <https://man7.org/linux/man-pages/man2/sched_setscheduler.2.html>:
/// sets thread `tid`'s scheduling class (0: the calling thread; Linux applies it to the
/// thread, not the process). Leaving `SCHED_IDLE` needs CAP_SYS_NICE (or a permissive
/// RLIMIT_NICE); another thread of ours is allowed (same user).
pub fn set_thread_class(tid: u32, class: ThreadClass) -> io::Result<()> {
    let policy = match class {
        ThreadClass::Background => libc::SCHED_IDLE,
        ThreadClass::Normal => libc::SCHED_OTHER,
    };
    let param = libc::sched_param { sched_priority: 0 };
    let tid = libc::pid_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: `param` is a valid sched_param that lives across the call; `tid` is a plain
    // thread id (0: the caller).
    let r = unsafe { libc::sched_setscheduler(tid, policy, &param) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Gives thread `tid` nice `nice` and, on kernels with EEVDF custom slices (6.12+), a time
/// slice of `slice_ns` (the kernel clamps it to 0.1–100 ms): a thread that sleeps most of the
/// time and must run the moment it wakes gets an earlier deadline than the busy threads beside
/// it, so its wake-up preempts them instead of waiting for their slice to end. Older kernels
/// ignore the slice of a SCHED_OTHER thread; the nice still applies.
pub fn set_thread_latency(tid: u32, nice: i32, slice_ns: u64) -> io::Result<()> {
    let attr = libc::sched_attr {
        size: std::mem::size_of::<libc::sched_attr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_flags: 0,
        sched_nice: nice,
        sched_priority: 0,
        sched_runtime: slice_ns,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: `attr` is a valid sched_attr of the size it states, alive for the call; the
    // kernel checks the thread id and the permission.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid as libc::pid_t,
            &attr as *const libc::sched_attr,
            0u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A process's mapping of a file: addresses `[start, end)` show the file from byte `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMapping {
    /// First address.
    pub start: u64,
    /// Address past the end.
    pub end: u64,
    /// The file offset mapped at `start`.
    pub offset: u64,
    /// The file's device (major, minor).
    pub dev: (u32, u32),
    /// The file's inode.
    pub ino: u64,
}

impl FileMapping {
    /// Where bytes `[off, off + len)` of the file are mapped here: `(address, bytes)`, None
    /// when this mapping shows none of them.
    pub fn addresses_of(&self, off: u64, len: u64) -> Option<(u64, u64)> {
        let (from, to) = (
            off.max(self.offset),
            (off + len).min(self.offset + (self.end - self.start)),
        );
        (from < to).then(|| (self.start + (from - self.offset), to - from))
    }
}

/// The file mappings of process `pid`, from `/proc/PID/maps` (anonymous ones left out).
pub fn file_mappings(pid: u32) -> io::Result<Vec<FileMapping>> {
    let text = std::fs::read(format!("/proc/{pid}/maps"))?;
    Ok(text
        .split(|&b| b == b'\n')
        .filter_map(parse_maps_line)
        .collect())
}

/// One line of `/proc/PID/maps`: `start-end perms offset major:minor inode [path]`, numbers
/// in hex except the inode. None for anonymous mappings (inode 0) and malformed lines.
fn parse_maps_line(line: &[u8]) -> Option<FileMapping> {
    let line = std::str::from_utf8(line.get(..line.len().min(120))?)
        .ok()
        .or_else(|| {
            // The path may be cut inside a UTF-8 sequence: the numbers come before it.
            let end = line.iter().position(|&b| b >= 0x80)?;
            std::str::from_utf8(&line[..end]).ok()
        })?;
    let mut f = line.split_ascii_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let _perms = f.next()?;
    let offset = u64::from_str_radix(f.next()?, 16).ok()?;
    let (major, minor) = f.next()?.split_once(':')?;
    let ino: u64 = f.next()?.parse().ok()?;
    if ino == 0 {
        return None;
    }
    Some(FileMapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset,
        dev: (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        ),
        ino,
    })
}

/// The process (thread group) a thread belongs to, from `/proc/TID/status`.
pub fn tgid_of(tid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// `pidfd_open(pid, 0)` — <https://man7.org/linux/man-pages/man2/pidfd_open.2.html>, through
/// rustix.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// `process_madvise(pidfd, iov, n, MADV_PAGEOUT, 0)` —
/// <https://man7.org/linux/man-pages/man2/process_madvise.2.html> (Linux 5.10; rustix lacks
/// it): asks the kernel to reclaim the pages of another process's address ranges
/// `(address, bytes)`; clean file pages mapped by that process alone leave the page cache.
/// Needs CAP_SYS_NICE and ptrace access to the process. Returns the bytes advised.
pub fn process_madvise_pageout(pidfd: BorrowedFd<'_>, ranges: &[(u64, u64)]) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    let mut done = 0u64;
    // At most IOV_MAX (1024) ranges a call.
    for chunk in ranges.chunks(1024) {
        let iov: Vec<libc::iovec> = chunk
            .iter()
            .map(|&(addr, len)| libc::iovec {
                iov_base: addr as *mut libc::c_void,
                iov_len: len as usize,
            })
            .collect();
        // SAFETY: `iov` is a valid array of `iov.len()` iovecs that lives across the call;
        // the addresses are the other process's, which the kernel never dereferences here.
        let r = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                pidfd.as_raw_fd(),
                iov.as_ptr(),
                iov.len(),
                libc::MADV_PAGEOUT,
                0u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        done += r as u64;
    }
    Ok(done)
}
