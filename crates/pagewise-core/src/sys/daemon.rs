//! Detaching a daemon (`load --lock --daemon`): fork(2) with a pipe for the child's report,
//! setsid(2), the standard descriptors onto /dev/null (dup2(2)), waitpid(2).
//!
//! fork is in rustix's unstable `runtime` API only, and dup2 onto the standard descriptors
//! needs its `stdio` feature; both stay on libc here (see the list in `sys`).
#![allow(unsafe_code)]

use std::io::{self, PipeReader, PipeWriter, Write};
use std::os::fd::AsRawFd;

/// Which side of [`fork_with_report`] the caller now is.
pub enum Forked {
    /// The process that called: the child's id and the read end of its report pipe.
    Parent {
        /// The child's process id.
        child: u32,
        /// Read end of the pipe the child reports on (close-on-exec).
        report: PipeReader,
    },
    /// The new process, with the write end of the pipe.
    Child {
        /// Write end of the report pipe (close-on-exec).
        report: PipeWriter,
    },
}

/// The threads of this process, from /proc/self/task.
fn own_threads() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// `pid_t fork(void)` — <https://man7.org/linux/man-pages/man2/fork.2.html>, after pipe(2)
/// (std's `io::pipe`, close-on-exec); libc.
///
/// Forks this process, which must have one thread only (checked from /proc/self/task; an
/// error says how many there are otherwise), with a pipe from the child to the parent. The
/// child is a full copy that may run any code, allocate and start threads: no other thread
/// existed to leave a lock held. Memory locks are not inherited (mlock(2)), so a child that
/// should hold pages locks them itself.
pub fn fork_with_report() -> io::Result<Forked> {
    let threads = own_threads()?;
    if threads != 1 {
        return Err(io::Error::other(format!(
            "{threads} threads are running: fork(2) is only safe before the first thread starts"
        )));
    }
    let (r, w) = io::pipe()?;
    // SAFETY: the process has exactly one thread (checked just above; nothing between the
    // check and the call starts one), so the child inherits no lock or allocator state held by
    // another thread and may go on as an ordinary single-threaded program. Each side then owns
    // its end of the pipe only.
    let pid = unsafe { libc::fork() };
    match pid {
        p if p < 0 => Err(io::Error::last_os_error()),
        0 => {
            drop(r);
            Ok(Forked::Child { report: w })
        }
        p => {
            drop(w);
            Ok(Forked::Parent {
                child: p as u32,
                report: r,
            })
        }
    }
}

/// `pid_t setsid(void)` — <https://man7.org/linux/man-pages/man2/setsid.2.html>, through
/// rustix.
///
/// Makes the calling process the leader of a new session without a controlling terminal, so
/// a terminal's hang-up or Ctrl-C no longer reaches it.
pub fn new_session() -> io::Result<()> {
    rustix::process::setsid()?;
    Ok(())
}

/// `int dup2(int oldfd, int newfd)` — <https://man7.org/linux/man-pages/man2/dup2.2.html>,
/// after opening /dev/null; libc.
///
/// Points standard input, output and error at /dev/null (flushing stdout first), so a daemon
/// no longer holds the terminal or the pipes of whoever started it (a `$(...)` or a test
/// reading its output would otherwise wait for it to exit).
pub fn detach_stdio() -> io::Result<()> {
    let _ = io::stdout().flush();
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for target in 0..3 {
        // SAFETY: duplicates a descriptor this function owns onto one of the standard
        // descriptors, which std's handles refer to by number only; they keep working, now on
        // /dev/null. No memory is passed.
        if unsafe { libc::dup2(null.as_raw_fd(), target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// How a child ended, as [`wait_child`] tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildEnd {
    /// It exited with this status.
    Exited(i32),
    /// It was killed by this signal.
    Signaled(i32),
}

/// `pid_t waitpid(pid_t pid, int *wstatus, int options)` —
/// <https://man7.org/linux/man-pages/man2/waitpid.2.html>, through rustix.
///
/// Waits for the child `pid` to end and says how it did.
pub fn wait_child(pid: u32) -> io::Result<ChildEnd> {
    let p = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    loop {
        match rustix::process::waitpid(Some(p), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, st))) => {
                if let Some(code) = st.exit_status() {
                    return Ok(ChildEnd::Exited(code));
                }
                if let Some(sig) = st.terminating_signal() {
                    return Ok(ChildEnd::Signaled(sig));
                }
            }
            Ok(None) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threaded_process_refuses_to_fork() {
        // A second thread for certain (the harness may run a test on the main thread).
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv());
        let r = fork_with_report();
        drop(tx);
        let _ = t.join();
        let err = r.err().expect("fork refused");
        assert!(err.to_string().contains("threads are running"), "{err}");
    }
}
