//! The files a verb writes when it is done (`record -o`, `run --report`): opened before
//! the command starts, so a bad path is found before the command runs (and its trace or its
//! exit status is never lost to it); written to an unnamed file in the destination directory
//! (O_TMPFILE) and given its name with linkat(2) when complete, so a reader never sees half a
//! file and a pagewise killed meanwhile (SIGKILL, a crash) leaves nothing behind.
//!
//! Where the file system has no O_TMPFILE (FUSE, vfat, old kernels), the content goes to a
//! named temporary `NAME.pagewise-PID-HEX.tmp` beside it, created exclusively without
//! following a symlink and locked (flock) while it is written, renamed over the output at the
//! end. One left by a pagewise that was killed is removed by the next output written into the
//! same directory — only when it is provably such a temporary: its name has that pattern (no
//! leading dot: copy's temporaries `.NAME.pagewise-PID-N.tmp`, which a later copy may resume
//! from, have one), it is a regular file with one link owned by our effective uid, the
//! process of its PID is gone or is no pagewise, and no one holds its lock.
//!
//! The output's own name is never followed when it is a symlink someone else planted: a
//! symlink is followed only when its owner is our effective uid or the owner of the directory
//! holding it (the kernel's `fs.protected_symlinks` rule for sticky directories such as
//! /tmp); anything else there that is not a regular file is never replaced: a directory is
//! refused, a FIFO or a device is written to as it is (unless it is another user's in a
//! directory others can write to: refused).

use super::exit::CliError;
use super::render::path_text;
use pagewise_core::sys;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where the output goes.
enum Target {
    Stdout,
    /// An existing non-regular file (/dev/null, a FIFO, a device): replacing it is not ours to
    /// do, so it is written to directly.
    Direct(File),
    /// A regular file, new or replaced: written to `file`, named `name` in `dir` at the end.
    Replace {
        /// The directory the output is in.
        dir: OwnedFd,
        /// The directory's path, for messages.
        dir_path: PathBuf,
        /// The output's name in `dir`.
        name: OsString,
        /// What is written (taken by [`OutFile::write`]).
        file: Option<File>,
        /// The temporary's name in `dir`; None for an unnamed (O_TMPFILE) file, and once it
        /// has been renamed into place.
        temp: Option<OsString>,
    },
}

/// An output file opened ahead of time.
pub struct OutFile {
    shown: PathBuf,
    target: Target,
}

/// Symlinks followed at most, as the kernel's MAXSYMLINKS.
const MAX_LINKS: usize = 40;

/// `name` as a C string for the *at calls (a name from a path holds no NUL).
fn c_name(name: &OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// The directory and the last component of `p` ("." when it has no directory part).
fn split(p: &Path) -> Option<(PathBuf, OsString)> {
    let name = p.file_name()?.to_owned();
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Some((dir, name))
}

/// Opens the directory `dir` of the output `out` (its path followed as given: it is the
/// caller's).
fn open_dir(out: &Path, dir: &Path) -> Result<OwnedFd, CliError> {
    let flags = sys::OpenFlags {
        directory: true,
        ..Default::default()
    };
    sys::open_path(dir, flags).map_err(|e| {
        CliError::Message(format!(
            "{}: cannot create the output (open {} failed: {e})",
            path_text(out),
            path_text(dir)
        ))
    })
}

impl OutFile {
    /// Opens `out` ('-' for stdout), or creates its unnamed file (else its temporary). A
    /// symlink of ours is followed: the file it names is replaced, the link stays (a dangling
    /// one: what it names is created); a symlink of someone else's is refused.
    pub fn open(out: &Path) -> Result<OutFile, CliError> {
        let shown = out.to_path_buf();
        if out.as_os_str() == "-" {
            return Ok(OutFile {
                shown,
                target: Target::Stdout,
            });
        }
        let names_no_file = || {
            CliError::Message(format!(
                "{}: cannot create the output: the path names no file",
                path_text(out)
            ))
        };
        let (mut dir_path, mut name) = split(out).ok_or_else(names_no_file)?;
        let mut dir = open_dir(out, &dir_path)?;
        let mut links = 0;
        loop {
            let at = dir_path.join(&name);
            let c = c_name(&name).map_err(|e| CliError::file(path_text(&at), "fstatat", e))?;
            let st = match sys::fstatat(Some(dir.as_fd()), &c, false) {
                Ok(st) => Some(st),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
                Err(e) => return Err(CliError::file(path_text(&at), "fstatat", e)),
            };
            match st {
                None => break,
                Some(st) if st.is_file() => break,
                Some(st) if st.is_dir() => {
                    return Err(CliError::Message(format!(
                        "{}: is a directory",
                        path_text(out)
                    )))
                }
                Some(st) if st.is_symlink() => {
                    let dir_st = sys::fstat(dir.as_fd())
                        .map_err(|e| CliError::file(path_text(&dir_path), "fstat", e))?;
                    let me = sys::euid();
                    if st.uid != me && st.uid != dir_st.uid {
                        return Err(CliError::Message(format!(
                            "{}: cannot create the output: {} is a symlink of uid {} in a \
                             directory of uid {}, not followed (in a directory others can \
                             write to, someone else's link may point anywhere; remove it or \
                             name another file)",
                            path_text(out),
                            path_text(&at),
                            st.uid,
                            dir_st.uid
                        )));
                    }
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(CliError::file(
                            path_text(out),
                            "open",
                            std::io::Error::from_raw_os_error(libc::ELOOP),
                        ));
                    }
                    let to = sys::read_link_at(dir.as_fd(), &name)
                        .map_err(|e| CliError::file(path_text(&at), "readlinkat", e))?;
                    if to.is_relative() && sys::is_pseudo_fs(dir.as_fd()) {
                        // A magic link of /proc naming no path (`/dev/stdout` to
                        // `pipe:[N]`): only the kernel can follow it.
                        return OutFile::direct(shown, &at, true);
                    }
                    let next = dir_path.join(to);
                    (dir_path, name) = split(&next).ok_or_else(names_no_file)?;
                    dir = open_dir(out, &dir_path)?;
                }
                // A FIFO, a device, a socket: written to as it is, never replaced — unless
                // someone else put it in a directory others can write to (a planted FIFO
                // blocked the run; a device would take the report).
                Some(st) => {
                    let dir_st = sys::fstat(dir.as_fd())
                        .map_err(|e| CliError::file(path_text(&dir_path), "fstat", e))?;
                    let shared = dir_st.mode & 0o022 != 0 && dir_st.uid != st.uid;
                    if st.uid != sys::euid() && st.uid != 0 && shared {
                        return Err(CliError::Message(format!(
                            "{}: cannot create the output: {} is a {} of uid {} in a directory \
                             others can write to: not used (remove it, or name a path of your \
                             own)",
                            path_text(out),
                            path_text(&at),
                            st.kind(),
                            st.uid
                        )));
                    }
                    return OutFile::direct(shown, &at, false);
                }
            }
        }
        remove_stale_temporaries(&dir, &dir_path);
        let (file, temp) = match sys::open_tmpfile_at(dir.as_fd(), 0o644) {
            Ok(fd) => (File::from(fd), None),
            Err(e) if tmpfile_unsupported(&e) => {
                let (fd, tmp) = create_temp(&dir, &name).map_err(|(tmp, e)| {
                    CliError::Message(format!(
                        "{}: cannot create the output (openat {} failed: {e})",
                        path_text(out),
                        path_text(&dir_path.join(tmp))
                    ))
                })?;
                (File::from(fd), Some(tmp))
            }
            Err(e) => {
                return Err(CliError::Message(format!(
                    "{}: cannot create the output (openat {} with O_TMPFILE failed: {e})",
                    path_text(out),
                    path_text(&dir_path)
                )))
            }
        };
        Ok(OutFile {
            shown,
            target: Target::Replace {
                dir,
                dir_path,
                name,
                file: Some(file),
                temp,
            },
        })
    }

    /// `at`, which is no regular file, opened to be written to as it is (`follow`: through
    /// the magic link `at` is).
    fn direct(shown: PathBuf, at: &Path, follow: bool) -> Result<OutFile, CliError> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(if follow { 0 } else { sys::O_NOFOLLOW })
            .open(at)
            .map_err(|e| CliError::file(path_text(&shown), "open", e))?;
        // Still no regular file (a regular one is replaced, never written over in place).
        match f.metadata() {
            Ok(m) if m.is_file() || m.is_dir() => Err(CliError::Message(format!(
                "{}: cannot create the output: it changed while it was opened",
                path_text(&shown)
            ))),
            _ => Ok(OutFile {
                shown,
                target: Target::Direct(f),
            }),
        }
    }

    /// Writes the content and puts it in place.
    pub fn write(
        mut self,
        content: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), CliError> {
        let shown = path_text(&self.shown);
        let fail = |e: std::io::Error| CliError::file(shown.clone(), "write", e);
        match &mut self.target {
            Target::Stdout => {
                let mut w = std::io::stdout().lock();
                content(&mut w).and_then(|_| w.flush()).map_err(fail)
            }
            Target::Direct(f) => {
                let mut w = BufWriter::new(f);
                content(&mut w).and_then(|_| w.flush()).map_err(fail)
            }
            Target::Replace {
                dir,
                dir_path,
                name,
                file,
                temp,
            } => {
                let f = file.take().expect("written once");
                let mut w = BufWriter::new(&f);
                content(&mut w).and_then(|_| w.flush()).map_err(fail)?;
                drop(w);
                let at = dir_path.join(&*name);
                if temp.is_none() {
                    // Unnamed: linked under its name when that is free (never replacing
                    // anything); else under a temporary name, renamed over the file below.
                    match sys::link_fd_at(f.as_fd(), dir.as_fd(), name) {
                        Ok(()) => return Ok(()),
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                        Err(e) => return Err(CliError::file(path_text(&at), "linkat", e)),
                    }
                    *temp = Some(link_temp(dir, name, &f).map_err(|(tmp, e)| {
                        CliError::file(path_text(&dir_path.join(tmp)), "linkat", e)
                    })?);
                }
                let tmp = temp.clone().expect("a named temporary by now");
                // Only a regular file (or nothing) is replaced: whatever else appeared under
                // the name while the command ran stays, and the output is not written.
                let c = c_name(name).map_err(|e| CliError::file(path_text(&at), "fstatat", e))?;
                match sys::fstatat(Some(dir.as_fd()), &c, false) {
                    Ok(st) if !st.is_file() => {
                        return Err(CliError::Message(format!(
                            "{}: not written: a {} appeared under its name while the command \
                             ran, and is not replaced",
                            path_text(&at),
                            st.kind()
                        )))
                    }
                    _ => {}
                }
                sys::rename_at(dir.as_fd(), &tmp, name)
                    .map_err(|e| CliError::file(shown.clone(), "renameat", e))?;
                // In place: nothing left to remove.
                *temp = None;
                Ok(())
            }
        }
    }
}

/// O_TMPFILE is not there: the file system has none (EOPNOTSUPP), or the kernel predates it
/// (EISDIR: O_TMPFILE holds O_DIRECTORY; EINVAL).
fn tmpfile_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
    )
}

/// The temporary's name for `name`: `NAME.pagewise-PID-HEX.tmp`, with `name`'s leading dots
/// left out (the pattern copy's temporaries have is `.NAME.pagewise-PID-N.tmp`).
fn temp_name(name: &OsStr, salt: u32) -> OsString {
    let bytes = name.as_bytes();
    let start = bytes.iter().position(|&b| b != b'.').unwrap_or(bytes.len());
    let mut t = OsStr::from_bytes(&bytes[start..]).to_owned();
    if t.is_empty() {
        t.push("output");
    }
    t.push(format!(".pagewise-{}-{salt:x}.tmp", std::process::id()));
    t
}

/// The PID of a temporary's name of [`temp_name`]'s pattern, None for any other name.
fn temp_owner(name: &[u8]) -> Option<u32> {
    if name.first() == Some(&b'.') {
        return None;
    }
    let rest = name.strip_suffix(b".tmp")?;
    let at = rest.windows(10).rposition(|w| w == b".pagewise-")?;
    if at == 0 {
        return None;
    }
    let (pid, hex) = std::str::from_utf8(&rest[at + 10..])
        .ok()?
        .split_once('-')?;
    let hex_ok = !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit());
    let pid_ok = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    (hex_ok && pid_ok).then(|| pid.parse().ok()).flatten()
}

/// A salt for temporary names: the clock's nanoseconds, and the attempt.
fn salt(attempt: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos.wrapping_add(attempt)
}

/// A new temporary beside `name` in `dir`, created exclusively and never through a symlink (a
/// name planted in a shared directory cannot redirect the write), and locked while it lives
/// (so no other pagewise takes it for a stale one); a fresh name on a clash.
fn create_temp(
    dir: &OwnedFd,
    name: &OsStr,
) -> Result<(OwnedFd, OsString), (OsString, std::io::Error)> {
    let mut attempt = 0u32;
    loop {
        let tmp = temp_name(name, salt(attempt));
        match sys::create_at(dir.as_fd(), &tmp, 0o644) {
            Ok(fd) => {
                // Best effort: a file system without locks still has the PID check.
                let _ = sys::try_lock_exclusive(fd.as_fd());
                return Ok((fd, tmp));
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && attempt < 100 => attempt += 1,
            Err(e) => return Err((tmp, e)),
        }
    }
}

/// Links the unnamed file `f` into `dir` under a fresh temporary name beside `name`.
fn link_temp(
    dir: &OwnedFd,
    name: &OsStr,
    f: &File,
) -> Result<OsString, (OsString, std::io::Error)> {
    let mut attempt = 0u32;
    loop {
        let tmp = temp_name(name, salt(attempt));
        match sys::link_fd_at(f.as_fd(), dir.as_fd(), &tmp) {
            Ok(()) => return Ok(tmp),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && attempt < 100 => attempt += 1,
            Err(e) => return Err((tmp, e)),
        }
    }
}

/// Removes from `dir` the temporaries of outputs whose pagewise was killed before it could
/// rename them: each provably one (see the module's doc); anything else is left alone.
/// Nothing here is an error: what cannot be checked stays.
fn remove_stale_temporaries(dir: &OwnedFd, dir_path: &Path) {
    let Ok(entries) = std::fs::read_dir(dir_path) else {
        return;
    };
    let me = sys::euid();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = temp_owner(name.as_bytes()) else {
            continue;
        };
        if pid == std::process::id() || pagewise_core::procfs::is_live_pagewise(pid) {
            continue;
        }
        let Ok(c) = c_name(&name) else { continue };
        let Ok(before) = sys::fstatat(Some(dir.as_fd()), &c, false) else {
            continue;
        };
        if !before.is_file() || before.nlink != 1 || before.uid != me {
            continue;
        }
        // Opened without following, the same file checked again through its descriptor,
        // and its lock taken: a pagewise still writing it (in another PID namespace, say)
        // holds that lock.
        let Ok(fd) = sys::open_read_at(dir.as_fd(), &name) else {
            continue;
        };
        let Ok(st) = sys::fstat(fd.as_fd()) else {
            continue;
        };
        let same = (st.dev, st.ino) == (before.dev, before.ino);
        if !same || !st.is_file() || st.nlink != 1 || st.uid != me {
            continue;
        }
        if !matches!(sys::try_lock_exclusive(fd.as_fd()), Ok(true)) {
            continue;
        }
        // Still the same file under the name right before it goes.
        if sys::fstatat(Some(dir.as_fd()), &c, false)
            .is_ok_and(|now| (now.dev, now.ino) == (st.dev, st.ino))
        {
            let _ = sys::unlink_at(dir.as_fd(), &name, false);
        }
    }
}

impl Drop for OutFile {
    fn drop(&mut self) {
        if let Target::Replace {
            dir,
            temp: Some(tmp),
            ..
        } = &self.target
        {
            let _ = sys::unlink_at(dir.as_fd(), tmp, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporaries_are_told_by_their_name() {
        let t = temp_name(OsStr::new("py.trace"), 0xab);
        let pid = std::process::id();
        assert_eq!(t, OsString::from(format!("py.trace.pagewise-{pid}-ab.tmp")));
        assert_eq!(temp_owner(t.as_bytes()), Some(pid));
        // A hidden output's temporary has no leading dot (copy's pattern has one).
        let t = temp_name(OsStr::new(".hidden"), 1);
        assert_eq!(t, OsString::from(format!("hidden.pagewise-{pid}-1.tmp")));
        assert_eq!(temp_owner(b"x.pagewise-17-0f.tmp"), Some(17));
        for not in [
            &b".data.db.pagewise-4242-7.tmp"[..], // copy's
            b"x.pagewise-17-0f.tmp.orig",
            b".pagewise-17-1.tmp",
            b"x.pagewise-17-.tmp",
            b"x.pagewise--1.tmp",
            b"x.pagewise-1x-1.tmp",
            b"x.pagewise-17-zz.tmp",
            b"x.pagewise-17.tmp",
        ] {
            assert_eq!(temp_owner(not), None, "{}", String::from_utf8_lossy(not));
        }
    }
}
