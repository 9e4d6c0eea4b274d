//! Holding locked pages as a service (`load --lock [--daemon] [--pidfile P]`): the pidfile,
//! sd_notify(3) readiness, and the report a detached child gives the process that started it.
//!
//! The hold itself is the [`LockSet`](super::LockSet) of a [`LoadReport`](super::LoadReport):
//! the pages stay locked until it is dropped. What is here is what a service manager or a
//! script needs around it:
//! - [`Pidfile`]: claimed before starting — opened in its directory without following a
//!   symlink, only when a regular file of this user, and flock'ed, so of two starts at once
//!   one goes on (a held lock or a live pagewise named in it refuses the start) — then the
//!   PID written into it (mode 0644), removed on drop only while it still names this process.
//! - [`Notifier`]: `NOTIFY_SOCKET` parsed defensively (an absolute path or `@abstract` name
//!   that fits `sun_path`; anything else is refused with a reason) and datagrams sent to it.
//! - [`detach`]: fork before any thread exists; the child loads and locks, then says
//!   [`Reporter::ready`] or [`Reporter::failed`]; the parent's [`Waiter::wait`] returns what
//!   it said, or how it died.

use crate::error::Op;
use crate::shared_dir::SharedDir;
use crate::sys::{self, ChildEnd, Forked};
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};

/// A pidfile longer than this is not a pidfile (a PID has at most 10 digits).
const PIDFILE_MAX: u64 = 64;

/// The PID a pidfile's content names: decimal digits, optionally surrounded by blanks and a
/// newline, and not 0. None for anything else (empty, signs, text, overflow, too long).
pub fn parse_pid(content: &[u8]) -> Option<u32> {
    if content.len() as u64 > PIDFILE_MAX {
        return None;
    }
    let t = std::str::from_utf8(content).ok()?.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse::<u32>().ok().filter(|&p| p > 0)
}

/// A pidfile: claimed with [`Pidfile::claim`] (an exclusive flock(2) on it, held as long as
/// this value — and, across `--daemon`'s fork, the daemon's copy of its descriptor — lives),
/// written with [`Pidfile::write`], removed when dropped if it still names the PID written
/// (or, never written, is still empty).
#[derive(Debug)]
pub struct Pidfile {
    /// Absolute (made so before a daemon changes directory).
    path: PathBuf,
    /// Its directory, which others may be able to write to: names resolved relative to it.
    dir: SharedDir,
    /// The pidfile, open and locked.
    file: std::fs::File,
    /// The PID written, once written.
    written: Option<u32>,
}

/// Claims that found the name replaced between opening it and locking it, before giving up.
const CLAIM_ATTEMPTS: u32 = 20;

/// The content of an open pidfile (at most [`PIDFILE_MAX`] + 1 bytes).
fn content_of(f: &std::fs::File) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; PIDFILE_MAX as usize + 1];
    let n = f.read_at(&mut buf, 0)?;
    buf.truncate(n);
    Ok(buf)
}

impl Pidfile {
    /// Claims `path` before a hold starts, so that of two starts at once exactly one goes on:
    /// the file is opened (created when missing) in its directory without following a symlink
    /// and used only when it is a regular file of this user with one link, then locked
    /// (flock, LOCK_EX|LOCK_NB) and checked to still be the file at `path`. Refuses when
    /// another process holds the lock (a running pagewise: named when its PID is written),
    /// when the file names a live pagewise other than this one (one that took no lock), when
    /// it exists but is not a pidfile (not a regular file of this user's, or not a PID: the
    /// path is probably a mistake, and it is not overwritten). A pidfile naming a dead
    /// process, or another program, is stale and will be replaced.
    pub fn claim(path: &Path) -> Result<Pidfile, crate::Error> {
        let io_err = |op, source| crate::Error::Io {
            path: path.to_path_buf(),
            op,
            source,
        };
        let abs = std::path::absolute(path).map_err(|e| io_err(Op::Stat, e))?;
        let refuse = |message: String| crate::Error::Invalid {
            what: "pidfile",
            message: format!("{}: {message}", path.display()),
        };
        let (Some(name), Some(parent)) = (abs.file_name(), abs.parent()) else {
            return Err(refuse("names no file".into()));
        };
        let dir = SharedDir::open_resolved(parent).map_err(|e| crate::Error::Io {
            path: parent.to_path_buf(),
            op: Op::OpenDirectory,
            source: e,
        })?;
        for _ in 0..CLAIM_ATTEMPTS {
            let file = match dir.open_own(name, 0o644) {
                Ok(f) => f,
                // A refusal of shared_dir: what stands there, in words.
                Err(e)
                    if e.kind() == io::ErrorKind::PermissionDenied
                        && e.raw_os_error().is_none() =>
                {
                    return Err(refuse(e.to_string()))
                }
                Err(e) => return Err(io_err(Op::Open, e)),
            };
            if !sys::try_lock_exclusive(file.as_fd()).map_err(|e| io_err(Op::Flock, e))? {
                let holder = content_of(&file).ok().and_then(|c| parse_pid(&c));
                return Err(refuse(match holder {
                    Some(pid) => format!(
                        "pagewise (PID {pid}) is running with this pidfile; stop it first \
                         (kill {pid})"
                    ),
                    None => "another pagewise is running with this pidfile (it holds its \
                             lock and is still starting)"
                        .into(),
                }));
            }
            // Removed or replaced between the open and the lock (its holder ended): again.
            if !dir
                .still_names(name, &file)
                .map_err(|e| io_err(Op::Lstat, e))?
            {
                continue;
            }
            let content = content_of(&file).map_err(|e| io_err(Op::Read, e))?;
            if !content.is_empty() {
                let Some(pid) = parse_pid(&content) else {
                    return Err(refuse("exists and holds no PID: not overwriting it".into()));
                };
                if pid != std::process::id() && crate::procfs::is_live_pagewise(pid) {
                    return Err(refuse(format!(
                        "pagewise (PID {pid}) is running with this pidfile; stop it first \
                         (kill {pid})"
                    )));
                }
            }
            return Ok(Pidfile {
                path: abs,
                dir,
                file,
                written: None,
            });
        }
        Err(refuse(
            "was replaced again and again while it was being claimed".into(),
        ))
    }

    /// The pidfile's absolute path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `pid` into the claimed pidfile (mode 0644 whatever the umask), in place: the
    /// file is the one locked, so it is not replaced. A reader that waited for the start to
    /// return (`--daemon` returns once this is written) reads the whole PID.
    pub fn write(&mut self, pid: u32) -> Result<(), crate::Error> {
        use std::os::unix::fs::FileExt;
        let io_err = |op, source| crate::Error::Io {
            path: self.path.clone(),
            op,
            source,
        };
        let text = format!("{pid}\n");
        self.file
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| io_err(Op::Fchmod, e))?;
        self.file.set_len(0).map_err(|e| io_err(Op::Ftruncate, e))?;
        self.file
            .write_all_at(text.as_bytes(), 0)
            .map_err(|e| io_err(Op::Write, e))?;
        self.written = Some(pid);
        Ok(())
    }
}

impl Drop for Pidfile {
    /// Removes the pidfile while it is still the file claimed and names the PID written — or,
    /// never written (the start failed, or this is the process that started a daemon that
    /// failed), is still empty. Another instance may have replaced it since.
    fn drop(&mut self) {
        let name = self.path.file_name().unwrap_or_default();
        if !self.dir.still_names(name, &self.file).unwrap_or(false) {
            return;
        }
        let Ok(content) = content_of(&self.file) else {
            return;
        };
        let ours = match self.written {
            Some(pid) => parse_pid(&content) == Some(pid),
            None => content.is_empty(),
        };
        if ours {
            let _ = self.dir.remove(name);
        }
    }
}

/// Where `NOTIFY_SOCKET` says the service manager listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyTarget {
    /// A socket in the filesystem (the value starts with `/`).
    Path(PathBuf),
    /// An abstract socket (the value starts with `@`; the name is what follows it).
    Abstract(Vec<u8>),
}

/// Longest socket name `struct sockaddr_un` holds (108 bytes of `sun_path`, one kept for the
/// terminating NUL of a path; an abstract name has a leading NUL instead).
const SUN_PATH_MAX: usize = 107;

/// Parses a `NOTIFY_SOCKET` value. `Ok(None)` for an empty one (nothing to notify); an error
/// names why a value cannot be used (relative, `vsock:` (not supported), too long for
/// `sun_path`, an empty abstract name).
pub fn parse_notify_socket(value: &[u8]) -> Result<Option<NotifyTarget>, String> {
    match value.first() {
        None => Ok(None),
        Some(_) if value.len() > SUN_PATH_MAX + 1 => Err(format!(
            "{} bytes long: longer than a unix socket address holds ({SUN_PATH_MAX})",
            value.len()
        )),
        Some(b'/') if value.len() > SUN_PATH_MAX => Err(format!(
            "{} bytes long: longer than a unix socket path holds ({SUN_PATH_MAX})",
            value.len()
        )),
        Some(b'/') => Ok(Some(NotifyTarget::Path(PathBuf::from(OsStr::from_bytes(
            value,
        ))))),
        Some(b'@') if value.len() == 1 => Err("an empty abstract socket name".into()),
        Some(b'@') => Ok(Some(NotifyTarget::Abstract(value[1..].to_vec()))),
        Some(_) if value.starts_with(b"vsock:") => {
            Err("an AF_VSOCK address: not supported by pagewise".into())
        }
        Some(_) => Err("neither an absolute path nor an @abstract socket name".into()),
    }
}

/// Sends sd_notify(3) datagrams to the service manager.
#[derive(Debug)]
pub struct Notifier {
    target: NotifyTarget,
    socket: UnixDatagram,
}

impl Notifier {
    /// The notifier `NOTIFY_SOCKET` names: `Ok(None)` when it is unset or empty; an error with
    /// the reason when it is set but unusable.
    pub fn from_env() -> Result<Option<Notifier>, String> {
        let Some(v) = std::env::var_os("NOTIFY_SOCKET") else {
            return Ok(None);
        };
        let Some(target) = parse_notify_socket(v.as_bytes())? else {
            return Ok(None);
        };
        let socket = UnixDatagram::unbound().map_err(|e| format!("socket(AF_UNIX): {e}"))?;
        Ok(Some(Notifier { target, socket }))
    }

    /// Sends `state` (newline-separated `KEY=VALUE` assignments) in one datagram.
    pub fn send(&self, state: &str) -> io::Result<()> {
        let addr = match &self.target {
            NotifyTarget::Path(p) => SocketAddr::from_pathname(p)?,
            NotifyTarget::Abstract(name) => SocketAddr::from_abstract_name(name)?,
        };
        self.socket.send_to_addr(state.as_bytes(), &addr)?;
        Ok(())
    }
}

impl std::fmt::Display for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            NotifyTarget::Path(p) => write!(f, "{}", p.display()),
            NotifyTarget::Abstract(n) => write!(f, "@{}", String::from_utf8_lossy(n)),
        }
    }
}

/// The two sides of [`detach`].
pub enum Detached {
    /// The process that started: wait for the child's report.
    Parent(Waiter),
    /// The new process: load, lock, then report.
    Child(Reporter),
}

/// Forks a daemon (this process must not have started a thread yet). The child goes on to
/// load and lock and then reports; the parent waits for that report ([`Waiter::wait`]).
pub fn detach() -> Result<Detached, crate::Error> {
    match sys::fork_with_report() {
        Ok(Forked::Parent { child, report }) => Ok(Detached::Parent(Waiter { child, report })),
        Ok(Forked::Child { report }) => Ok(Detached::Child(Reporter { report })),
        Err(e) => Err(crate::Error::Invalid {
            what: "daemon",
            message: format!("fork failed: {e}"),
        }),
    }
}

/// What a detached child said, as [`Waiter::wait`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildSaid {
    /// The pages are locked and the child holds them; `code` is its exit code so far (2 when
    /// some files failed).
    Ready {
        /// The child's process id (MAINPID).
        pid: u32,
        /// The exit code the starting process should give.
        code: i32,
    },
    /// The child gave up: nothing held. `message` says why.
    Failed {
        /// Its exit code (non-zero).
        code: i32,
        /// Why, naming the path where there is one.
        message: String,
    },
    /// The child ended without a report: `how` says how (status or signal).
    Died {
        /// The exit code for the starting process (non-zero).
        code: i32,
        /// "exited with status N" / "was killed by signal N".
        how: String,
    },
}

/// The longest report a child writes.
const REPORT_MAX: u64 = 8192;

/// The parent's side of [`detach`].
pub struct Waiter {
    child: u32,
    report: io::PipeReader,
}

impl Waiter {
    /// The child's process id.
    pub fn child(&self) -> u32 {
        self.child
    }

    /// Waits for the child's report (it closes the pipe when it reports, dies or exits).
    pub fn wait(self) -> ChildSaid {
        let mut buf = Vec::new();
        let _ = (&self.report).take(REPORT_MAX).read_to_end(&mut buf);
        if let Some(said) = parse_report(&buf, self.child) {
            if matches!(said, ChildSaid::Failed { .. }) {
                let _ = sys::wait_child(self.child);
            }
            return said;
        }
        match sys::wait_child(self.child) {
            Ok(ChildEnd::Exited(c)) => ChildSaid::Died {
                code: c.max(1),
                how: format!("exited with status {c}"),
            },
            Ok(ChildEnd::Signaled(s)) => ChildSaid::Died {
                code: 128 + s,
                how: format!("was killed by signal {s}"),
            },
            Err(e) => ChildSaid::Died {
                code: 1,
                how: format!("could not be waited for (waitpid: {e})"),
            },
        }
    }
}

/// Parses a child's report: `ready CODE` or `failed CODE MESSAGE`. None for anything else.
pub fn parse_report(buf: &[u8], pid: u32) -> Option<ChildSaid> {
    let text = std::str::from_utf8(buf).ok()?;
    let line = text.strip_suffix('\n').unwrap_or(text);
    let mut parts = line.splitn(3, ' ');
    let word = parts.next()?;
    let code: i32 = parts.next()?.parse().ok()?;
    match word {
        "ready" if (0..=255).contains(&code) => Some(ChildSaid::Ready { pid, code }),
        "failed" if (1..=255).contains(&code) => Some(ChildSaid::Failed {
            code,
            message: parts.next().unwrap_or("").to_string(),
        }),
        _ => None,
    }
}

/// The child's side of [`detach`].
pub struct Reporter {
    report: io::PipeWriter,
}

impl Reporter {
    /// The pages are locked: leaves the starting process's session, tells it `code`, then
    /// points the standard descriptors at /dev/null and changes to `/` (a daemon holds no
    /// terminal, pipe or directory of whoever started it). An error when the starter is gone
    /// (nobody would know this daemon runs) or a step failed.
    pub fn ready(mut self, code: i32) -> io::Result<()> {
        sys::new_session()?;
        self.report
            .write_all(format!("ready {code}\n").as_bytes())?;
        drop(self.report);
        sys::detach_stdio()?;
        std::env::set_current_dir("/")
    }

    /// Nothing is held: tells the starting process `message` and its exit `code` (at least 1).
    pub fn failed(mut self, code: i32, message: &str) {
        let one_line: String = message.replace('\n', " ").chars().take(4000).collect();
        let _ = writeln!(self.report, "failed {} {one_line}", code.clamp(1, 255));
    }
}

#[cfg(test)]
mod tests;
