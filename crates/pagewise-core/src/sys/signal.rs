//! Signals: sigaction(2) handlers that set a flag and forward to a supervised child,
//! sigtimedwait(2) and pthread_sigmask(3) for holding loops, and SIGPIPE's default action.
//!
//! rustix offers these calls only to programs without libc (its unstable `runtime` API), so
//! they stay on libc here.
#![allow(unsafe_code)]

use std::io;
use std::sync::OnceLock;
use std::time::Duration;

use rustix::process::Pid;

use super::kill;

/// `int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *timeout)` —
/// <https://man7.org/linux/man-pages/man2/sigtimedwait.2.html>, after pthread_sigmask(3);
/// libc (see the list in `sys`).
///
/// Blocks SIGINT and SIGTERM in the calling thread (and threads it spawns later), then waits for
/// one of them or for `timeout`. Returns the signal number, or None on timeout.
pub fn wait_for_interrupt(timeout: Option<Duration>) -> Option<i32> {
    let set = block_interrupts();
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    loop {
        // SAFETY: set and ts are initialised; all pointers are to locals.
        let r = unsafe {
            match &ts {
                Some(ts) => libc::sigtimedwait(&set, std::ptr::null_mut(), ts),
                None => libc::sigwaitinfo(&set, std::ptr::null_mut()),
            }
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
    use super::super::become_subreaper;
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;

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
                "sys::signal::tests::signals_in_a_child_process",
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
}
