//! What a copy is asked to do: [`CopyOptions`] with its defaults and its one check
//! ([`CopyOptions::validate`]), the flag-to-mode rules shared by the CLI and the bindings
//! ([`Existing::from_flags`], [`Dereference::from_flags`]), the [`Strategy`] a file's data
//! moves with, and the copy's constants (limits, defaults, batch sizes).

use super::choices::{AltDest, Backup, InPlace, Layout, Links, Preserve, TempPlace};
use super::filter::Filters;
use crate::error::Error;
use serde::Serialize;
use std::cmp;
use std::path::PathBuf;

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
    /// Which of the sources' attributes the copies keep (cp -p keeps them all; rsync picks
    /// with -p -o -g -t -X -A). Default: none ([`Preserve::NONE`]).
    pub preserve: Preserve,
    /// Recreate hard links inside the copied set as hard links (cp -a, rsync -H); false
    /// copies each name as a file of its own (rsync without -H). Default: true.
    pub hard_links: bool,
    /// What is done with the symlinks that are not followed. Default: [`Links::Copy`].
    pub links: Links,
    /// Recreate device nodes (rsync --devices, cp -a). Default: true.
    pub devices: bool,
    /// Recreate FIFOs and sockets (rsync --specials, cp -a). Default: true.
    pub specials: bool,
    /// How modification times are compared (the quick check, what `changes` says): negative,
    /// to the nanosecond; 0, whole seconds (rsync's default); N, within N seconds (rsync
    /// --modify-window). Default: -1.
    pub modify_window: i64,
    /// Only update what exists already at the destination: nothing new is created
    /// (rsync --existing). Default: false.
    pub only_existing: bool,
    /// Only delete (with `delete`): existing directories are walked and tidied; nothing is
    /// created, updated, or has its metadata changed (rsync's --delete-before and
    /// --delete-after passes). Default: false.
    pub delete_only: bool,
    /// rsync's --link-dest, --compare-dest and --copy-dest: directories (relative ones are
    /// taken from the destination) where a file missing at the destination is looked for
    /// under the same relative path; when one there is unchanged from the source, it is
    /// hard-linked, left out, or copied locally. Default: none.
    pub alt_dests: Vec<AltDest>,
    /// rsync's --backup: what an update replaces or `delete` removes is kept under another
    /// name first. Default: None.
    pub backup: Option<Backup>,
    /// Delete at most this many entries (rsync --max-delete); the rest are counted as
    /// left in [`CopyReport::deletes_skipped`](super::CopyReport::deletes_skipped).
    /// Default: None.
    pub max_delete: Option<u64>,
    /// Remove each source file (not directory) once its copy is complete or found up to
    /// date, when it is still the file copied (rsync --remove-source-files). Default: false.
    pub remove_source_files: bool,
    /// rsync's --chmod rules, applied to every source's mode before it is copied.
    /// Default: none.
    pub chmod: Vec<super::modes::ChmodRule>,
    /// rsync's --chown: the owner and group every copy gets (each None: the source's).
    /// Default: none.
    pub chown: (Option<u32>, Option<u32>),
    /// rsync's --usermap and --groupmap: the owner and group a copy gets by its source's
    /// (see [`idmap`](super::idmap)). Default: none.
    pub usermap: Vec<super::idmap::IdRule>,
    /// See `usermap`.
    pub groupmap: Vec<super::idmap::IdRule>,
    /// rsync's --numeric-ids: the maps' name rules are not matched (ids only). Default: false.
    pub numeric_ids: bool,
    /// fallocate the destination before writing (not for sparse files). Default: true.
    pub preallocate: bool,
    /// rsync -S: whole 4 KiB blocks of zeros in a file's data become holes in the copy, as
    /// the source's holes do (punched right after their chunk is written: no extra read).
    /// Files of the small-file batches and the `buffered` strategy are written as read.
    /// Default: false.
    pub sparse_zeros: bool,
    /// rsync --super / --no-super: whether the receiver does what only root may (keep
    /// owners; a failure to is then an error). None: when running as root. Default: None.
    pub super_user: Option<bool>,
    /// rsync -m: directories that would hold no file, symlink or special file at any depth
    /// (after the filter rules and the kinds kept) are left out: not made, and gone for
    /// --delete. Default: false.
    pub prune_empty_dirs: bool,
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
    /// rsync's --partial: a file stopped mid-copy (an interrupt, a read or write error) keeps
    /// its hidden temporary with a checkpoint of what is on disk, and a later run resumes it
    /// (see the `resume` module). Implies `named_temp`. Whatever this says, a copy under a
    /// named temporary writes checkpoints, so one killed (SIGKILL, power cut) is resumed
    /// too. Default: false.
    pub partial: bool,
    /// Which symlinks among the sources are followed (cp's -P, -H, -L). Default:
    /// [`Dereference::Never`], as `cp -r` and `cp -a`.
    pub dereference: Dereference,
    /// `dest` is the copy itself, never a directory to copy into (cp's -T): a second run of
    /// the same command lands in the same place. Needs one source. Default: false.
    pub no_target_directory: bool,
    /// Where each source goes: cp's rules or rsync's. Default: [`Layout::Cp`].
    pub layout: Layout,
    /// With [`Layout::RsyncRelative`]: the directories on each source's kept path are made
    /// from their source directories, with their attributes and reported (rsync's implied
    /// directories); false: made plainly where missing (rsync --no-implied-dirs).
    /// Default: true.
    pub implied_dirs: bool,
    /// How an existing destination file is written: replaced through a temporary (the
    /// default), or written in place (rsync --inplace, --append, --append-verify).
    /// Default: [`InPlace::No`].
    pub inplace: InPlace,
    /// rsync --delay-updates: every file is written under a hidden temporary name and all
    /// are renamed into place at the end of the run, one after the other (implies named
    /// temporaries). Default: false.
    pub delay_updates: bool,
    /// Where files are written before they get their final names (see [`TempPlace`]).
    /// Default: beside them.
    pub temp_place: TempPlace,
    /// Leave symlinks' times as made (rsync -J). Default: false.
    pub omit_link_times: bool,
    /// rsync -E: without `preserve.perms`, a regular file written over an existing one keeps
    /// that one's permission bits but its executability follows the source's (all x bits off
    /// when the source has none; x where r is when the source has some and the old file had
    /// none). Default: false.
    pub executability: bool,
    /// rsync -k: a symlink to a directory in the source is copied as the directory it
    /// points to (its contents entered); other symlinks as `links` says. Default: false.
    pub copy_dirlinks: bool,
    /// A directory where a file, symlink or special file goes is removed even when it is not
    /// empty (rsync --force, implied by --delete); without, only an empty one. Default: false.
    pub force: bool,
    /// Enter directories named as sources (false: rsync without -r under --files-from or
    /// -d: such a directory is made, its contents left). Default: true.
    pub recursive: bool,
    /// Leave a destination file whose modification time is newer than its source's (rsync
    /// -u). Default: false.
    pub skip_newer: bool,
    /// Leave directories' modification times as the copy left them (rsync -O). Default:
    /// false.
    pub omit_dir_times: bool,
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
    /// rsync's filter rules (`--exclude`, `--include`, `--filter`, ...): excluded entries are
    /// not copied (an excluded directory is not entered) and, with `delete`, excluded
    /// destination entries are kept unless the rules say `--delete-excluded`. Default: none.
    pub filters: Filters,
    /// Stay on each source's file system (rsync -x): a directory another file system is
    /// mounted on is copied empty. Default: false.
    pub one_file_system: bool,
    /// Regular files larger than this are not copied (rsync --max-size). Default: None.
    pub max_size: Option<u64>,
    /// Regular files smaller than this are not copied (rsync --min-size). Default: None.
    pub min_size: Option<u64>,
    /// Move at most this many bytes per second, all files together (rsync --bwlimit; held
    /// over any window of seconds). Default: None (no limit).
    pub bwlimit: Option<u64>,
    /// rsync-style `--bwlimit auto`: the rate follows what others reading the same block
    /// devices see (see the `backoff` module); `bwlimit`, if given too, is its ceiling.
    /// Default: false.
    pub bwlimit_auto: bool,
    /// The I/O priority of the copy's threads (ionice): `Idle` yields the disk to every
    /// other process. Default: None (inherited). The calling thread's own is restored after.
    pub io_priority: Option<crate::sys::IoPriority>,
}

impl CopyOptions {
    /// The permission bits of a file written over (or kept as) one of mode `old`, from a
    /// source of mode `src`, without `preserve.perms`: `old`'s, with rsync -E's
    /// executability (rsync's dest_mode()).
    pub(crate) fn mode_over(&self, old: u32, src: u32) -> u32 {
        let old = old & 0o7777;
        match (self.executability, src & 0o111 != 0, old & 0o111 != 0) {
            (false, _, _) | (true, true, true) => old,
            (true, false, _) => old & !0o111,
            (true, true, false) => old | (old & 0o444) >> 2,
        }
    }
}

/// How a file's data moves, and what that does to the page cache.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Pick the fastest cache-clean strategy the filesystems support.
    #[default]
    Auto,
    /// preadv2/pwritev2 with RWF_DONTCACHE (Linux 6.14+).
    Dontcache,
    /// O_DIRECT with aligned buffers, several requests in flight.
    Direct,
    /// Buffered I/O, then write-back and DONTNEED behind the cursor.
    DropBehind,
    /// Plain buffered copy (copy_file_range); leaves both files cached, like cp.
    Buffered,
}

impl Strategy {
    /// The name used by `--cache`, in messages and as the key in
    /// [`CopyReport::strategies`](super::CopyReport::strategies).
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Auto => "auto",
            Strategy::Dontcache => "dontcache",
            Strategy::Direct => "direct",
            Strategy::DropBehind => "drop-behind",
            Strategy::Buffered => "buffered",
        }
    }
}

/// Ordered by name, so a report lists its strategies alphabetically (as it always has).
impl Ord for Strategy {
    fn cmp(&self, other: &Self) -> cmp::Ordering {
        self.name().cmp(other.name())
    }
}

impl PartialOrd for Strategy {
    fn partial_cmp(&self, other: &Self) -> Option<cmp::Ordering> {
        Some(self.cmp(other))
    }
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
    /// Copy every file whatever its size and time (rsync -I, --ignore-times); a symlink or
    /// special file as with `QuickCheck`.
    ReplaceFiles,
    /// Leave a file when its size is the same, whatever its time (rsync --size-only); a
    /// symlink or special file as with `QuickCheck`.
    SizeOnly,
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

    /// [`Existing::from_flags`], refusing `no_clobber` with `update` or `checksum` (it never
    /// replaces, they replace what differs): the one owner of that rule, which the CLI (whose
    /// parser also refuses the flags together) and the bindings call.
    pub fn checked_flags(
        checksum: bool,
        update: bool,
        no_clobber: bool,
    ) -> Result<Existing, Error> {
        if no_clobber && (update || checksum) {
            return Err(Error::Invalid {
                what: "existing",
                message: "no_clobber cannot be combined with update or checksum (it never \
                          replaces, they replace what differs)"
                    .into(),
            });
        }
        Ok(Existing::from_flags(checksum, update, no_clobber))
    }
}

/// The largest chunk (bytes per I/O): each of `depth` I/Os in flight has a buffer of it.
pub const MAX_CHUNK: usize = 256 << 20;
/// The most files copied in parallel.
pub const MAX_THREADS: usize = 1024;
/// The most I/Os in flight within one file.
pub const MAX_DEPTH: usize = 1024;

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

    /// [`Dereference::from_flags`], refusing more than one of `always` (-L), `command_line`
    /// (-H) and `never` (-P): the one owner of that rule.
    pub fn checked_flags(
        always: bool,
        command_line: bool,
        never: bool,
    ) -> Result<Dereference, Error> {
        if [always, command_line, never].iter().filter(|&&b| b).count() > 1 {
            return Err(Error::Invalid {
                what: "dereference",
                message: "dereference, dereference_command_line and no_dereference: give at \
                          most one"
                    .into(),
            });
        }
        Ok(Dereference::from_flags(always, command_line))
    }
}

/// [`CopyOptions::threads`]'s default: files copied in parallel (`copy -j`, Python's
/// `threads`, C's `threads = 0`).
pub const DEFAULT_THREADS: usize = 16;
/// [`CopyOptions::depth`]'s default: I/Os in flight within one large file.
pub const DEFAULT_DEPTH: usize = 8;
/// [`CopyOptions::chunk`]'s default, 4 MiB per I/O.
pub const DEFAULT_CHUNK: usize = 4 << 20;
/// [`CopyOptions::direct_min`]'s default, 1 MiB.
pub const DEFAULT_DIRECT_MIN: u64 = 1 << 20;

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            sources: Vec::new(),
            dest: PathBuf::new(),
            strategy: Strategy::Auto,
            preserve: Preserve::NONE,
            hard_links: true,
            links: Links::Copy,
            devices: true,
            specials: true,
            modify_window: -1,
            only_existing: false,
            delete_only: false,
            alt_dests: Vec::new(),
            backup: None,
            max_delete: None,
            remove_source_files: false,
            chmod: Vec::new(),
            chown: (None, None),
            usermap: Vec::new(),
            groupmap: Vec::new(),
            numeric_ids: false,
            preallocate: true,
            fsync: false,
            verify: false,
            threads: DEFAULT_THREADS,
            depth: DEFAULT_DEPTH,
            chunk: DEFAULT_CHUNK,
            direct_min: DEFAULT_DIRECT_MIN,
            named_temp: false,
            partial: false,
            dereference: Dereference::Never,
            no_target_directory: false,
            layout: Layout::Cp,
            implied_dirs: true,
            inplace: InPlace::No,
            omit_link_times: false,
            executability: false,
            sparse_zeros: false,
            super_user: None,
            prune_empty_dirs: false,
            copy_dirlinks: false,
            delay_updates: false,
            temp_place: TempPlace::Beside,
            force: false,
            recursive: true,
            skip_newer: false,
            omit_dir_times: false,
            existing: Existing::Replace,
            delete: false,
            dry_run: false,
            items: false,
            filters: Filters::default(),
            one_file_system: false,
            max_size: None,
            min_size: None,
            bwlimit: None,
            bwlimit_auto: false,
            io_priority: None,
        }
    }
}

/// Files up to this size are copied in batches (see the worker's small-file path).
pub(super) const SMALL_FILE: u64 = 256 << 10;
/// Files and bytes per small-file batch of one worker.
pub(super) const SMALL_BATCH: usize = 64;
pub(super) const SMALL_BATCH_BYTES: u64 = 2 << 20;
/// Files a worker gathers before it waits for their write-back and drops them (at most).
pub(super) const SETTLE_BATCH: usize = 256;
/// Files and dirty bytes that trigger a write-back of the batch the workers share.
pub(super) const SETTLE_FILES: usize = 2048;
pub(super) const SETTLE_BYTES: u64 = 64 << 20;
/// Files held open for the destination residue's measure at the end; beyond, the first
/// measure counts.
pub(super) const RESIDUE_RECHECK: usize = 4096;

/// The unit `chunk` must be a multiple of.
const CHUNK_ALIGN: usize = 4096;

impl CopyOptions {
    /// Where an alternate destination directory holds the counterpart of the destination
    /// path `dst`: the same path below it (a relative directory taken from `dest`, `..`
    /// resolved by name). None when `dst` is not below `dest`.
    pub fn alt_path(&self, alt: &AltDest, dst: &std::path::Path) -> Option<PathBuf> {
        let rel = dst.strip_prefix(&self.dest).ok()?;
        let mut base = PathBuf::new();
        for c in self.dest.join(&alt.dir).components() {
            match c {
                std::path::Component::ParentDir
                    if matches!(
                        base.components().next_back(),
                        Some(std::path::Component::Normal(_))
                    ) =>
                {
                    base.pop();
                }
                std::path::Component::CurDir => {}
                c => base.push(c),
            }
        }
        Some(base.join(rel))
    }

    /// The first alternate destination holding a counterpart of `dst` (its lstat), for the
    /// itemized changes rsync reports against it.
    pub(super) fn alt_basis(&self, dst: &std::path::Path) -> Option<crate::sys::Stat> {
        self.alt_dests
            .iter()
            .find_map(|a| crate::sys::stat_path(&self.alt_path(a, dst)?, false).ok())
    }

    /// Whether two modification times count as equal under `modify_window`.
    pub fn same_mtime(&self, a: (i64, i64), b: (i64, i64)) -> bool {
        match self.modify_window {
            w if w < 0 => a == b,
            0 => a.0 == b.0,
            w => (a.0 - b.0).abs() <= w,
        }
    }

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

    #[test]
    fn executability_follows_rsync_s_dest_mode() {
        let e = CopyOptions {
            executability: true,
            ..valid()
        };
        // rsync's executability test: 0700 over a 0600 source loses x; 0604 over 0601
        // gains x where r is.
        assert_eq!(e.mode_over(0o100700, 0o100600), 0o600);
        assert_eq!(e.mode_over(0o100604, 0o100601), 0o705);
        assert_eq!(e.mode_over(0o100750, 0o100700), 0o750);
        assert_eq!(e.mode_over(0o104755, 0o100644), 0o4644);
        assert_eq!(valid().mode_over(0o100700, 0o100600), 0o700);
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
}
