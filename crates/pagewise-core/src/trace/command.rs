//! The command `record` and `run` start and follow: spawned with signals forwarded to it,
//! waited for, and the processes it leaves behind counted.

use crate::sys;
use std::ffi::OsString;
use std::process::{Child, ExitStatus};
use std::sync::mpsc;
use std::sync::Arc;

use super::witness::{Witness, Witnessed};

/// A thread that starts the command when told ([`Launcher::run`]) and waits for it. Tracing is
/// opened for this thread alone ([`Launcher::tid`]) and inherited by the command from its
/// fork, so the threads pagewise starts meanwhile (the event reader, drop-behind) are not
/// followed: perf events opened on the main thread were inherited by them, and every page
/// `run --assist` prefetched cost the kernel a sample nobody wanted (fio mmap randread: 7% of
/// the CPU, in the thread issuing the prefetches).
pub(crate) struct Launcher {
    tid: i32,
    go: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Result<Ran, crate::Error>>,
}

/// How the command ran: its exit status, and when it started and ended (CLOCK_MONOTONIC, ns).
pub(crate) struct Ran {
    pub status: ExitStatus,
    pub start_mono_ns: u64,
    pub end_mono_ns: u64,
}

impl Ran {
    /// How long it ran, ns.
    pub fn duration_ns(&self) -> u64 {
        self.end_mono_ns - self.start_mono_ns
    }

    /// How long it ran, seconds.
    pub fn elapsed_s(&self) -> f64 {
        self.duration_ns() as f64 / 1e9
    }
}

impl Launcher {
    /// Starts the thread, which waits for [`Launcher::run`]; dropped without it, the thread
    /// ends without starting anything.
    /// With `seen`, the command's processes are watched by a [`Witness`] into it (which files
    /// they hold, before they close them).
    /// `quiet`: stdin and the output of the command are /dev/null.
    pub fn new(cmd: &[OsString], seen: Option<Arc<Witnessed>>, quiet: bool) -> Launcher {
        let cmd = cmd.to_vec();
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("pw-launcher".into())
            .spawn(move || {
                let _ = tid_tx.send(sys::gettid() as i32);
                go_rx.recv().map_err(|_| no_command())?;
                let start_mono_ns = sys::monotonic_ns();
                let status = spawn_watched(&cmd, seen, quiet).and_then(|mut c| wait(&mut c))?;
                Ok(Ran {
                    status,
                    start_mono_ns,
                    end_mono_ns: sys::monotonic_ns(),
                })
            })
            .expect("spawning the launcher thread");
        let tid = tid_rx.recv().expect("the launcher thread sends its id");
        Launcher { tid, go, thread }
    }

    /// The thread's id, to follow.
    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// Starts the command and waits for it to exit.
    pub fn run(self) -> Result<Ran, crate::Error> {
        let _ = self.go.send(());
        self.thread.join().expect("the launcher thread panicked")
    }
}

/// Starts the command to trace (`cmd[0]` with the rest as arguments), watched by a
/// [`Witness`] into `seen` when given; signals pagewise receives from now on are forwarded to
/// it (see [`sys::supervise_signals`]). Without CAP_SYS_ADMIN the
/// filter needs no_new_privs: set-user-ID programs the command runs then keep the caller's
/// privileges.
pub(crate) fn spawn_watched(
    cmd: &[OsString],
    seen: Option<Arc<Witnessed>>,
    quiet: bool,
) -> Result<Child, crate::Error> {
    const CAP_SYS_ADMIN: u32 = 21;
    let Some((prog, args)) = cmd.split_first() else {
        return Err(no_command());
    };
    let mut command = std::process::Command::new(prog);
    command.args(args);
    if quiet {
        use std::process::Stdio;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
    }
    let spawned = match seen {
        Some(seen) => {
            let nnp = !sys::has_capability(CAP_SYS_ADMIN);
            sys::spawn_notifying(&mut command, nnp, |sock| Witness::serve(sock, seen))
        }
        None => command.spawn(),
    };
    let child = spawned.map_err(|e| crate::Error::Spawn {
        program: prog.into(),
        source: e,
    })?;
    sys::forward_signals_to(child.id());
    Ok(child)
}

/// The error for an empty command.
pub(crate) fn no_command() -> crate::Error {
    crate::Error::Invalid {
        what: "command",
        message: "nothing to run".into(),
    }
}

/// Waits for the command (through interruptions by the signals pagewise survives), then stops
/// forwarding signals to it.
pub(crate) fn wait(child: &mut Child) -> Result<ExitStatus, crate::Error> {
    loop {
        match child.wait() {
            Ok(s) => {
                sys::stop_forwarding();
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(crate::Error::Wait(e)),
        }
    }
}

/// A command's exit status as a shell reports it: its code, or 128 + the signal that ended it.
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Processes left behind by the command: its descendants still running after it exited
/// (a daemon, a background job). pagewise is their subreaper, so they are its children now.
pub(crate) fn orphans_left() -> usize {
    // pagewise's own detached helpers (forks that never exec) run our executable.
    let mine = crate::procfs::exe_of(None);
    crate::procfs::children_of(std::process::id())
        .into_iter()
        .filter(|&pid| mine.is_none() || crate::procfs::exe_of(Some(pid)) != mine)
        .count()
}

/// The notice for [`orphans_left`]: what their later page-cache use means for the verb.
pub(crate) fn orphans_notice(n: usize, what: &str) -> Option<String> {
    (n > 0).then(|| {
        format!(
            "{n} process(es) started by the command were still running when it exited \
             (a daemon or background job): {what} what they do after that"
        )
    })
}
