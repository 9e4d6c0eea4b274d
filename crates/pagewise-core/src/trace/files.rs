//! Reaching the files of a trace again: by their recorded path when it still names the same
//! inode, else by inode with `open_by_handle_at` on their filesystem's mount; and why a file
//! that cannot be reached is skipped. Holding them open for a verb, within the descriptor
//! budget: [`OpenFiles`] in `open_files`.

mod open_files;
pub use open_files::{OpenFiles, TracedFd};

use super::TraceFile;
use crate::sys;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Mutex;

/// Mount points (and file system types) by device `(major, minor)`, read from
/// /proc/self/mountinfo when first needed and kept (one read for a whole trace).
#[derive(Debug, Default)]
pub struct Mounts(Mutex<Option<MountTable>>);

/// Mount point and file system type by device.
type MountTable = HashMap<(u32, u32), (PathBuf, String)>;

impl Mounts {
    /// The table, read when first needed. An empty one is a failed read (mountinfo could not
    /// be opened: EMFILE, say), never kept: the next call reads again, and a device is never
    /// said to be mounted nowhere for want of a descriptor.
    fn with<T>(&self, f: impl FnOnce(&MountTable) -> T) -> T {
        let mut g = self.0.lock().unwrap();
        if g.as_ref().is_none_or(|t| t.is_empty()) {
            *g = Some(read_mounts());
        }
        f(g.as_ref().expect("just read"))
    }

    /// Whether the mount table could be read (a system always has mounts).
    fn readable(&self) -> bool {
        self.with(|t| !t.is_empty())
    }

    /// The mount point of device `dev` (the mount of its filesystem's root first).
    pub fn of(&self, dev: (u32, u32)) -> Option<PathBuf> {
        self.with(|t| t.get(&dev).map(|m| m.0.clone()))
    }

    /// The file system type mounted from device `dev`.
    pub fn fstype(&self, dev: (u32, u32)) -> Option<String> {
        self.with(|t| t.get(&dev).map(|m| m.1.clone()))
    }

    /// Whether the tracepoint key `key` names no file but a file system's own pages: a device
    /// mounted nowhere (the block device's mapping, where ext4 and XFS keep metadata read
    /// through buffer heads; pipes, anonymous memory) or btrfs's btree inode (inode 1). Never
    /// when the mount table cannot be read.
    pub fn is_metadata(&self, key: sys::FileId) -> bool {
        self.with(|t| match t.get(&(key.0, key.1)) {
            None => !t.is_empty(),
            Some((_, fstype)) => fstype == "btrfs" && key.2 == 1,
        })
    }
}

/// The open failed for want of descriptors (EMFILE: this process's RLIMIT_NOFILE; ENFILE: the
/// system's): not a fact about the file, and never to be reported as one.
pub fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Mount points by device, from /proc/self/mountinfo through [`crate::procfs::mounts`] (the
/// mount of the filesystem's root first).
fn read_mounts() -> MountTable {
    let mut m: HashMap<(u32, u32), (bool, PathBuf, String)> = HashMap::new();
    for mount in crate::procfs::mounts() {
        let Some(dev) = mount.dev else {
            continue;
        };
        let is_root = mount.root.as_os_str() == "/";
        match m.get(&dev) {
            Some((true, _, _)) => {}
            Some((false, _, _)) if !is_root => {}
            _ => {
                m.insert(dev, (is_root, mount.mount_point, mount.fstype));
            }
        }
    }
    m.into_iter().map(|(k, v)| (k, (v.1, v.2))).collect()
}

/// Opens a traced file. By its recorded path when that still names the same file (same inode
/// under the tracepoint's key and, where the trace has the file's handle, the same handle:
/// the same generation, not a later file that took the inode number), which needs no
/// privilege; else by the recorded handle, or for a version-1 trace by inode number, with
/// open_by_handle_at on its file system's mount (CAP_DAC_READ_SEARCH). The error names the
/// real reason: ESTALE only when the file is known to be gone.
pub fn open_file(f: &TraceFile, mounts: &Mounts) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let key = sys::FileId(f.dev_major, f.dev_minor, f.ino);
    let mut by_path: Option<std::io::Error> = None;
    if let Some(p) = &f.path_bytes {
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(p));
        match sys::open_path(
            path,
            sys::OpenFlags {
                noatime: true,
                ..Default::default()
            },
        ) {
            Ok(fd) => match sys::fstat(fd.as_fd()) {
                // Replaced under its name by a FIFO or device: say so, never read it.
                Ok(s) if !s.is_file() => return regular(fd, s),
                Ok(s) if s.ino == f.ino && same_file(fd.as_fd(), &s, key, f) => return Ok(fd),
                Ok(_) => by_path = Some(io_error("another file stands under its recorded path")),
                Err(e) => by_path = Some(e),
            },
            // No descriptor to be had: by handle there would be none either.
            Err(e) if out_of_descriptors(&e) => return Err(e),
            Err(e) => by_path = Some(e),
        }
    }
    let why_path = || {
        by_path.as_ref().map_or_else(
            || "recorded without a path".to_string(),
            |e| format!("its recorded path: {e}"),
        )
    };
    if !mounts.readable() {
        return Err(io_error(&format!(
            "{}, and /proc/self/mountinfo cannot be read to open it by handle",
            why_path()
        )));
    }
    let mp = mounts.of((f.dev_major, f.dev_minor)).ok_or_else(|| {
        io_error(&format!(
            "{}, and device {}:{} is mounted nowhere to open it by handle",
            why_path(),
            f.dev_major,
            f.dev_minor
        ))
    })?;
    let mfd = sys::open_path(
        &mp,
        sys::OpenFlags {
            directory: true,
            ..Default::default()
        },
    )?;
    let opened = match &f.handle {
        Some(h) => sys::open_by_file_handle(mfd.as_fd(), h),
        None => sys::open_by_inode(mfd.as_fd(), f.ino),
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(e) if out_of_descriptors(&e) => return Err(e),
        // The handle carries the generation: ESTALE means this file is gone.
        Err(e) if e.raw_os_error() == Some(libc::ESTALE) && f.handle.is_some() => return Err(e),
        // By inode number alone only ext2/3/4 and squashfs answer ESTALE for a free inode;
        // the others check a generation a version-1 trace does not have.
        Err(e) if e.raw_os_error() == Some(libc::ESTALE) && gen_zero_ok(mounts, f) => {
            return Err(e)
        }
        Err(e) => {
            let how = if f.handle.is_some() {
                "by its handle"
            } else {
                "by inode number"
            };
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) => " (needs CAP_DAC_READ_SEARCH)",
                Some(libc::ESTALE) => {
                    " (this file system checks the inode's generation, which a version-1 trace \
                     does not have)"
                }
                _ => "",
            };
            return Err(io_error(&format!(
                "{}, and open_by_handle_at {how}: {e}{hint}",
                why_path()
            )));
        }
    };
    let st = sys::fstat(fd.as_fd())?;
    if !st.is_file() {
        // Found by its inode number only, which now names something else: the traced file
        // is gone and the number was given again (a test deleting a traced file saw a
        // directory made elsewhere take it).
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("gone: its inode number now names a {}", st.kind()),
        ));
    }
    Ok(fd)
}

/// Whether the file open as `fd` (`st` its fstat, same inode number) is the traced one: its
/// tracepoint key, and its handle where the trace has one.
fn same_file(
    fd: std::os::fd::BorrowedFd<'_>,
    st: &sys::Stat,
    key: sys::FileId,
    f: &TraceFile,
) -> bool {
    let own = sys::FileId::from_dev(st.dev, st.ino) == key;
    if !own && super::trace_key(fd, st) != key {
        return false;
    }
    match &f.handle {
        Some(h) => sys::file_handle(fd).is_ok_and(|now| &now == h),
        None => true,
    }
}

/// Whether a free inode number on `f`'s file system gives ESTALE by a generation-0 handle
/// (ext2/3/4, squashfs).
fn gen_zero_ok(mounts: &Mounts, f: &TraceFile) -> bool {
    mounts
        .fstype((f.dev_major, f.dev_minor))
        .is_some_and(|t| matches!(t.as_str(), "ext2" | "ext3" | "ext4" | "squashfs"))
}

fn io_error(msg: &str) -> std::io::Error {
    std::io::Error::other(msg.to_string())
}

/// A traced file must still be a regular file: a FIFO or device now standing under its name
/// (or its inode number) is refused, never read (a read, or an open without O_NONBLOCK, could
/// block forever).
fn regular(fd: OwnedFd, st: sys::Stat) -> std::io::Result<OwnedFd> {
    if st.is_file() {
        return Ok(fd);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "is a {} now, not the regular file that was traced",
            st.kind()
        ),
    ))
}

/// Opens a file known only by its device and inode, by handle.
pub fn open_inode(key: sys::FileId, mounts: &Mounts) -> std::io::Result<OwnedFd> {
    let f = TraceFile {
        dev_major: key.0,
        dev_minor: key.1,
        ino: key.2,
        size: 0,
        path: None,
        path_bytes: None,
        deleted: false,
        handle: None,
    };
    open_file(&f, mounts)
}

/// Fills in paths and sizes of traced files: as the command was seen holding them (`seen`,
/// see [`super::witness`]), else by handle (open_by_handle_at + /proc/self/fd), keeping by
/// inode those that cannot be resolved (deleted, several files under one key, or a file system
/// or user without handle support).
pub fn resolve(files: &mut [TraceFile], seen: &super::Witnessed) {
    let mounts = Mounts::default();
    for f in files.iter_mut() {
        let key = sys::FileId(f.dev_major, f.dev_minor, f.ino);
        if let Some((path, deleted)) = seen.path(key) {
            if let Ok(fd) = seen.open(key) {
                if let Ok(st) = sys::fstat(fd.as_fd()) {
                    f.size = st.size;
                }
            }
            f.deleted = deleted;
            f.path = Some(String::from_utf8_lossy(&path).into_owned());
            f.path_bytes = Some(path);
            f.handle = seen.handle(key);
            continue;
        }
        if seen.is_ambiguous(key) {
            continue;
        }
        let Ok(fd) = open_file(f, &mounts) else {
            continue;
        };
        if let Ok(st) = sys::fstat(fd.as_fd()) {
            f.size = st.size;
        }
        f.handle = sys::file_handle(fd.as_fd()).ok();
        if let Ok(p) = std::fs::read_link(sys::fd_path(fd.as_fd())) {
            use std::os::unix::ffi::OsStrExt;
            let mut b = p.as_os_str().as_bytes().to_vec();
            if b.ends_with(b" (deleted)") {
                f.deleted = true;
                b.truncate(b.len() - 10);
            }
            if b.first() == Some(&b'/') {
                f.path = Some(String::from_utf8_lossy(&b).into_owned());
                f.path_bytes = Some(b);
            }
        }
    }
}

/// Why a traced file was skipped. Shown and serialised as a sentence a user can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// Recorded without a path, on a device that is not mounted anywhere: an internal
    /// filesystem (pipes, sockets, memfd, anonymous shared memory), so there is no file to read.
    NotMounted {
        /// Device major number.
        dev_major: u32,
        /// Device minor number.
        dev_minor: u32,
    },
    /// Deleted while it was recorded, and gone now.
    DeletedWhileRecorded,
    /// Deleted since it was recorded.
    Gone,
    /// Any other failure to open it.
    CannotOpen {
        /// The system's message.
        message: String,
        /// errno, when the kernel said.
        errno: Option<i32>,
    },
}

impl SkipReason {
    /// Why `f` could not be opened (`e` is what opening it gave).
    pub fn of(f: &TraceFile, e: &std::io::Error, mounts: &Mounts) -> SkipReason {
        if f.path.is_none() && mounts.readable() && mounts.of((f.dev_major, f.dev_minor)).is_none()
        {
            return SkipReason::NotMounted {
                dev_major: f.dev_major,
                dev_minor: f.dev_minor,
            };
        }
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESTALE) if f.deleted => {
                SkipReason::DeletedWhileRecorded
            }
            Some(libc::ENOENT) | Some(libc::ESTALE) => SkipReason::Gone,
            errno => SkipReason::CannotOpen {
                message: e.to_string(),
                errno,
            },
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::NotMounted {
                dev_major,
                dev_minor,
            } => write!(
                f,
                "recorded without a path: device {dev_major}:{dev_minor} is not mounted \
                 anywhere (an internal filesystem: pipes, sockets, memfd or anonymous shared \
                 memory), so there is no file to read"
            ),
            SkipReason::DeletedWhileRecorded => {
                f.write_str("deleted while it was recorded, and gone now")
            }
            SkipReason::Gone => f.write_str("gone: deleted since it was recorded"),
            SkipReason::CannotOpen { message, .. } => write!(f, "cannot be opened: {message}"),
        }
    }
}

impl Serialize for SkipReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A traced file that was skipped, and why.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SkippedFile {
    /// The recorded path, or `<MAJOR:MINOR inode N>` for a file recorded without one.
    #[serde(flatten, serialize_with = "crate::json::path")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::PathKeys"))]
    pub path: PathBuf,
    /// Why it was skipped (in JSON: the sentence).
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub reason: SkipReason,
}

/// Skipped files listed in a report (all are counted).
pub const MAX_SKIPPED: usize = 100;
