//! Files pagewise keeps in a directory other users may write to: the exporter's textfile
//! directory (node_exporter's, often 0777 or 1777), a pidfile's directory (`/run`, `/tmp`).
//! Whoever can write there can plant a name before pagewise uses it — a symlink to a file
//! only root may write, a FIFO, a file of their own — so nothing here goes by a path:
//!
//! - the directory is opened once, `O_DIRECTORY | O_NOFOLLOW`, and every name is resolved
//!   relative to that descriptor;
//! - a temporary is created `O_CREAT | O_EXCL | O_NOFOLLOW` (anything standing at its name,
//!   a symlink included, makes it try another name), checked (a regular file of this user
//!   with one link), written, and renamed into place with renameat(2), which replaces a
//!   symlink at the final name itself, never what it points to;
//! - a file kept from run to run (a lock, a state) is used only when it is a regular file of
//!   this user with one link: a planted one is refused, saying what it is ([`NotOurs`]).
//!
//! Safe code over `sys`; the errors are `io::Error`s, a refusal of kind `PermissionDenied`
//! whose message says what stood there.

use crate::sys;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Attempts at a fresh temporary name before giving up.
const TEMP_ATTEMPTS: u32 = 100;

/// Why a name in a shared directory is not used: it is not a regular file of this user with
/// one link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOurs {
    /// A symbolic link (never followed).
    Symlink,
    /// Not a regular file: the type in words (`directory`, `FIFO`, ...).
    Kind(&'static str),
    /// A regular file of another user.
    Owner(u32),
    /// A regular file of this user with other names too (a hard link planted to another file).
    Links(u64),
}

impl fmt::Display for NotOurs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotOurs::Symlink => f.write_str("is a symlink"),
            NotOurs::Kind(k) => write!(f, "is a {k}"),
            NotOurs::Owner(uid) => write!(f, "is owned by uid {uid}"),
            NotOurs::Links(n) => write!(f, "has {n} hard links"),
        }
    }
}

impl NotOurs {
    /// What `st` is when it is not a regular file of this user (euid) with one link.
    pub fn of(st: &sys::Stat) -> Option<NotOurs> {
        if st.is_symlink() {
            Some(NotOurs::Symlink)
        } else if !st.is_file() {
            Some(NotOurs::Kind(st.kind()))
        } else if st.uid != sys::euid() {
            Some(NotOurs::Owner(st.uid))
        } else if st.nlink != 1 {
            Some(NotOurs::Links(st.nlink))
        } else {
            None
        }
    }

    /// The refusal as an `io::Error` (PermissionDenied): "is a symlink (not a regular file of
    /// this user's): refusing to use it".
    pub fn into_error(self) -> io::Error {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{self} (not a regular file of this user's): refusing to use it"),
        )
    }
}

/// A directory opened without following a symlink at its own name, for creating, replacing
/// and reading names in it.
#[derive(Debug)]
pub struct SharedDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// A temporary created in a [`SharedDir`]: its name and the open file. Removed on drop unless
/// it was put in place with [`SharedDir::replace`].
#[derive(Debug)]
pub struct Temp<'d> {
    dir: &'d SharedDir,
    name: OsString,
    /// The new file, open for writing.
    pub file: File,
    placed: bool,
}

impl Temp<'_> {
    /// The temporary's path (for messages).
    pub fn path(&self) -> PathBuf {
        self.dir.path.join(&self.name)
    }
}

impl Drop for Temp<'_> {
    fn drop(&mut self) {
        if !self.placed {
            let _ = sys::unlink_at(self.dir.fd.as_fd(), &self.name, false);
        }
    }
}

impl SharedDir {
    /// Opens `path` as a directory, `O_DIRECTORY | O_NOFOLLOW`: a symlink at `path` itself is
    /// refused (ELOOP, or ENOTDIR on older kernels, said as "is a symlink").
    pub fn open(path: &Path) -> io::Result<SharedDir> {
        let how = sys::OpenFlags {
            directory: true,
            nofollow: true,
            ..Default::default()
        };
        match sys::open_path(path, how) {
            Ok(fd) => Ok(SharedDir {
                fd,
                path: path.to_path_buf(),
            }),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                match sys::stat_path(path, false) {
                    Ok(st) if st.is_symlink() => Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "is a symlink: give the directory it points to",
                    )),
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Opens the directory `path`, following symlinks on the way to it and at its own name
    /// (the path is the caller's choice, as `/var/run` -> `/run`); the names inside it are
    /// then resolved without following, as with [`SharedDir::open`].
    pub fn open_resolved(path: &Path) -> io::Result<SharedDir> {
        let how = sys::OpenFlags {
            directory: true,
            ..Default::default()
        };
        Ok(SharedDir {
            fd: sys::open_path(path, how)?,
            path: path.to_path_buf(),
        })
    }

    /// True when `name` (not followed) is the file `f` is open on: same device and inode.
    pub fn still_names(&self, name: &OsStr, f: &File) -> io::Result<bool> {
        let open = sys::fstat(f.as_fd())?;
        Ok(self
            .stat(name)?
            .is_some_and(|st| (st.dev, st.ino) == (open.dev, open.ino)))
    }

    /// The directory's path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A new temporary for `name`: `.NAME.PID`, else `.NAME.PID.XXXX` (fresh each try),
    /// created `O_CREAT | O_EXCL | O_NOFOLLOW` with `mode` (less the umask) and checked after
    /// opening (a regular file of this user with one link).
    pub fn create_temp(&self, name: &OsStr, mode: u32) -> io::Result<Temp<'_>> {
        let base = {
            let mut b = OsString::from(".");
            b.push(name);
            b.push(format!(".{}", std::process::id()));
            b
        };
        let mut attempt = 0u32;
        loop {
            let mut tmp = base.clone();
            if attempt > 0 {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                tmp.push(format!(".{:x}", nanos ^ attempt.rotate_left(16)));
            }
            match sys::create_at(self.fd(), &tmp, mode) {
                Ok(fd) => {
                    let temp = Temp {
                        dir: self,
                        name: tmp,
                        file: File::from(fd),
                        placed: false,
                    };
                    // Ours by construction (O_EXCL); checked all the same, as the kernel sees it.
                    let st = sys::fstat(temp.file.as_fd())?;
                    if let Some(why) = NotOurs::of(&st) {
                        return Err(why.into_error());
                    }
                    return Ok(temp);
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && attempt + 1 < TEMP_ATTEMPTS => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Puts `temp` in place as `name` with renameat(2) in this directory (what stood at `name`
    /// — a symlink included — is replaced, never written through). On failure the temporary
    /// is removed.
    pub fn replace(&self, mut temp: Temp<'_>, name: &OsStr) -> io::Result<()> {
        sys::rename_at(self.fd(), &temp.name, name)?;
        temp.placed = true;
        Ok(())
    }

    /// What stands at `name` (not followed): None when nothing does.
    fn stat(&self, name: &OsStr) -> io::Result<Option<sys::Stat>> {
        let c = std::ffi::CString::new(name.as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        match sys::fstatat(Some(self.fd()), &c, false) {
            Ok(st) => Ok(Some(st)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The file `name`, opened for reading and writing and created (with `mode`, less the
    /// umask) when missing — only when it is a regular file of this user with one link, as
    /// checked before opening (a device or another user's file is never opened) and after
    /// (fstat of what was opened). A symlink is never followed. A refusal is a
    /// PermissionDenied error saying what stands there ([`NotOurs`]).
    pub fn open_own(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        if let Some(why) = self.stat(name)?.as_ref().and_then(NotOurs::of) {
            return Err(why.into_error());
        }
        let fd =
            sys::open_or_create_at(self.fd(), name, mode).map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => NotOurs::Symlink.into_error(),
                _ => e,
            })?;
        let st = sys::fstat(fd.as_fd())?;
        if let Some(why) = NotOurs::of(&st) {
            return Err(why.into_error());
        }
        Ok(File::from(fd))
    }

    /// The content of `name` (at most `max` bytes; more is InvalidData), when it is a regular
    /// file of this user with one link; None when there is nothing at `name`. Never follows a
    /// symlink, never blocks on a FIFO, never opens a device.
    pub fn read_own(&self, name: &OsStr, max: u64) -> io::Result<Option<Vec<u8>>> {
        match self.stat(name)? {
            None => return Ok(None),
            Some(st) => {
                if let Some(why) = NotOurs::of(&st) {
                    return Err(why.into_error());
                }
            }
        }
        let fd = match sys::open_read_at(self.fd(), name) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(NotOurs::Symlink.into_error())
            }
            Err(e) => return Err(e),
        };
        let st = sys::fstat(fd.as_fd())?;
        if let Some(why) = NotOurs::of(&st) {
            return Err(why.into_error());
        }
        let mut bytes = Vec::new();
        File::from(fd).take(max + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("longer than {max} bytes"),
            ));
        }
        Ok(Some(bytes))
    }

    /// Removes the name `name` (a symlink itself, never what it points to).
    pub fn remove(&self, name: &OsStr) -> io::Result<()> {
        sys::unlink_at(self.fd(), name, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn temporaries_never_go_through_what_stands_at_their_name() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let shared = d.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        let tmp_name = format!(".out.{}", std::process::id());
        std::os::unix::fs::symlink(&victim, shared.join(&tmp_name)).unwrap();
        let dir = SharedDir::open(&shared).unwrap();
        let mut t = dir.create_temp(OsStr::new("out"), 0o644).unwrap();
        assert_ne!(t.path(), shared.join(&tmp_name), "another name");
        t.file.write_all(b"new").unwrap();
        // The final name a symlink too: replaced, not written through.
        std::os::unix::fs::symlink(&victim, shared.join("out")).unwrap();
        dir.replace(t, OsStr::new("out")).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        let m = std::fs::symlink_metadata(shared.join("out")).unwrap();
        assert!(m.is_file() && m.nlink() == 1);
        assert_eq!(std::fs::read(shared.join("out")).unwrap(), b"new");
        // A temporary dropped unplaced is removed.
        let t = dir.create_temp(OsStr::new("out"), 0o644).unwrap();
        let p = t.path();
        drop(t);
        assert!(std::fs::symlink_metadata(p).is_err());
    }

    #[test]
    fn own_files_are_refused_when_planted() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let dir = SharedDir::open(d.path()).unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("lock")).unwrap();
        let e = dir.open_own(OsStr::new("lock"), 0o644).unwrap_err();
        assert!(e.to_string().starts_with("is a symlink"), "{e}");
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        let e = dir.read_own(OsStr::new("lock"), 10).unwrap_err();
        assert!(e.to_string().starts_with("is a symlink"), "{e}");
        std::fs::hard_link(&victim, d.path().join("hard")).unwrap();
        let e = dir.open_own(OsStr::new("hard"), 0o644).unwrap_err();
        assert!(e.to_string().starts_with("has 2 hard links"), "{e}");
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let e = dir.open_own(OsStr::new("sub"), 0o644).unwrap_err();
        assert!(e.to_string().starts_with("is a directory"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // Missing: created, then used again.
        dir.open_own(OsStr::new("new"), 0o644).unwrap();
        dir.open_own(OsStr::new("new"), 0o644).unwrap();
        assert_eq!(dir.read_own(OsStr::new("new"), 10).unwrap(), Some(vec![]));
        assert_eq!(dir.read_own(OsStr::new("none"), 10).unwrap(), None);
        // The directory itself as a symlink.
        let e = SharedDir::open(&d.path().join("lock")).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
    }
}
