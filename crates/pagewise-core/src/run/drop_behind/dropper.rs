//! The [`Dropper`]: the command's files opened by handle (a bounded set kept open), each
//! range measured before and after its drop (cachestat(2), or mmap+mincore(2): the [`Meter`]
//! every verb measures with), and what the drops did ([`Counts`]), measured once more after
//! the final drop. The drops themselves are functions over it: of ranges in `ranges`, the
//! last one and its measure in `left`; paging out of mapped pages is its [`PageOut`].

use super::measured::Measured;
use super::page_out::PageOut;
use crate::residency::{MeasuredBy, Meter, Method};
use crate::sys;
use crate::sys::FileId as FileKey;
use crate::trace::{Mounts, Witnessed};
use crate::verb::Tally;
use std::collections::{HashMap, HashSet};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Files kept open between drop-behind passes.
const MAX_OPEN: usize = 4096;

/// Files dropped together: a tree of 100k files never holds more than a batch open.
const BATCH_FILES: usize = 1024;

/// Why `left_dirty_bytes` / `left_mapped_or_busy_bytes` are null: only cachestat(2) counts
/// dirty pages and pages under writeback.
pub const UNKNOWN_NO_CACHESTAT: &str = "measured with mmap+mincore(2), which sees only whether \
a page is cached: dirty and writeback counts need cachestat(2) (Linux >= 6.5)";

/// What the drops did, in bytes (see [`crate::run::DropFigures`] for each).
#[derive(Debug, Clone, Default)]
pub(in crate::run) struct Counts {
    pub dropped_bytes: u64,
    pub kept_written_bytes: u64,
    pub files_unreachable: u64,
    /// Pages the command added to files that could not be opened (neither dropped nor
    /// measured), bytes; and why, for one of them.
    pub unreachable_bytes: u64,
    pub unreachable_reason: Option<String>,
    /// Pages the command brought into file systems' own inodes (metadata: not files).
    pub metadata_bytes: u64,
    pub drops_while_running: u64,
    pub left_bytes: u64,
    /// None: unknown (mincore: see [`UNKNOWN_NO_CACHESTAT`]).
    pub left_dirty_bytes: Option<u64>,
    pub left_mapped_or_busy_bytes: Option<u64>,
    /// How the pages were measured: cachestat, or mincore when any file was.
    pub method: MeasuredBy,
}

impl Counts {
    /// Why the left figures are null, when they are.
    pub fn unknown_reason(&self) -> Option<&'static str> {
        self.left_dirty_bytes
            .is_none()
            .then_some(UNKNOWN_NO_CACHESTAT)
    }
}

/// Drops pending ranges of the command's files, opened by handle.
pub(in crate::run) struct Dropper {
    /// Measures every range before and after its drop: cachestat(2), falling back to
    /// mmap+mincore(2) without it (probed at run time), or mincore only (`Method::Mincore`).
    pub(super) meter: Meter,
    /// When the run started (`CLOCK_REALTIME`): without dirty counts (mincore), a file
    /// modified since then counts as written by the command (`--keep-written`).
    pub(super) started: (i64, i64),
    /// Whether mincore tells the truth about each file (see [`sys::mincore_is_truthful`]).
    pub(super) truthful: Mutex<HashMap<FileKey, bool>>,
    /// Files whose residency could not be measured (why, for the notice): their pages are
    /// dropped all the same but counted in neither `dropped_bytes` nor `left_bytes`.
    pub(super) unmeasured: Mutex<HashMap<FileKey, String>>,
    /// Some file was measured with mincore (no cachestat, or cachestat refused it).
    pub(super) used_mincore: AtomicBool,
    /// Every range is measured page by page with mincore: the kernel has no cachestat
    /// (probed at run time), or `Method::Mincore`.
    pub(super) mincore_route: bool,
    pub(super) keep_written: bool,
    /// Files kept open (at most [`MAX_OPEN`]) and dropped together (at most [`BATCH_FILES`]),
    /// less under a small RLIMIT_NOFILE.
    pub(super) max_open: usize,
    pub(super) batch_files: usize,
    /// Open files, bounded (a tree of 100k files must not run into RLIMIT_NOFILE).
    pub(super) fds: Mutex<HashMap<FileKey, Arc<OwnedFd>>>,
    /// Files that could not be opened (gone, or no handle support).
    pub(super) unreachable: Mutex<HashSet<FileKey>>,
    /// Keys of file systems' own pages (see [`Mounts::is_metadata`]): counted apart.
    pub(super) metadata: Mutex<HashSet<FileKey>>,
    pub(super) mounts: Mounts,
    /// The files the command was seen holding (see [`crate::trace::witness`]): the way to
    /// its files on every file system and without CAP_DAC_READ_SEARCH.
    pub(super) seen: Option<Arc<Witnessed>>,
    /// The command has ended: a file the witness has not seen now never will be.
    pub ended: AtomicBool,
    /// Files with dirty pages seen: written by the command.
    pub(super) written: Mutex<HashSet<FileKey>>,
    /// Paging out of mapped pages, and what it remembers (see `page_out`).
    pub(super) page_out: PageOut,
    pub counts: Mutex<Counts>,
    /// Errors and notices of the whole run.
    pub tally: Tally,
}

/// `sync_file_range` flags that write a range back and wait for it.
pub(super) const WRITE_AND_WAIT: u32 = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;

impl Dropper {
    /// With `keep_written`, the pages of files the command wrote stay.
    pub fn new(keep_written: bool, method: Method, seen: Option<Arc<Witnessed>>) -> Dropper {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let budget = sys::fd_budget_strict();
        let mincore_route = method == Method::Mincore || !sys::probe_cachestat();
        Dropper {
            used_mincore: AtomicBool::new(mincore_route),
            mincore_route,
            meter: Meter::new(method),
            started: (now.as_secs() as i64, now.subsec_nanos() as i64),
            truthful: Mutex::default(),
            unmeasured: Mutex::default(),
            keep_written,
            max_open: (budget / 4).clamp(1, MAX_OPEN),
            batch_files: (budget / 4).clamp(1, BATCH_FILES),
            fds: Mutex::default(),
            unreachable: Mutex::default(),
            metadata: Mutex::default(),
            mounts: Mounts::default(),
            seen,
            ended: AtomicBool::new(false),
            written: Mutex::default(),
            page_out: PageOut::default(),
            counts: Mutex::default(),
            tally: Tally::new(),
        }
    }

    /// The file's descriptor: from the cache, or opened by handle (and cached while there is
    /// room). None when it cannot be opened.
    ///
    /// `users`: the command's threads seen using the file, whose descriptors are looked at
    /// for it when the witness has not seen it closed yet. A file not found while the command
    /// still runs is not given up on (see [`Dropper::given_up`]): its ranges wait for the next
    /// pass.
    pub(super) fn fd(&self, key: FileKey, users: &[u32]) -> Option<Arc<OwnedFd>> {
        if let Some(fd) = self.fds.lock().unwrap().get(&key) {
            return Some(fd.clone());
        }
        if self.given_up(&key) || self.is_metadata(&key) {
            return None;
        }
        match self.open(key, users) {
            Ok(fd) => {
                let mut fds = self.fds.lock().unwrap();
                if fds.len() < self.max_open {
                    fds.insert(key, fd.clone());
                }
                Some(fd)
            }
            Err((why, later)) => {
                if self.mounts.is_metadata(key) {
                    self.metadata.lock().unwrap().insert(key);
                    return None;
                }
                if later && !self.ended.load(Ordering::Relaxed) {
                    return None;
                }
                if self.unreachable.lock().unwrap().insert(key) {
                    let mut c = self.counts.lock().unwrap();
                    c.files_unreachable += 1;
                    c.unreachable_reason
                        .get_or_insert_with(|| format!("{}: {why}", file_name(key)));
                }
                None
            }
        }
    }

    /// Opens the file the tracepoints call `key`: as the witness saw it (a descriptor kept,
    /// or its path checked to be the same file), else by handle (ext2/3/4 and squashfs, with
    /// CAP_DAC_READ_SEARCH). The error says why neither worked.
    /// The error: why, and whether the file may still be seen later (not seen yet while the
    /// witness watches).
    fn open(&self, key: FileKey, users: &[u32]) -> Result<Arc<OwnedFd>, (String, bool)> {
        use crate::trace::witness::NotWitnessed;
        let witnessed = match &self.seen {
            Some(seen) => {
                let mut r = seen.open(key);
                if matches!(r, Err(NotWitnessed::Unseen)) && !users.is_empty() {
                    seen.look_at_all(users);
                    r = seen.open(key);
                }
                match r {
                    Ok(fd) => return Ok(fd),
                    Err(NotWitnessed::Ambiguous) => {
                        return Err((
                            "several files have this device and inode (btrfs subvolumes share \
                             inode numbers under one device in the tracepoints)"
                                .into(),
                            false,
                        ))
                    }
                    Err(NotWitnessed::Gone(e)) => Some(format!("gone from its path: {e}")),
                    Err(NotWitnessed::Unseen) => None,
                }
            }
            None => None,
        };
        let later = witnessed.is_none() && self.seen.as_ref().is_some_and(|s| s.is_active());
        match crate::trace::open_inode(key, &self.mounts) {
            Ok(fd) => Ok(Arc::new(fd)),
            Err(e) => Err((
                match witnessed {
                    Some(w) => w,
                    None => format!("not seen open by the command, and open_by_handle_at: {e}"),
                },
                later,
            )),
        }
    }

    /// Whether the file of `key` was given up on (it cannot be opened, and the command has
    /// ended or the witness could not watch it).
    pub(super) fn given_up(&self, key: &FileKey) -> bool {
        self.unreachable.lock().unwrap().contains(key)
    }

    /// Whether `key` names a file system's own pages, not a file (see [`Mounts::is_metadata`]).
    pub(super) fn is_metadata(&self, key: &FileKey) -> bool {
        self.metadata.lock().unwrap().contains(key)
    }

    /// What is cached of the file's `[off, off+len)`, measured by the [`Meter`]; None when
    /// it cannot be known (mincore would lie about a file the caller may not write, or the
    /// measurement failed: the file is remembered for the notice).
    pub(super) fn measure(
        &self,
        key: FileKey,
        fd: BorrowedFd,
        off: u64,
        len: u64,
    ) -> Option<Measured> {
        // Named only in the notice (`finish_notices`): no string built per measurement.
        let name = "";
        if self.mincore_route {
            let r =
                crate::residency::resident_pages(std::path::Path::new(&name), fd, off, len, || {
                    self.truthful(key, fd)
                });
            let why = match r {
                Ok(Some(pages)) => {
                    return Some(Measured {
                        cached: pages.iter().filter(|p| **p).count() as u64,
                        dirty: None,
                        pages: Some(pages),
                    })
                }
                Ok(None) => crate::residency::UNKNOWN_NOT_WRITABLE.to_string(),
                Err(e) => e.to_string(),
            };
            self.unmeasured.lock().unwrap().entry(key).or_insert(why);
            return None;
        }
        let r = self
            .meter
            .measure_fd(std::path::Path::new(&name), fd, off, off + len, || {
                self.truthful(key, fd)
            });
        let page = sys::page_size();
        match r {
            Ok(r) => {
                if r.method == MeasuredBy::Mincore {
                    self.used_mincore.store(true, Ordering::Relaxed);
                }
                match r.cached {
                    Some(c) => Some(Measured {
                        cached: c.div_ceil(page),
                        dirty: r
                            .dirty
                            .zip(r.writeback)
                            .map(|(d, w)| (d + w).div_ceil(page)),
                        pages: None,
                    }),
                    None => {
                        let why = r.unknown_reason.unwrap_or("unknown").to_string();
                        self.unmeasured.lock().unwrap().entry(key).or_insert(why);
                        None
                    }
                }
            }
            Err(e) => {
                self.unmeasured
                    .lock()
                    .unwrap()
                    .entry(key)
                    .or_insert(e.to_string());
                None
            }
        }
    }

    /// Whether mincore tells the truth about the file (asked once per file, on the mincore
    /// route only): root, its owner, or allowed to write it.
    pub(super) fn truthful(&self, key: FileKey, fd: BorrowedFd) -> bool {
        *self
            .truthful
            .lock()
            .unwrap()
            .entry(key)
            .or_insert_with(|| sys::fstat(fd).is_ok_and(|st| sys::mincore_is_truthful_fd(fd, &st)))
    }

    /// Without dirty counts (mincore): whether the file was modified since the run started,
    /// i.e. written while the command ran.
    pub(super) fn modified_since_start(&self, fd: BorrowedFd) -> bool {
        sys::fstat(fd).is_ok_and(|st| st.mtime >= self.started)
    }

    /// Notices of the measurements: the fallback taken, files that could not be measured.
    pub(super) fn finish_notices(&self) {
        for n in self.meter.take_notices() {
            self.tally.notice(n);
        }
        let unmeasured = self.unmeasured.lock().unwrap();
        if let Some((key, why)) = unmeasured.iter().next() {
            self.tally.notice(format!(
                "the pages of {} file(s) were dropped but could not be measured, so they are \
                 counted in neither dropped nor left bytes (e.g. {}: {why})",
                unmeasured.len(),
                file_name(*key)
            ));
        }
    }

    pub(super) fn kept(&self, key: &FileKey) -> bool {
        self.keep_written && self.written.lock().unwrap().contains(key)
    }
}

/// How a file the command used is named in errors and notices: by device and inode (it was
/// opened by handle; its path may be gone).
pub(super) fn file_name(key: FileKey) -> String {
    format!("<{}:{} inode {}>", key.0, key.1, key.2)
}
