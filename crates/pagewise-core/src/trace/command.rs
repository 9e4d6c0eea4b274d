//! The command `record` and `run` start and follow: spawned with signals forwarded to it,
//! waited for, and the processes it leaves behind counted.

use crate::sys;
use std::ffi::OsString;
use std::process::{Child, ExitStatus};

/// Starts the command to trace (`cmd[0]` with the rest as arguments); signals pagewise
/// receives from now on are forwarded to it (see [`sys::supervise_signals`]).
pub(crate) fn spawn(cmd: &[OsString]) -> Result<Child, crate::Error> {
    let Some((prog, args)) = cmd.split_first() else {
        return Err(no_command());
    };
    let child = std::process::Command::new(prog)
        .args(args)
        .spawn()
        .map_err(|e| crate::Error::Spawn {
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
    let exe = |pid: &str| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mine = exe("self");
    sys::children_of(std::process::id())
        .into_iter()
        .filter(|pid| mine.is_none() || exe(&pid.to_string()) != mine)
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
