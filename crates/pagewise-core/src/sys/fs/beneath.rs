//! Names inside a directory that may hold anything: a tree a copy writes into, where whoever
//! can write there may have planted a symlink. Every call here resolves relative to a
//! directory descriptor and never follows a symlink: openat2(2) with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS` (Linux 5.6) where the kernel has it, else a walk of openat(2) with
//! `O_NOFOLLOW` one component at a time; then the *at(2) call on the last component with
//! `AT_SYMLINK_NOFOLLOW` (or a call that never follows: mkdirat, unlinkat, renameat).

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Timespec, Timestamps, CWD};
use rustix::io::Errno;

use super::dir::DirReader;
use super::node::NodeKind;
use super::open::fd_path;

/// Flags of every directory opened here: read-only (a descriptor to read entries from and to
/// set a directory's own metadata through), never blocking, closed on exec.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOFOLLOW
}

/// The error of opening `name` in `dir` as a directory without following it: ELOOP, or
/// ENOTDIR for a symlink as the last component (O_NOFOLLOW with O_DIRECTORY), said in words
/// when `name` is a symlink.
fn open_dir_error(dir: BorrowedFd<'_>, name: &OsStr, e: Errno) -> io::Error {
    let is_link = || {
        c_name(name)
            .and_then(|c| super::fstatat(Some(dir), &c, false))
            .is_ok_and(|s| s.is_symlink())
    };
    if e == Errno::LOOP || (e == Errno::NOTDIR && is_link()) {
        symlink_refused()
    } else {
        e.into()
    }
}

/// ELOOP with a message that says what happened: the destination held a symlink where a
/// directory was to be entered.
fn symlink_refused() -> io::Error {
    io::Error::other("a symlink inside the destination is not followed (ELOOP)")
}

/// `int openat2(int dirfd, const char *path, struct open_how *how, size_t size)` with
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` —
/// <https://man7.org/linux/man-pages/man2/openat2.2.html> (Linux 5.6), through rustix; before
/// 5.6 (ENOSYS) or where a sandbox refuses it (EPERM), openat(2) with `O_NOFOLLOW |
/// O_DIRECTORY` component by component.
///
/// Opens the directory `rel` below `root` without following any symlink on the way, the last
/// component included, and never leaving `root` (`..` and absolute paths are refused). An
/// empty `rel` is `root` itself (a new descriptor of it). A symlink on the way gives an error
/// of kind Other that says so.
pub fn open_dir_beneath(root: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    if rel.as_os_str().is_empty() {
        return Ok(rustix::io::fcntl_dupfd_cloexec(root, 0)?);
    }
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path inside the destination may not leave it (.. or /)",
        ));
    }
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(root, rel, dir_flags(), Mode::empty(), resolve) {
        Ok(fd) => return Ok(fd),
        Err(Errno::NOSYS | Errno::PERM) => {}
        Err(e) => {
            let up = rel.parent().unwrap_or(Path::new(""));
            let name = rel.file_name().unwrap_or_default();
            return Err(match open_dir_beneath(root, up) {
                Ok(d) => open_dir_error(d.as_fd(), name, e),
                Err(_) if e == Errno::LOOP => symlink_refused(),
                Err(_) => e.into(),
            });
        }
    }
    let mut at: Option<OwnedFd> = None;
    for c in rel.components() {
        let Component::Normal(name) = c else { continue };
        let dir = at.as_ref().map(|d| d.as_fd()).unwrap_or(root);
        let next = match rustix::fs::openat(dir, name, dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => return Err(open_dir_error(dir, name, e)),
        };
        at = Some(next);
    }
    match at {
        Some(fd) => Ok(fd),
        None => Ok(rustix::io::fcntl_dupfd_cloexec(root, 0)?),
    }
}

/// `int mkdirat(int dirfd, const char *path, mode_t mode)` —
/// <https://man7.org/linux/man-pages/man2/mkdir.2.html>, through rustix. Never follows: a
/// symlink at `name` gives EEXIST.
pub fn mkdir_at(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode))?)
}

/// `openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)`: the directory `name` in `dir`,
/// refused (with a message saying so) when `name` is a symlink.
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    rustix::fs::openat(dir, name, dir_flags(), Mode::empty())
        .map_err(|e| open_dir_error(dir, name, e))
}

/// `openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOATIME)`: a file of `dir` to
/// read, never through a symlink and never blocking on a FIFO.
pub fn open_read_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOFOLLOW;
    match rustix::fs::openat(dir, name, flags | OFlags::NOATIME, Mode::empty()) {
        Err(Errno::PERM) => Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?),
        r => Ok(r?),
    }
}

/// `openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode)` —
/// <https://man7.org/linux/man-pages/man2/open.2.html>: a new file `name` in `dir` (EEXIST if
/// anything, a symlink included, stands there).
pub fn create_at(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<OwnedFd> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(
        dir,
        name,
        flags,
        Mode::from_raw_mode(mode),
    )?)
}

/// `openat(dir, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
/// mode)` — <https://man7.org/linux/man-pages/man2/open.2.html>: the file `name` of `dir`,
/// created when missing, never through a symlink (ELOOP), never blocking on a FIFO and never
/// taking a terminal as the controlling one. The caller checks what it opened (fstat): an
/// existing file may be anyone's.
pub fn open_or_create_at(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<OwnedFd> {
    let flags = OFlags::RDWR
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::NOCTTY
        | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(
        dir,
        name,
        flags,
        Mode::from_raw_mode(mode),
    )?)
}

/// `openat(dir, name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)` —
/// <https://man7.org/linux/man-pages/man2/open.2.html>: an existing file of `dir` to write (a
/// cgroup's control file), never through a symlink (ELOOP) and never blocking on a FIFO.
pub fn open_write_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    let flags =
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

/// `openat(dir, name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)`: an existing file of
/// `dir` to read and write (a copy's partial temporary), never through a symlink and never
/// blocking on a FIFO.
pub fn open_rw_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    let flags = OFlags::RDWR | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOFOLLOW;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

/// `openat(dir, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode)` —
/// <https://man7.org/linux/man-pages/man2/open.2.html> (O_TMPFILE: Linux 3.11): an unnamed file
/// in the directory `dir` (see [`super::open_tmpfile`]).
pub fn open_tmpfile_at(dir: BorrowedFd<'_>, mode: u32) -> io::Result<OwnedFd> {
    let flags = OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(
        dir,
        c".",
        flags,
        Mode::from_raw_mode(mode),
    )?)
}

/// `linkat(fd, "", dir, name, AT_EMPTY_PATH)`, else `linkat(AT_FDCWD, "/proc/self/fd/N", dir,
/// name, AT_SYMLINK_FOLLOW)` — <https://man7.org/linux/man-pages/man2/linkat.2.html>: gives
/// the open (typically unnamed) file `fd` the name `name` in `dir`. EEXIST when it exists.
pub fn link_fd_at(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    match rustix::fs::linkat(fd, c"", dir, name, AtFlags::EMPTY_PATH) {
        Ok(()) => return Ok(()),
        Err(Errno::NOENT | Errno::PERM) => {} // no CAP_DAC_READ_SEARCH
        Err(e) => return Err(e.into()),
    }
    Ok(rustix::fs::linkat(
        CWD,
        fd_path(fd).as_path(),
        dir,
        name,
        AtFlags::SYMLINK_FOLLOW,
    )?)
}

/// `int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, 0)`: a
/// second name for `from` (not followed when a symlink) — a hard link.
pub fn link_at(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
) -> io::Result<()> {
    Ok(rustix::fs::linkat(
        from_dir,
        from,
        to_dir,
        to,
        AtFlags::empty(),
    )?)
}

/// `int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)` —
/// <https://man7.org/linux/man-pages/man2/rename.2.html>: renames within `dir`; replaces what
/// stands at `to` (a symlink itself, never what it points to).
pub fn rename_at(dir: BorrowedFd<'_>, from: &OsStr, to: &OsStr) -> io::Result<()> {
    Ok(rustix::fs::renameat(dir, from, dir, to)?)
}

/// `renameat` from one directory to another: moves `from` in `from_dir` to `to` in `to_dir`,
/// replacing what stands there (a symlink itself, never what it points to).
pub fn rename_across(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
) -> io::Result<()> {
    Ok(rustix::fs::renameat(from_dir, from, to_dir, to)?)
}

/// `openat(dir, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)`: an existing regular file `name` in
/// `dir` opened to write over (never a symlink: ELOOP; never created, never truncated).
pub fn open_existing_write_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    if !super::fstat(fd.as_fd())?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(fd)
}

/// `int unlinkat(int dirfd, const char *path, int flags)` —
/// <https://man7.org/linux/man-pages/man2/unlink.2.html>: removes the name `name` (a symlink
/// itself), `AT_REMOVEDIR` for an empty directory.
pub fn unlink_at(dir: BorrowedFd<'_>, name: &OsStr, is_dir: bool) -> io::Result<()> {
    let flags = if is_dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    Ok(rustix::fs::unlinkat(dir, name, flags)?)
}

/// Removes `name` in `dir` and, when it is a directory, everything below it, never following a
/// symlink (each directory is opened with O_NOFOLLOW from its parent's descriptor, and entries
/// are removed by name in it). Stops at the first error; at most `max_depth` levels.
pub fn remove_tree_at(dir: BorrowedFd<'_>, name: &OsStr, max_depth: usize) -> io::Result<()> {
    remove_tree_keeping(dir, name, name.as_bytes(), max_depth, &|_, _| false).map(|_| ())
}

/// [`remove_tree_at`], leaving what `keep(path, is_dir)` says to keep (`path`: `rel`, then
/// `rel/NAME` below it) and the directories above it. Ok(true) when all of it was removed.
pub fn remove_tree_keeping(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    rel: &[u8],
    max_depth: usize,
    keep: &dyn Fn(&[u8], bool) -> bool,
) -> io::Result<bool> {
    let st = super::fstatat(Some(dir), &c_name(name)?, false)?;
    if keep(rel, st.is_dir()) {
        return Ok(false);
    }
    if !st.is_dir() {
        return unlink_at(dir, name, false).map(|_| true);
    }
    if max_depth == 0 {
        return Err(io::Error::other("directory tree too deep to remove"));
    }
    let sub = open_dir_at(dir, name)?;
    let mut names: Vec<CString> = Vec::new();
    for ent in DirReader::new(sub.as_fd()) {
        names.push(ent?.name);
    }
    let mut all = true;
    for n in names {
        let below = [rel, b"/", n.to_bytes()].concat();
        let name = OsStr::from_bytes(n.to_bytes());
        all &= remove_tree_keeping(sub.as_fd(), name, &below, max_depth - 1, keep)?;
    }
    drop(sub);
    if all {
        unlink_at(dir, name, true)?;
    }
    Ok(all)
}

/// Visits what lies below the directory `name` in `dir` (`name/A`, `name/A/B`, ... as
/// paths relative to `dir`, with whether each is a directory), deepest first, never
/// following a symlink; at most `max_depth` levels. What a dry run of a removal would remove.
pub fn walk_below_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    rel: &[u8],
    max_depth: usize,
    visit: &mut dyn FnMut(&[u8], bool),
) -> io::Result<()> {
    if max_depth == 0 {
        return Err(io::Error::other("directory tree too deep"));
    }
    let sub = open_dir_at(dir, name)?;
    let mut names: Vec<CString> = Vec::new();
    for ent in DirReader::new(sub.as_fd()) {
        names.push(ent?.name);
    }
    for n in names {
        let below = [rel, b"/", n.to_bytes()].concat();
        let is_dir = super::fstatat(Some(sub.as_fd()), &n, false)?.is_dir();
        if is_dir {
            walk_below_at(
                sub.as_fd(),
                OsStr::from_bytes(n.to_bytes()),
                &below,
                max_depth - 1,
                visit,
            )?;
        }
        visit(&below, is_dir);
    }
    Ok(())
}

/// `ssize_t readlinkat(int dirfd, const char *path, char *buf, size_t size)` —
/// <https://man7.org/linux/man-pages/man2/readlink.2.html>: the text of the symlink `name`.
pub fn read_link_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<std::path::PathBuf> {
    let t = rustix::fs::readlinkat(dir, name, Vec::new())?;
    Ok(OsStr::from_bytes(t.to_bytes()).into())
}

/// `int symlinkat(const char *target, int newdirfd, const char *linkpath)` —
/// <https://man7.org/linux/man-pages/man2/symlink.2.html>: a symlink `name` in `dir` holding
/// `target`.
pub fn symlink_at(target: &Path, dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    Ok(rustix::fs::symlinkat(target, dir, name)?)
}

/// `int mknodat(int dirfd, const char *pathname, mode_t mode, dev_t dev)` —
/// <https://man7.org/linux/man-pages/man2/mknodat.2.html>: [`super::mknod`] in `dir`.
pub fn mknod_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    kind: NodeKind,
    perm: u32,
    rdev: u64,
) -> io::Result<()> {
    Ok(rustix::fs::mknodat(
        dir,
        name,
        kind.file_type(),
        Mode::from_raw_mode(perm & 0o7777),
        rdev,
    )?)
}

/// `int fchownat(int dirfd, const char *path, uid_t owner, gid_t group, AT_SYMLINK_NOFOLLOW)`
/// — <https://man7.org/linux/man-pages/man2/fchownat.2.html>: the owner and group of `name`
/// itself (None: left as it is).
pub fn chown_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    uid: Option<u32>,
    gid: Option<u32>,
) -> io::Result<()> {
    // -1 would mean "leave as it is"; ids come from a stat, which never gives -1.
    let u = uid.map(rustix::fs::Uid::from_raw_unchecked);
    let g = gid.map(rustix::fs::Gid::from_raw_unchecked);
    Ok(rustix::fs::chownat(
        dir,
        name,
        u,
        g,
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// `int fchown(int fd, uid_t owner, gid_t group)` —
/// <https://man7.org/linux/man-pages/man2/fchown.2.html>: the owner and group of the open
/// file `fd` (None: left as it is).
pub fn fchown(fd: BorrowedFd<'_>, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    let u = uid.map(rustix::fs::Uid::from_raw_unchecked);
    let g = gid.map(rustix::fs::Gid::from_raw_unchecked);
    Ok(rustix::fs::fchown(fd, u, g)?)
}

/// The permission bits of `name` in `dir`, which must not be a symlink (symlinks have none of
/// their own): opened with `O_PATH | O_NOFOLLOW`, checked, then changed through its
/// `/proc/self/fd` link — the kernel has no fchmodat(AT_SYMLINK_NOFOLLOW) before fchmodat2
/// (6.6), and this is what C libraries do instead. Works for FIFOs and devices without
/// opening them.
pub fn chmod_at(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    if super::fstat(fd.as_fd())?.is_symlink() {
        return Err(symlink_refused());
    }
    Ok(rustix::fs::chmodat(
        CWD,
        fd_path(fd.as_fd()).as_path(),
        Mode::from_raw_mode(mode & 0o7777),
        AtFlags::empty(),
    )?)
}

/// `utimensat(dir, name, times, AT_SYMLINK_NOFOLLOW)` —
/// <https://man7.org/linux/man-pages/man2/utimensat.2.html>: [`super::set_times_nofollow`]
/// in `dir`.
pub fn set_times_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    atime: (i64, i64),
    mtime: (i64, i64),
) -> io::Result<()> {
    let ts = |(s, n): (i64, i64)| Timespec {
        tv_sec: s,
        tv_nsec: n as _,
    };
    let times = Timestamps {
        last_access: ts(atime),
        last_modification: ts(mtime),
    };
    Ok(rustix::fs::utimensat(
        dir,
        name,
        &times,
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// `int fremovexattr(int fd, const char *name)` —
/// <https://man7.org/linux/man-pages/man2/removexattr.2.html>, through rustix.
pub fn remove_xattr(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    Ok(rustix::fs::fremovexattr(fd, name)?)
}

/// `ssize_t fgetxattr(int fd, const char *name, void *value, size_t size)` —
/// <https://man7.org/linux/man-pages/man2/getxattr.2.html>: one small attribute (at most
/// 256 bytes), None when the file has none of that name or the filesystem has no xattrs.
pub fn get_small_xattr(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; 256];
    match rustix::fs::fgetxattr(fd, name, &mut buf[..]) {
        Ok(n) => {
            buf.truncate(n);
            Ok(Some(buf))
        }
        Err(Errno::NODATA | Errno::NOTSUP | Errno::RANGE) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A name as a C string (names from a directory never hold NUL; anything else is refused).
fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::scratch_dir;
    use super::*;

    fn open(p: &Path) -> OwnedFd {
        super::super::open_path(
            p,
            super::super::OpenFlags {
                directory: true,
                ..Default::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn nothing_beneath_follows_a_symlink() {
        let d = scratch_dir();
        let root = d.path().join("root");
        let out = d.path().join("out");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("victim"), b"keep").unwrap();
        std::os::unix::fs::symlink(&out, root.join("a/l")).unwrap();
        std::os::unix::fs::symlink(&out, root.join("l")).unwrap();
        let r = open(&root);
        let fd = open_dir_beneath(r.as_fd(), Path::new("a/b")).unwrap();
        assert!(super::super::fstat(fd.as_fd()).unwrap().is_dir());
        for bad in ["a/l", "l", "l/x", "a/l/victim"] {
            let e = open_dir_beneath(r.as_fd(), Path::new(bad)).unwrap_err();
            assert!(e.to_string().contains("symlink"), "{bad}: {e}");
        }
        assert!(open_dir_beneath(r.as_fd(), Path::new("../out")).is_err());
        assert!(open_dir_at(r.as_fd(), OsStr::new("l")).is_err());
        assert_eq!(
            mkdir_at(r.as_fd(), OsStr::new("l"), 0o700)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EEXIST)
        );
        // Removing a tree that holds a symlink removes the link, not what it points to.
        remove_tree_at(r.as_fd(), OsStr::new("a"), 64).unwrap();
        assert!(!root.join("a").exists());
        assert_eq!(std::fs::read(out.join("victim")).unwrap(), b"keep");
        assert!(chmod_at(r.as_fd(), OsStr::new("l"), 0o777).is_err());
        let e = create_at(r.as_fd(), OsStr::new("l"), 0o600).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        assert!(!out.join("l").exists());
    }
}
