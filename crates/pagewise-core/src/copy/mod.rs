//! `copy`: files and trees at device speed, leaving the page cache as it was.
//!
//! A planner thread walks the sources (cp semantics), creates directories and symlinks, and
//! feeds regular files through a bounded channel to a pool of workers, so memory stays flat on
//! any tree. Each worker writes a file as an unnamed O_TMPFILE (or under a hidden temporary
//! name) and links (renames) it into place only when complete; on any error or cancellation
//! nothing is linked (the temporary is removed), so no half file ever stands under a final
//! name. Small files travel in batches of neighbours: one io_uring submission reads a batch,
//! and their write-back is batched across files (syncfs, then a wait and a drop per file).
//! Destination pages are cleaned in batches, never with an fdatasync per file. Hard links
//! inside the copied set are recreated as hard links once their first name exists; directory
//! modes and times are set last, after their contents.
//!
//! - `plan`: cp's rules, refusals (same file, directory into itself), the walk;
//! - `worker`: per file, open the pair and move the data with the first strategy accepted;
//! - `engine`: the strategies' read/write steps and the one chunk loop that runs them;
//! - `commit`: O_TMPFILE + linkat or a named temporary + rename;
//! - `finish`: metadata, write-back batches, hard links, directories, verify, residue.

mod commit;
mod dest;
mod engine;
mod finish;
mod plan;
mod worker;

pub use engine::Strategy;
pub use plan::plan_targets;

use crate::error::{Error, FileError};
use crate::sys;
use crate::verb::{self, FileResult, Observer, Outcome, Tally};
use plan::FileTask;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use worker::Local;

/// What `copy` copies where, and how.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Files, directories and symlinks to copy (at least one). Default: none.
    pub sources: Vec<PathBuf>,
    /// Where to: with cp's rules, into it when it is a directory, else as it (then there must
    /// be one source). Default: empty (invalid).
    pub dest: PathBuf,
    /// How the data moves and what that does to the page cache. Default: [`Strategy::Auto`].
    pub strategy: Strategy,
    /// Keep mode, owner (when root), timestamps and xattrs. Default: false.
    pub preserve: bool,
    /// fallocate the destination before writing (not for sparse files). Default: true.
    pub preallocate: bool,
    /// fsync each file before it is linked (or renamed) into place, and each directory at the
    /// end. Default: false.
    pub fsync: bool,
    /// Re-read every destination from disk and compare with the source's checksum.
    /// Default: false.
    pub verify: bool,
    /// Files copied in parallel (at least 1). Default: 16.
    pub threads: usize,
    /// I/Os in flight within one large file (at least 1). Default: 8.
    pub depth: usize,
    /// Bytes per I/O: a positive multiple of 4 KiB (O_DIRECT needs aligned offsets).
    /// Default: 4 MiB.
    pub chunk: usize,
    /// Under `auto`, files below this size never try O_DIRECT (it pays only for large I/O).
    /// Default: 1 MiB.
    pub direct_min: u64,
    /// Write under hidden temporary names even where O_TMPFILE is available. Default: false.
    pub named_temp: bool,
    /// Which symlinks among the sources are followed (cp's -P, -H, -L). Default:
    /// [`Dereference::Never`], as `cp -r` and `cp -a`.
    pub dereference: Dereference,
    /// `dest` is the copy itself, never a directory to copy into (cp's -T): a second run of
    /// the same command lands in the same place. Needs one source. Default: false.
    pub no_target_directory: bool,
    /// What to do with a destination that exists already. Default: [`Existing::Replace`].
    pub existing: Existing,
    /// Remove what a destination directory holds that its source directory does not (rsync
    /// --delete; only inside directories this copy enters). Default: false.
    pub delete: bool,
    /// Change nothing: plan the copy, decide per entry, and report what would be created,
    /// updated, left or deleted (with [`CopyOptions::items`], per entry). Default: false.
    pub dry_run: bool,
    /// Report every entry's outcome to the observer as a [`CopyItem`]
    /// ([`FileResult::Copy`](crate::verb::FileResult::Copy)). Default: false.
    pub items: bool,
}

/// What `copy` does with a destination file, symlink or special file that exists already.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Existing {
    /// Copy over it (cp's default).
    #[default]
    Replace,
    /// Leave it as it is (cp -n, --no-clobber).
    Keep,
    /// Leave it when it looks the same: a file of the same size and modification time
    /// (rsync's quick check), a symlink with the same text, a special file of the same kind
    /// and device (copy -u). With `preserve`, an interrupted copy is finished this way.
    QuickCheck,
    /// Leave a file when its content is the same (rsync --checksum): a file of another size
    /// is copied, one of the same size is compared byte for byte, both read without caching
    /// (O_DIRECT, or dropped after the read); symlinks and special files as with `QuickCheck`.
    Checksum,
}

impl Existing {
    /// The mode cp/rsync flags ask for: `checksum` (-c) over `update` (-u) over `no_clobber`
    /// (-n), else replace. The CLI and the bindings map their flags through this one rule.
    pub fn from_flags(checksum: bool, update: bool, no_clobber: bool) -> Existing {
        if checksum {
            Existing::Checksum
        } else if update {
            Existing::QuickCheck
        } else if no_clobber {
            Existing::Keep
        } else {
            Existing::Replace
        }
    }
}

/// The largest chunk (bytes per I/O): each of `depth` I/Os in flight has a buffer of it.
pub const MAX_CHUNK: usize = 256 << 20;
/// The most files copied in parallel.
pub const MAX_THREADS: usize = 1024;
/// The most I/Os in flight within one file.
pub const MAX_DEPTH: usize = 1024;

/// What one entry of the destination is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A second name of a file copied (a hard link).
    Hardlink,
    /// A FIFO, socket or device node.
    Special,
}

impl EntryKind {
    /// The kind of what `st` describes (a regular file is a `File`).
    pub(crate) fn of(st: &sys::Stat) -> EntryKind {
        if st.is_dir() {
            EntryKind::Dir
        } else if st.is_symlink() {
            EntryKind::Symlink
        } else if st.is_file() {
            EntryKind::File
        } else {
            EntryKind::Special
        }
    }
}

/// What `copy` did with one entry (or would do, in a dry run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// It did not exist at the destination and was made.
    Created,
    /// It existed and was replaced.
    Updated,
    /// It existed and was left as it was (up to date, or `-n`).
    Skipped,
    /// The source no longer has it (`delete`): removed.
    Deleted,
    /// It could not be copied (the error is in `error` and in the report's errors).
    Failed,
    /// Its content was up to date and its metadata (mode, owner, times, xattrs, ACLs) was
    /// not: the metadata was brought over (under `preserve`; rsync itemizes `.f...p.....`).
    Metadata,
}

/// One entry's outcome, streamed to the observer when [`CopyOptions::items`] is set.
#[derive(Debug, Clone, Serialize)]
pub struct CopyItem {
    /// The destination path (for a failure: the path the error names).
    #[serde(flatten, serialize_with = "crate::json::path")]
    pub path: PathBuf,
    /// What it is (null for a failure, where it may not be known).
    pub kind: Option<EntryKind>,
    /// What happened to it.
    pub action: Action,
    /// Logical bytes of a file created or updated (0 otherwise).
    pub bytes: u64,
    /// The error, for `failed`: `op failed: message`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Which symlinks `copy` follows instead of copying them as symlinks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Dereference {
    /// None: every symlink is copied as a symlink (cp -P, the default of cp -r / -a).
    #[default]
    Never,
    /// Those named as sources (cp -H).
    CommandLine,
    /// All of them, inside trees too (cp -L); a symlink loop is an error, not an endless copy.
    Always,
}

impl Dereference {
    /// The mode cp's flags ask for: `always` (-L) over `command_line` (-H), else never (-P).
    pub fn from_flags(always: bool, command_line: bool) -> Dereference {
        if always {
            Dereference::Always
        } else if command_line {
            Dereference::CommandLine
        } else {
            Dereference::Never
        }
    }
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            sources: Vec::new(),
            dest: PathBuf::new(),
            strategy: Strategy::Auto,
            preserve: false,
            preallocate: true,
            fsync: false,
            verify: false,
            threads: 16,
            depth: 8,
            chunk: 4 << 20,
            direct_min: 1 << 20,
            named_temp: false,
            dereference: Dereference::Never,
            no_target_directory: false,
            existing: Existing::Replace,
            delete: false,
            dry_run: false,
            items: false,
        }
    }
}

/// The unit `chunk` must be a multiple of.
const CHUNK_ALIGN: usize = 4096;

impl CopyOptions {
    /// Checks what can be checked without touching the filesystem: a source and a
    /// destination, `threads` and `depth` at least 1, `chunk` a positive multiple of 4 KiB.
    /// (Whether the destination is a directory, as several sources need, is checked by
    /// [`copy`] when it starts.)
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |what, message: &str| {
            Err(Error::Invalid {
                what,
                message: message.into(),
            })
        };
        if self.sources.is_empty() {
            return invalid("sources", "nothing to copy");
        }
        if self.dest.as_os_str().is_empty() {
            return invalid("destination", "no destination");
        }
        if self.threads == 0 {
            return invalid("threads", "must be at least 1");
        }
        if self.depth == 0 {
            return invalid("depth", "must be at least 1");
        }
        if self.chunk < CHUNK_ALIGN || !self.chunk.is_multiple_of(CHUNK_ALIGN) {
            return invalid("chunk", "must be a multiple of 4 KiB");
        }
        if self.chunk > MAX_CHUNK {
            return invalid("chunk", "must be at most 256 MiB");
        }
        if self.threads > MAX_THREADS {
            return invalid("threads", "must be at most 1024");
        }
        if self.depth > MAX_DEPTH {
            return invalid("depth", "must be at most 1024");
        }
        Ok(())
    }
}

/// Bytes of the page cache a copy left behind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Residue {
    /// Source pages cached after the copy that were not cached before it.
    pub source_added_bytes: u64,
    /// Source pages that were cached before the copy (left alone).
    pub source_precached_bytes: u64,
    /// Destination pages still cached when the copy finished.
    pub dest_cached_bytes: u64,
    /// Data bytes (holes excluded) of the copied sources: what the source percentages refer
    /// to.
    pub source_bytes: u64,
    /// Data bytes (holes excluded) written to the destinations: what the destination
    /// percentage refers to.
    pub dest_bytes: u64,
    /// Source files whose residency cannot be known (cachestat refused them): the source
    /// figures above leave them out.
    pub source_unknown_files: u64,
}

/// What `copy` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CopyReport {
    /// Regular files copied (complete, under their final names).
    pub files: u64,
    /// Directories made or entered.
    pub dirs: u64,
    /// Symlinks copied.
    pub symlinks: u64,
    /// Hard links recreated as hard links.
    pub hardlinks: u64,
    /// FIFOs, sockets and devices recreated (a node that could not be made is an error).
    pub specials: u64,
    /// Entries (files, directories, symlinks, hard links, special files) that did not exist
    /// at the destination and were made.
    pub created: u64,
    /// Entries that existed at the destination and were replaced.
    pub updated: u64,
    /// Files, symlinks and special files left as they were (`existing`: up to date, or kept).
    pub skipped: u64,
    /// Temporaries that earlier, interrupted runs left (their process is gone), removed.
    pub stale_temporaries_removed: u64,
    /// Files whose content was up to date and whose metadata (mode, owner, times, xattrs,
    /// ACLs) was brought over (`preserve` with `existing` quick check or checksum).
    pub metadata_updated: u64,
    /// Entries removed from the destination because the source no longer has them (`delete`).
    pub deleted: u64,
    /// Logical bytes of the copied files.
    pub bytes: u64,
    /// Bytes actually moved (sparse holes excluded).
    pub data_bytes: u64,
    /// `data_bytes` per second of the copy (verification not included).
    pub rate_bytes_per_s: f64,
    /// Files per strategy really used (keys: [`Strategy::name`]).
    pub strategies: BTreeMap<Strategy, u64>,
    /// What the copy left in the page cache.
    pub residue: Residue,
    /// Files re-read from disk and found equal to their source (with `verify`).
    pub verified_files: u64,
    /// Files re-read from disk and found different (each also an error).
    pub verify_mismatches: u64,
    /// Nothing was changed: the figures say what a copy would do.
    pub dry_run: bool,
    /// Errors, notices, the copy's time (verification not included) and whether it was
    /// interrupted (then files not finished were removed; finished files are complete).
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Entries counted by the planner threads and the workers.
#[derive(Default)]
struct Counts {
    symlinks: AtomicU64,
    specials: AtomicU64,
    created: AtomicU64,
    updated: AtomicU64,
    skipped: AtomicU64,
    stale_temps: AtomicU64,
    /// Files whose content was left and whose metadata was brought over.
    metadata: AtomicU64,
    deleted: AtomicU64,
    /// A dry run's files and bytes that a copy would write (the workers count a real run's).
    dry_files: AtomicU64,
    dry_bytes: AtomicU64,
}

/// What the workers and the planner share for one run.
struct Ctx<'a> {
    counts: Counts,
    /// What the written files leave in the page cache.
    dest_residue: finish::DestResidue,
    opts: &'a CopyOptions,
    observer: &'a dyn Observer,
    /// Errors, notices, the clock and a stop once asked for.
    tally: Tally,
    /// Numbers temporary names.
    seq: AtomicU64,
    is_root: bool,
    /// A destination refused O_TMPFILE: use named temporary files from then on.
    no_tmpfile: AtomicBool,
    /// io_uring or RWF_DONTCACHE reads are refused: small files go one by one.
    no_small_path: AtomicBool,
    batch_settle: finish::BatchSettle,
    /// Open files each holder may keep.
    fds: finish::FdBudget,
    /// Filesystems (st_dev of the destination dir) where a strategy was refused.
    refused: Mutex<HashSet<(u64, Strategy)>>,
    /// Files whose destination ran out of space while others were written beside them: they
    /// are tried again one at a time when the parallel pass is over (files that fit one
    /// after the other, as cp copies them, must not fail for being copied together).
    no_space: Mutex<Vec<FileTask>>,
    /// The one-at-a-time pass: ENOSPC is final now.
    final_pass: AtomicBool,
    /// Destination names, resolved without following symlinks.
    dest: dest::Dest,
}

impl<'a> Ctx<'a> {
    fn new(opts: &'a CopyOptions, observer: &'a dyn Observer, dest: dest::Dest) -> Self {
        let fds = finish::FdBudget::new(sys::fd_budget(), opts.threads);
        Ctx {
            counts: Counts::default(),
            dest_residue: finish::DestResidue::new(fds.recheck),
            opts,
            observer,
            tally: Tally::new(),
            seq: AtomicU64::new(0),
            is_root: sys::euid() == 0,
            no_tmpfile: AtomicBool::new(false),
            no_small_path: AtomicBool::new(
                opts.strategy != Strategy::Auto || !sys::probe_io_uring(),
            ),
            batch_settle: finish::BatchSettle::new(fds.shared_settle),
            fds,
            refused: Mutex::new(HashSet::new()),
            no_space: Mutex::new(Vec::new()),
            final_pass: AtomicBool::new(false),
            dest,
        }
    }

    /// Whether to stop (the observer asked, now or before).
    fn stopped(&self) -> bool {
        self.tally.stop_requested(self.observer)
    }

    /// One entry's outcome to the observer, when per-entry results were asked for.
    fn item(&self, path: &Path, kind: EntryKind, action: Action, bytes: u64) {
        if self.opts.items {
            self.observer.file(FileResult::Copy(CopyItem {
                path: path.to_path_buf(),
                kind: Some(kind),
                action,
                bytes,
                error: None,
            }));
        }
    }

    /// An entry made (`existed`: replacing what was there), counted and reported.
    fn done(&self, path: &Path, kind: EntryKind, existed: bool, bytes: u64) {
        let (count, action) = if existed {
            (&self.counts.updated, Action::Updated)
        } else {
            (&self.counts.created, Action::Created)
        };
        count.fetch_add(1, Ordering::Relaxed);
        self.item(path, kind, action, bytes);
    }

    /// An entry left as it was, counted and reported.
    fn skipped(&self, path: &Path, kind: EntryKind) {
        self.counts.skipped.fetch_add(1, Ordering::Relaxed);
        self.item(path, kind, Action::Skipped, 0);
    }

    /// A per-file failure: counted in the outcome and reported as a `failed` entry.
    fn fail(&self, e: FileError) {
        if self.opts.items {
            self.observer.file(FileResult::Copy(CopyItem {
                path: e.path.clone(),
                kind: None,
                action: Action::Failed,
                bytes: 0,
                error: Some(format!("{} failed: {}", e.op, e.message)),
            }));
        }
        self.tally.error(e);
    }

    /// The parallel pass: the planner on this thread, `threads` workers beside it. Returns
    /// what the planner leaves for the end and the workers' figures.
    fn run_parallel(&self, targets: &[(PathBuf, PathBuf)]) -> (plan::Planned, Local) {
        let (tx, rx) = crossbeam_channel::bounded::<Vec<FileTask>>(1024);
        let merged = Mutex::new(Local::default());
        let planned = std::thread::scope(|s| {
            for _ in 0..self.fds.workers {
                let rx = rx.clone();
                let merged = &merged;
                s.spawn(move || worker::work(self, rx, merged));
            }
            drop(rx);
            plan::plan(self, targets, tx)
        });
        (planned, merged.into_inner().unwrap())
    }

    /// Files that met ENOSPC beside others: once more, one at a time.
    fn retry_no_space(&self, m: &mut Local) {
        let retry = std::mem::take(&mut *self.no_space.lock().unwrap());
        if retry.is_empty() {
            return;
        }
        self.final_pass.store(true, Ordering::Relaxed);
        let mut local = Local::default();
        for t in retry {
            self.copy_file(&mut local, t);
        }
        finish::settle(&mut local.settle, &self.dest_residue);
        worker::merge(m, local);
    }
}

/// Copies `options.sources` to `options.dest` (cp -a / rsync -a style, see the module doc).
///
/// Fatal errors (invalid options, several sources and a destination that is not a directory)
/// return `Err` before anything is copied; per-file failures are counted in the report's
/// outcome and the copy goes on. When `observer.cancelled()` says so the copy stops between
/// chunks and files: what was finished is complete, nothing else is left under a final name.
///
/// ```
/// use pagewise_core::copy::{copy, CopyOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let src = dir.path().join("src");
/// std::fs::write(&src, vec![7u8; 3 << 20]).unwrap();
/// let opts = CopyOptions {
///     sources: vec![src],
///     dest: dir.path().join("dst"),
///     ..CopyOptions::default()
/// };
/// let report = copy(&opts, &()).unwrap();
/// assert_eq!(report.files, 1);
/// assert_eq!(std::fs::read(dir.path().join("dst")).unwrap(), vec![7u8; 3 << 20]);
/// assert!(report.outcome.is_clean());
/// ```
pub fn copy(options: &CopyOptions, observer: &dyn Observer) -> Result<CopyReport, Error> {
    options.validate()?;
    let targets = plan_targets(&options.sources, &options.dest, options.no_target_directory)?;
    let umask = finish::umask();
    let follow_roots = options.dereference != Dereference::Never;
    let ctx = Ctx::new(options, observer, dest::Dest::new(&targets, follow_roots));
    if !options.no_target_directory {
        for (src, dst) in &targets {
            if let Some(n) = plan::nesting_notice(src, dst, &options.dest) {
                ctx.tally.notice(n);
            }
        }
    }
    let (planned, mut m) = ctx.run_parallel(&targets);
    ctx.retry_no_space(&mut m);
    ctx.batch_settle.flush(&ctx.dest_residue);
    let hardlinks = ctx.link_hard(&planned.deferred_links);
    if !options.dry_run {
        ctx.finish_dirs(&planned.dirs, umask);
    }
    if options.fsync && !options.dry_run {
        finish::fsync_parents(&targets);
    }
    let interrupted = ctx.stopped();
    // The copy's own time: verification and the residue measure are not in it (nor in the rate).
    let elapsed = ctx.tally.elapsed_s();
    let (verified_files, verify_mismatches) = if options.verify && !interrupted {
        ctx.verify(&m.digests)
    } else {
        (0, 0)
    };
    // Measured per written file after its write-back and drop (see finish::settle): what
    // this copy wrote, not files of the destination it left alone.
    m.residue.dest_cached_bytes =
        (ctx.dest_residue.pages() * sys::page_size()).min(m.residue.dest_bytes);
    let extra = interrupted
        .then(|| {
            "interrupted: files not finished were removed; finished files are complete".to_string()
        })
        .into_iter()
        .collect();
    let mut outcome = ctx.tally.finish(extra);
    outcome.elapsed_s = elapsed;
    let c = &ctx.counts;
    Ok(CopyReport {
        files: m.files + c.dry_files.load(Ordering::Relaxed),
        dirs: planned.dirs.len() as u64,
        symlinks: c.symlinks.load(Ordering::Relaxed),
        hardlinks,
        specials: c.specials.load(Ordering::Relaxed),
        created: c.created.load(Ordering::Relaxed),
        updated: c.updated.load(Ordering::Relaxed),
        skipped: c.skipped.load(Ordering::Relaxed),
        stale_temporaries_removed: c.stale_temps.load(Ordering::Relaxed),
        metadata_updated: c.metadata.load(Ordering::Relaxed),
        deleted: c.deleted.load(Ordering::Relaxed),
        bytes: m.bytes + c.dry_bytes.load(Ordering::Relaxed),
        data_bytes: m.data_bytes,
        rate_bytes_per_s: verb::rate(m.data_bytes, elapsed),
        strategies: m.strategies,
        residue: m.residue,
        verified_files,
        verify_mismatches,
        dry_run: options.dry_run,
        outcome,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> CopyOptions {
        CopyOptions {
            sources: vec!["a".into()],
            dest: "b".into(),
            ..Default::default()
        }
    }

    fn what(o: CopyOptions) -> &'static str {
        match o.validate() {
            Err(Error::Invalid { what, .. }) => what,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn validate_names_the_bad_option() {
        assert!(valid().validate().is_ok());
        assert_eq!(what(CopyOptions::default()), "sources");
        let no_dest = CopyOptions {
            dest: PathBuf::new(),
            ..valid()
        };
        assert_eq!(what(no_dest), "destination");
        assert_eq!(
            what(CopyOptions {
                threads: 0,
                ..valid()
            }),
            "threads"
        );
        assert_eq!(
            what(CopyOptions {
                depth: 0,
                ..valid()
            }),
            "depth"
        );
        for chunk in [0, 512, 4097, (4 << 20) + 1] {
            assert_eq!(what(CopyOptions { chunk, ..valid() }), "chunk");
        }
        assert!(CopyOptions {
            chunk: 4096,
            ..valid()
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn strategies_serialise_by_name_in_name_order() {
        let mut r = CopyReport::default();
        r.strategies.insert(Strategy::DropBehind, 1);
        r.strategies.insert(Strategy::Direct, 2);
        r.strategies.insert(Strategy::Dontcache, 3);
        r.strategies.insert(Strategy::Buffered, 4);
        let v = serde_json::to_string(&r.strategies).unwrap();
        assert_eq!(
            v,
            r#"{"buffered":4,"direct":2,"dontcache":3,"drop-behind":1}"#
        );
        let doc = serde_json::to_value(&r).unwrap();
        for key in [
            "errors",
            "error_count",
            "notices",
            "elapsed_s",
            "interrupted",
        ] {
            assert!(doc.get(key).is_some(), "{key} flattened into the report");
        }
        assert!(doc.get("outcome").is_none());
    }
}
