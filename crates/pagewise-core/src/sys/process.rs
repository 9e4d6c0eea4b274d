//! The process: kill(2), prctl(2), getrlimit(2), mlock(2), eventfd(2), poll(2),
//! clock_gettime(2), mount(2), scheduling classes, I/O priorities (ioprio_set(2)), pidfds and process_madvise(2), the page
//! size, through rustix where it has them. Signal handling is in `signal`; what /proc says
//! about processes is read by [`crate::procfs`].
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

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

/// [`fd_budget`], but never more than half the limit: under `ulimit -n 64` 32, where
/// [`fd_budget`]'s floor of 64 is the whole limit. What the trace verbs (record, run, assist,
/// replay, load/evict --trace) share among the files they keep open and open again.
pub fn fd_budget_strict() -> usize {
    let soft = raise_nofile_limit().min(1 << 20) as usize;
    fd_budget().min(soft / 2).max(1)
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

/// `pid_t gettid(void)` — <https://man7.org/linux/man-pages/man2/gettid.2.html>, through
/// rustix. The calling thread's id (the process id on the main thread).
pub fn gettid() -> u32 {
    rustix::thread::gettid().as_raw_nonzero().get() as u32
}

/// `int prctl(PR_SET_CHILD_SUBREAPER, 1)` —
/// <https://man7.org/linux/man-pages/man2/PR_SET_CHILD_SUBREAPER.2const.html> (Linux 3.4),
/// through rustix.
///
/// Makes this process the subreaper of what it starts: descendants orphaned by the command
/// are reparented here, not to init, so they can be found with
/// [`crate::procfs::children_of`]. Cannot fail on 3.4+; a failure before that only loses the
/// orphans, so it is ignored.
pub fn become_subreaper() {
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
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

/// Whether capability number `cap` (`CAP_*` of `<linux/capability.h>`) is in this process's
/// effective set (CapEff of /proc/self/status, read once): root in a container or under a
/// unit's bounding set lacks many.
pub fn has_capability(cap: u32) -> bool {
    static CAPS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let caps = *CAPS.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let hex = s
                    .lines()
                    .find_map(|l| l.strip_prefix("CapEff:"))?
                    .trim()
                    .to_string();
                u64::from_str_radix(&hex, 16).ok()
            })
            .unwrap_or(0)
    });
    cap < 64 && caps & (1 << cap) != 0
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

/// `int close_range(unsigned int first, unsigned int last, 0)` (Linux 5.9) —
/// <https://man7.org/linux/man-pages/man2/close_range.2.html>; libc, not rustix: every
/// descriptor but `keep` (sorted, without duplicates) closed, else (ENOSYS) close(2) of each
/// below the soft RLIMIT_NOFILE. Only system calls on the slice given: async-signal-safe,
/// for the detached helpers' children (after fork).
pub(super) fn close_all_but(keep: &[libc::c_uint]) {
    let mut from: libc::c_uint = 0;
    let mut ok = true;
    for &k in keep {
        if k > from {
            // SAFETY: close_range takes no pointers.
            ok &= unsafe { libc::syscall(libc::SYS_close_range, from, k - 1, 0) } == 0;
        }
        from = k + 1;
    }
    // SAFETY: close_range takes no pointers.
    ok &= unsafe { libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0) } == 0;
    if ok {
        return;
    }
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given; close takes no pointers.
    unsafe {
        let last = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 {
            rl.rlim_cur.min(1 << 16) as libc::c_uint
        } else {
            1024
        };
        for fd in 0..last {
            if !keep.contains(&fd) {
                libc::close(fd as libc::c_int);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cold_file, require, scratch_dir};
    use super::*;
    use std::os::fd::AsFd;

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
        std::thread::sleep(std::time::Duration::from_millis(2));
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
    fn limits_are_sane() {
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
        assert!(crate::procfs::children_of(me).contains(&child.id()));
        kill(child.id(), libc::SIGKILL).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(
            !crate::procfs::children_of(me).contains(&child.id()),
            "reaped"
        );
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
        let maps = crate::procfs::file_mappings(std::process::id()).unwrap();
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(addr, 8192) };
        std::fs::remove_file(&dir).unwrap();
        assert!(maps
            .iter()
            .any(|m| m.start == addr as u64 && m.ino == st.ino));
        assert_eq!(crate::procfs::tgid_of(gettid()), Some(std::process::id()));
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

/// An I/O priority (ioprio(7)): what the block layer's schedulers (BFQ, mq-deadline)
/// order requests by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoPriority {
    /// `IOPRIO_CLASS_IDLE`: served only when no other I/O wants the disk.
    Idle,
    /// `IOPRIO_CLASS_BE` at a level 0 (first) to 7 (last); 4 is the default of every process.
    BestEffort(u8),
    /// What `ioprio_get` returns for a thread that set none (class NONE: from its nice value).
    Default,
}

const IOPRIO_CLASS_SHIFT: u32 = 13;
const IOPRIO_WHO_PROCESS: libc::c_int = 1;

impl IoPriority {
    fn value(self) -> libc::c_int {
        let (class, level) = match self {
            IoPriority::Idle => (3, 0),
            IoPriority::BestEffort(l) => (2, u32::from(l.min(7))),
            IoPriority::Default => (0, 0),
        };
        ((class << IOPRIO_CLASS_SHIFT) | level) as libc::c_int
    }
    fn from_value(v: libc::c_int) -> IoPriority {
        let v = v as u32;
        match v >> IOPRIO_CLASS_SHIFT {
            3 => IoPriority::Idle,
            2 => IoPriority::BestEffort((v & 7) as u8),
            _ => IoPriority::Default,
        }
    }
}

/// `int ioprio_set(IOPRIO_WHO_PROCESS, tid, ioprio)` —
/// <https://man7.org/linux/man-pages/man2/ioprio_set.2.html> (Linux 2.6.13), through
/// syscall(2) (glibc has no wrapper, rustix no call): sets thread `tid`'s I/O priority (0: the
/// calling thread). Threads it creates afterwards inherit it (their io_context is copied at
/// clone), and so do io_uring's workers, which share their creator's.
pub fn set_io_priority(tid: u32, prio: IoPriority) -> io::Result<()> {
    // SAFETY: plain integer arguments; the kernel checks the thread and the permission.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            tid as libc::c_int,
            prio.value(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `int ioprio_get(IOPRIO_WHO_PROCESS, tid)` —
/// <https://man7.org/linux/man-pages/man2/ioprio_get.2.html>: thread `tid`'s I/O priority
/// (0: the calling thread).
pub fn io_priority(tid: u32) -> io::Result<IoPriority> {
    // SAFETY: plain integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, tid as libc::c_int) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(IoPriority::from_value(r as libc::c_int))
    }
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
