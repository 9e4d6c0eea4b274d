//! Which file a tracepoint's `(device, inode)` is: learnt from the command itself, while it
//! still holds the file open.
//!
//! The page-cache tracepoints name a file by its superblock's device and inode number only.
//! Opening that again by handle needs CAP_DAC_READ_SEARCH (containers do not have it) and a
//! handle with the right generation (only ext2/3/4 and squashfs accept generation 0: XFS and
//! btrfs answer ESTALE). So the command `run`/`record` start is watched through a seccomp
//! filter ([`sys::spawn_notifying`]): before each of its processes closes a descriptor (close,
//! close_range, dup2/dup3 onto it, exec, exit), the [`Witness`] looks at it through
//! `/proc/TID/fd/N`, and for a regular file keeps its path and (while the budget allows) a
//! descriptor of its own, under the key the tracepoints use for it ([`trace_key`]: on overlayfs
//! the real file's, on btrfs the superblock's device). Nothing of the command's is changed: the
//! call then goes on as it would have.
//!
//! Cost: one stat(2) of the proc link per closed descriptor, and an open and readlink once per
//! file (a 100k-file `tar c` closes 100k files: see the notes of issue 38).

use crate::procfs;
use crate::sys::{self, Closing, FileId, FsKind, Notifier};
use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Descriptors kept open at most by the witness (the rest are remembered by path).
const MAX_KEPT: usize = 2048;

/// Descriptors the witness keeps at most: [`MAX_KEPT`], and a quarter of the descriptor
/// budget ([`sys::fd_budget_strict`]) under a small RLIMIT_NOFILE (`ulimit -n 64`: 8), the rest
/// being for the verb that reads the files (run's dropper, the assistant) and for the
/// witness's own one-at-a-time opens.
fn max_kept() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| (sys::fd_budget_strict() / 4).clamp(1, MAX_KEPT))
}

/// The key the page-cache tracepoints give the file open as `fd` (`st` its fstat): its
/// superblock's device and inode. That is stat(2)'s own except on overlayfs (the real upper or
/// lower inode holds the pages) and btrfs (stat gives the subvolume's device): there it is read
/// from this process's /proc/self/maps line for a one-page mapping of the file.
pub fn trace_key(fd: BorrowedFd<'_>, st: &sys::Stat) -> FileId {
    trace_key_on(fd, st, sys::fs_kind(fd))
}

/// [`trace_key`] where the file system's kind is known already.
fn trace_key_on(fd: BorrowedFd<'_>, st: &sys::Stat, kind: FsKind) -> FileId {
    let own = FileId::from_dev(st.dev, st.ino);
    match kind {
        FsKind::Overlay => mapped_key(fd).unwrap_or(own),
        FsKind::Btrfs => {
            // One mapping per subvolume: the superblock's device is the same for its files.
            static SB_DEV: Mutex<Option<HashMap<u64, (u32, u32)>>> = Mutex::new(None);
            let known = SB_DEV
                .lock()
                .unwrap()
                .get_or_insert_with(HashMap::new)
                .get(&st.dev)
                .copied();
            let dev = known.or_else(|| {
                let k = mapped_key(fd)?;
                let d = (k.0, k.1);
                SB_DEV
                    .lock()
                    .unwrap()
                    .get_or_insert_with(HashMap::new)
                    .insert(st.dev, d);
                Some(d)
            });
            dev.map_or(own, |(ma, mi)| FileId(ma, mi, st.ino))
        }
        _ => own,
    }
}

/// The device and inode /proc/self/maps gives a mapping of `fd`.
fn mapped_key(fd: BorrowedFd<'_>) -> Option<FileId> {
    sys::with_mapping_address(fd, |addr| {
        crate::procfs::file_mappings(std::process::id())
            .ok()?
            .into_iter()
            .find(|m| m.start == addr)
            .map(|m| m.file())
    })
    .ok()
    .flatten()
}

/// What the witness learnt of one file.
#[derive(Debug, Default)]
struct Seen {
    /// Its path when last seen (as /proc/TID/fd/N's link gives it, " (deleted)" removed).
    path: Option<Vec<u8>>,
    /// Deleted when last seen.
    deleted: bool,
    /// A descriptor of our own, while within [`max_kept`].
    fd: Option<Arc<OwnedFd>>,
    /// More than one file had this key (btrfs subvolumes share inode numbers under one
    /// superblock device): which of them the tracepoint meant cannot be known.
    ambiguous: bool,
    /// stat(2)'s device of the file, to tell such files apart.
    st_dev: u64,
    /// The file system's handle of it ([`sys::file_handle`]; None where it has none).
    handle: Option<Vec<u8>>,
}

/// The files a command was seen holding, by tracepoint key. Shared by the witness thread
/// (writer) and the verbs (readers).
#[derive(Debug, Default)]
pub struct Witnessed {
    files: Mutex<HashMap<FileId, Seen>>,
    /// Files kept from overlayfs, by inode number: the key each was kept under, None when
    /// several had the number. Since 6.8 /proc/PID/maps names an overlay mapping by the
    /// overlay's inode (file_user_inode), so [`trace_key`] may give the overlay's device where
    /// the tracepoints give the layer's; overlayfs (without xino) shows the layer's inode
    /// number, which finds it ([`Witnessed::alias`]).
    overlay: Mutex<HashMap<u64, Option<FileId>>>,
    /// stat(2) identities already looked at (device, inode): a file closed again costs one
    /// stat only.
    looked: Mutex<HashSet<(u64, u64)>>,
    kept: std::sync::atomic::AtomicUsize,
    /// Whether the command was watched at all (the filter was installed).
    pub active: AtomicBool,
    /// A duplicate of the filter's listener, for [`Witnessed::hand_over_if`].
    listener: Mutex<Option<OwnedFd>>,
    /// The witness thread's id (0 before it started): what it reads is pagewise's own.
    thread: AtomicU32,
    /// The first call the filter stopped: its thread and when (CLOCK_MONOTONIC, ns). That is
    /// the command's `execve` (spawn_notifying installs the filter just before it): what that
    /// thread brought into the cache before then was pagewise's code, run between fork and
    /// exec, not the command's.
    first_stop: Mutex<Option<(u32, u64)>>,
}

/// A file [`Witnessed::look`] caught: opened anew, with its stat(2).
pub struct Caught {
    fd: OwnedFd,
    st: sys::Stat,
}

/// Why a witnessed key cannot be opened.
#[derive(Debug)]
pub enum NotWitnessed {
    /// The command was never seen holding a file with this key.
    Unseen,
    /// Several files had the key (see [`Seen::ambiguous`]).
    Ambiguous,
    /// Seen, but its path no longer names it and no descriptor was kept.
    Gone(io::Error),
}

impl Witnessed {
    /// The witness thread's id (0: none started).
    pub fn thread_id(&self) -> u32 {
        self.thread.load(Ordering::Relaxed)
    }

    /// The command's exec as the filter stopped it: the thread (the command's first process)
    /// and when, CLOCK_MONOTONIC ns. None when the command was not watched.
    pub fn exec_stop(&self) -> Option<(u32, u64)> {
        *self.first_stop.lock().unwrap()
    }

    /// Looks at what `closing` is about to close in thread `tid`: what it catches, opened
    /// anew, is kept by [`Witnessed::keep`] (after the thread was let go on: only the open
    /// has to happen before the close).
    pub fn look(&self, tid: u32, closing: Closing) -> Vec<Caught> {
        let mut caught = Vec::new();
        let mut at = |fd: u32| caught.extend(self.catch(&procfs::fd_link(tid, fd)));
        match closing {
            Closing::One(fd) if fd >= 0 => at(fd as u32),
            Closing::One(_) => {}
            Closing::Range(first, last) => {
                for fd in procfs::open_fds(tid) {
                    if (first..=last).contains(&fd) {
                        at(fd);
                    }
                }
            }
            Closing::All => {
                for fd in procfs::open_fds(tid) {
                    at(fd);
                }
                // The program itself: execve opened it, the process never had a descriptor.
                caught.extend(self.catch(&procfs::exe_link(tid)));
            }
        }
        caught
    }

    /// A regular file not seen before, that a /proc magic link names, opened anew (a new open
    /// file description: the command's offset, flags and locks are not shared). When it cannot
    /// be opened, it is looked at again at its next close; where that is for want of
    /// descriptors (EMFILE, ENFILE), its path is remembered meanwhile (reopened and checked
    /// when needed, as for a file whose descriptor was not kept).
    fn catch(&self, link: &str) -> Option<Caught> {
        let st = sys::stat_path(Path::new(link), true).ok()?;
        if !st.is_file() || !self.looked.lock().unwrap().insert((st.dev, st.ino)) {
            return None;
        }
        let flags = sys::OpenFlags {
            noatime: true,
            ..Default::default()
        };
        match sys::open_path(Path::new(link), flags) {
            Ok(fd) => Some(Caught { fd, st }),
            Err(e) => {
                self.looked.lock().unwrap().remove(&(st.dev, st.ino));
                if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    self.remember_path(link, &st);
                }
                None
            }
        }
    }

    /// Remembers the path of a file that could not be opened (under its stat(2) key: right
    /// but on overlayfs and btrfs, where the file is then not found by its key).
    fn remember_path(&self, link: &str, st: &sys::Stat) {
        use std::os::unix::ffi::OsStrExt;
        let Ok(p) = std::fs::read_link(link) else {
            return;
        };
        let mut b = p.as_os_str().as_bytes().to_vec();
        let deleted = b.ends_with(b" (deleted)");
        if deleted {
            b.truncate(b.len() - 10);
        }
        if b.first() != Some(&b'/') {
            return;
        }
        let mut files = self.files.lock().unwrap();
        let seen = files.entry(FileId::from_dev(st.dev, st.ino)).or_default();
        if seen.path.is_none() {
            seen.st_dev = st.dev;
            seen.path = Some(b);
            seen.deleted = deleted;
        }
    }

    /// Keeps what [`Witnessed::look`] caught: path, and the descriptor while within the budget,
    /// under the tracepoints' key.
    pub fn keep(&self, caught: Vec<Caught>) {
        for Caught { fd: own, st } in caught {
            let kind = sys::fs_kind(own.as_fd());
            let key = trace_key_on(own.as_fd(), &st, kind);
            let path = std::fs::read_link(sys::fd_path(own.as_fd())).ok().map(|p| {
                use std::os::unix::ffi::OsStrExt;
                p.as_os_str().as_bytes().to_vec()
            });
            let (path, deleted) = match path {
                Some(mut b) if b.ends_with(b" (deleted)") => {
                    b.truncate(b.len() - 10);
                    (Some(b), true)
                }
                p => (p, false),
            };
            if kind == FsKind::Overlay {
                self.overlay
                    .lock()
                    .unwrap()
                    .entry(st.ino)
                    .and_modify(|k| {
                        if *k != Some(key) {
                            *k = None
                        }
                    })
                    .or_insert(Some(key));
            }
            let mut files = self.files.lock().unwrap();
            let seen = files.entry(key).or_default();
            if seen.path.is_some() && seen.st_dev != st.dev {
                seen.ambiguous = true;
                continue;
            }
            seen.st_dev = st.dev;
            seen.handle = sys::file_handle(own.as_fd()).ok();
            seen.path = path.filter(|p| p.first() == Some(&b'/'));
            seen.deleted = deleted;
            if seen.fd.is_none() && self.kept.load(Ordering::Relaxed) < max_kept() {
                self.kept.fetch_add(1, Ordering::Relaxed);
                seen.fd = Some(Arc::new(own));
            }
        }
    }

    /// Looks at every descriptor the processes of threads `tids` hold (a file the command
    /// still has open, not closed yet).
    pub fn look_at_all(&self, tids: &[u32]) {
        for &tid in tids {
            let caught = self.look(tid, Closing::All);
            self.keep(caught);
        }
    }

    /// Looks at the files process `pid` maps (by the path /proc/PID/maps gives, opened and
    /// checked to be the mapped file): a file mapped and then closed before it was watched.
    pub fn look_at_maps(&self, pid: u32) {
        let mut caught = Vec::new();
        for (key, path) in crate::procfs::mapped_paths(pid) {
            if self.files.lock().unwrap().contains_key(&key) {
                continue;
            }
            if let Ok(fd) = open_checked(&path, key, None) {
                if let Ok(st) = sys::fstat(fd.as_fd()) {
                    self.looked.lock().unwrap().insert((st.dev, st.ino));
                    caught.push(Caught { fd, st });
                }
            }
        }
        self.keep(caught);
    }

    /// The file the tracepoints call `key`, which thread `tid` just used: as seen already,
    /// else looked for among the descriptors and mappings of `tid`'s process. For a process
    /// pagewise did not start (`assist -p`) this is the only way, and needs no privilege
    /// beyond reading /proc/PID of a process of one's own.
    pub fn find(&self, key: FileId, tid: u32) -> Result<Arc<OwnedFd>, NotWitnessed> {
        match self.open(key) {
            Err(NotWitnessed::Unseen) => {}
            r => return r,
        }
        self.look_at_all(&[tid]);
        match self.open(key) {
            Err(NotWitnessed::Unseen) => {}
            r => return r,
        }
        self.look_at_maps(tid);
        self.open(key)
    }

    /// Processes the command left running keep its filter: a helper process answers their
    /// closes after pagewise has exited ([`sys::answer_in_background`]), so they do not fail
    /// with ENOSYS. Call once the command has ended, with how many processes it left behind
    /// (none: nothing to do). Returns the notice when no helper could be left.
    pub fn hand_over_if(&self, orphans: usize) -> Option<String> {
        if orphans == 0 {
            return None;
        }
        let listener = self.listener.lock().unwrap().take()?;
        sys::answer_in_background(listener.as_fd()).err().map(|e| {
            format!(
                "no helper could be left for the processes the command left running (fork: \
                 {e}): their close calls fail with ENOSYS once pagewise exits"
            )
        })
    }

    /// Whether the command's processes are watched (the filter was installed).
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// The file the tracepoints call `key`: the descriptor kept for it, else its path opened
    /// again and checked to be the same file (same key).
    pub fn open(&self, key: FileId) -> Result<Arc<OwnedFd>, NotWitnessed> {
        let key = self.alias(key);
        let path = {
            let files = self.files.lock().unwrap();
            let Some(seen) = files.get(&key) else {
                return Err(NotWitnessed::Unseen);
            };
            if seen.ambiguous {
                return Err(NotWitnessed::Ambiguous);
            }
            if let Some(fd) = &seen.fd {
                return Ok(fd.clone());
            }
            seen.path.clone()
        };
        let Some(path) = path else {
            return Err(NotWitnessed::Gone(io::Error::from_raw_os_error(
                libc::ENOENT,
            )));
        };
        let handle = self.handle(key);
        open_checked(&path, key, handle.as_deref())
            .map(Arc::new)
            .map_err(NotWitnessed::Gone)
    }

    /// `key`, or the key an overlay file with its inode number was kept under when nothing
    /// was kept under `key` itself (see [`Witnessed::overlay`]).
    fn alias(&self, key: FileId) -> FileId {
        if self.files.lock().unwrap().contains_key(&key) {
            return key;
        }
        match self.overlay.lock().unwrap().get(&key.2) {
            Some(Some(k)) => *k,
            _ => key,
        }
    }

    /// The path the file of `key` had when last seen, and whether it was deleted then.
    pub fn path(&self, key: FileId) -> Option<(Vec<u8>, bool)> {
        let key = self.alias(key);
        let files = self.files.lock().unwrap();
        let seen = files.get(&key).filter(|s| !s.ambiguous)?;
        Some((seen.path.clone()?, seen.deleted))
    }

    /// The file system's handle of the file of `key`, taken when it was seen.
    pub fn handle(&self, key: FileId) -> Option<Vec<u8>> {
        let key = self.alias(key);
        let files = self.files.lock().unwrap();
        files.get(&key).filter(|s| !s.ambiguous)?.handle.clone()
    }

    /// Whether several files had `key`.
    pub fn is_ambiguous(&self, key: FileId) -> bool {
        self.files
            .lock()
            .unwrap()
            .get(&key)
            .is_some_and(|s| s.ambiguous)
    }

    /// Every file seen that one path names (not deleted, no two files under one key): its key
    /// and path, in no order.
    pub fn files(&self) -> Vec<(FileId, Vec<u8>)> {
        let files = self.files.lock().unwrap();
        files
            .iter()
            .filter(|(_, s)| !s.ambiguous && !s.deleted)
            .filter_map(|(k, s)| Some((*k, s.path.clone()?)))
            .collect()
    }

    /// Files seen.
    pub fn len(&self) -> usize {
        self.files.lock().unwrap().len()
    }

    /// True when no file was seen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Opens `path` (read-only, without following a final symlink) and checks it is the file the
/// tracepoints call `key` (and, given its handle, the same generation): NotFound when another
/// file stands there now.
pub fn open_checked(path: &[u8], key: FileId, handle: Option<&[u8]>) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let p = Path::new(std::ffi::OsStr::from_bytes(path));
    let fd = sys::open_path(
        p,
        sys::OpenFlags {
            noatime: true,
            nofollow: true,
            ..Default::default()
        },
    )?;
    let st = sys::fstat(fd.as_fd())?;
    if !st.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "is a {} now, not the regular file that was traced",
                st.kind()
            ),
        ));
    }
    let same_handle = || handle.is_none_or(|h| sys::file_handle(fd.as_fd()).is_ok_and(|n| n == h));
    if st.ino != key.2 || trace_key(fd.as_fd(), &st) != key || !same_handle() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "another file stands under its path now (ESTALE)",
        ));
    }
    Ok(fd)
}

/// The thread serving a command's filter: looks at every descriptor about to be closed, then
/// lets the call go on. It serves for as long as any process uses the filter (processes the
/// command left running too: were the listener closed, their closes would fail with ENOSYS),
/// and ends when none does.
pub struct Witness;

impl Witness {
    /// Serves the filter whose listener comes on `sock` (see [`sys::spawn_notifying`]),
    /// recording into `seen`, on a thread of its own.
    pub fn serve(sock: OwnedFd, seen: Arc<Witnessed>) -> io::Result<()> {
        std::thread::Builder::new()
            .name("pw-witness".into())
            .spawn(move || {
                seen.thread.store(sys::gettid(), Ordering::Relaxed);
                let Some(n) = Notifier::receive(sock.as_fd()) else {
                    return;
                };
                drop(sock);
                *seen.listener.lock().unwrap() = n.fd().try_clone_to_owned().ok();
                // Linux 6.6+: hand the CPU over directly (a close costs one round trip).
                let _ = n.sync_wake_up();
                seen.active.store(true, Ordering::Relaxed);
                serve_until_done(&n, &seen);
            })
            .map(|_| ())
    }
}

fn serve_until_done(n: &Notifier, seen: &Witnessed) {
    loop {
        match n.wait(1000) {
            Ok(Some(true)) => {}
            Ok(Some(false)) => return,
            Ok(None) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) => return,
        }
        // An error: the thread was killed meanwhile, or a signal; the next one.
        if let Ok(note) = n.next() {
            // Timed before the thread goes on: all it read before is older, all exec reads
            // newer.
            seen.first_stop
                .lock()
                .unwrap()
                .get_or_insert((note.tid, sys::monotonic_ns()));
            let caught = seen.look(note.tid, note.closing);
            let _ = n.go_on(&note);
            seen.keep(caught);
        }
    }
}
