//! What a copy reports: the [`CopyReport`] with the cache it left ([`Residue`]), and the
//! per-entry items (`--items`: [`CopyItem`], its [`EntryKind`] and [`Action`]).

use super::options::Strategy;
use crate::sys;
use crate::verb::Outcome;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What one entry of the destination is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// A FIFO or socket (rsync's itemize `S`).
    Special,
    /// A character or block device node (rsync's itemize `D`).
    Device,
}

impl EntryKind {
    /// The kind of what `st` (an lstat) describes (a regular file is a `File`).
    pub(crate) fn of(st: &sys::Stat) -> EntryKind {
        if st.is_dir() {
            EntryKind::Dir
        } else if st.is_symlink() {
            EntryKind::Symlink
        } else if st.is_file() {
            EntryKind::File
        } else if matches!(
            sys::NodeKind::of_mode(st.mode),
            Some(sys::NodeKind::CharDevice | sys::NodeKind::BlockDevice)
        ) {
            EntryKind::Device
        } else {
            EntryKind::Special
        }
    }
}

/// What `copy` did with one entry (or would do, in a dry run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// What stood at this destination was kept under its backup name (`target`) before it was
    /// replaced or deleted (rsync --backup).
    BackedUp,
    /// Not copied, by the options: a symlink without `links`, a device or special file
    /// without `devices`/`specials`, an unsafe symlink under [`Links::SkipUnsafe`](super::Links).
    Ignored,
    /// Its content was up to date and its metadata (mode, owner, times, xattrs, ACLs) was
    /// not: the metadata was brought over (under `preserve`; rsync itemizes `.f...p.....`).
    Metadata,
}

/// One entry's outcome, streamed to the observer when [`CopyOptions::items`] is set.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CopyItem {
    /// The destination path (for a failure: the path the error names).
    #[serde(flatten, serialize_with = "crate::json::path")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::PathKeys"))]
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
    /// What differed from what stood at the destination, for `updated` and `metadata`
    /// (rsync's itemize letters); omitted when nothing is known to.
    #[serde(skip_serializing_if = "Changes::is_empty")]
    pub changes: Changes,
    /// A symlink's text, or a hard link's first name (the destination path it links to).
    #[serde(flatten, serialize_with = "crate::json::opt_target")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::OptTargetKeys"))]
    pub target: Option<PathBuf>,
}

/// What differed between a source entry and what stood at its destination: rsync's itemize
/// letters `c s t p o g a x`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Changes {
    /// Content (a file compared by checksum), a symlink's text or a device's number (`c`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub content: bool,
    /// Size (`s`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub size: bool,
    /// Modification time (`t`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub time: bool,
    /// Permissions (`p`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub perms: bool,
    /// Owner (`o`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub owner: bool,
    /// Group (`g`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub group: bool,
    /// ACLs (`a`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub acl: bool,
    /// Other extended attributes (`x`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub xattr: bool,
}

impl Changes {
    /// Nothing differed (or nothing is known).
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }

    /// What the stats of a source (`src`, as the copy gives it on) and its destination
    /// (`dst`) say differs among what `keep` keeps; the size and content only for regular
    /// files. The owner counts only when it is kept (as root).
    pub(crate) fn of(
        src: &sys::Stat,
        dst: &sys::Stat,
        keep: super::Preserve,
        owner_kept: bool,
        same_mtime: impl Fn((i64, i64), (i64, i64)) -> bool,
    ) -> Changes {
        Changes {
            content: false,
            size: src.is_file() && src.size != dst.size,
            time: !src.is_symlink() && !same_mtime(src.mtime, dst.mtime),
            perms: keep.perms && !src.is_symlink() && src.mode & 0o7777 != dst.mode & 0o7777,
            owner: owner_kept && src.uid != dst.uid,
            group: keep.group && src.gid != dst.gid,
            acl: false,
            xattr: false,
        }
    }
}

/// Bytes of the page cache a copy left behind.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// Files resumed from the partial temporary an earlier, killed or interrupted run left
    /// (the temporary is provably this user's alone, its checkpoint matched the source and
    /// its kept data equals the source byte for byte).
    pub resumed_files: u64,
    /// Data bytes those files kept from the earlier run (not written again).
    pub resumed_bytes: u64,
    /// Bytes read from disk on each side (source and temporary) to compare kept data with
    /// the source before resuming — the cost of the byte-for-byte guarantee.
    pub resume_compared_bytes: u64,
    /// Files whose content was up to date and whose metadata (mode, owner, times, xattrs,
    /// ACLs) was brought over (`preserve` with `existing` quick check or checksum).
    pub metadata_updated: u64,
    /// Entries removed from the destination because the source no longer has them (`delete`).
    pub deleted: u64,
    /// Entries `delete` left because --max-delete was reached.
    pub deletes_skipped: u64,
    /// Files hard-linked from a --link-dest directory instead of copied.
    pub linked: u64,
    /// What `--bwlimit auto` did (None without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_rate: Option<super::AutoRate>,
    /// What `auto` measured on large files to choose between RWF_DONTCACHE and O_DIRECT (one
    /// entry per pair of devices; empty when nothing was measured).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub auto_choices: Vec<AutoChoice>,
    /// Entries not copied because the options leave their kind out ([`Action::Ignored`]).
    pub ignored: u64,
    /// Sizes of every regular file (each name of a hard-linked one) and symlink the copy
    /// met, copied or not (rsync's "total size").
    pub total_size: u64,
    /// Logical bytes of the copied files.
    pub bytes: u64,
    /// Bytes actually moved (sparse holes excluded).
    pub data_bytes: u64,
    /// `data_bytes` per second of the copy (verification not included).
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub rate_bytes_per_s: f64,
    /// Files per strategy really used (keys: [`Strategy::name`]).
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::schema::strategy_counts")
    )]
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

/// What `auto` measured on the first large file between two devices, and chose for the rest
/// of it and for later large files between them.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoChoice {
    /// The source's device, `major:minor` (as in /proc/self/mountinfo).
    pub source_device: String,
    /// The destination's device, `major:minor`.
    pub dest_device: String,
    /// Bytes copied each way to measure.
    pub measured_bytes: u64,
    /// Each way's rate over its windows, write-back included (keys: [`Strategy::name`]; only
    /// the ways open to the file: without RWF_DONTCACHE, `direct` and `drop-behind`).
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::schema::strategy_rates")
    )]
    pub rates_bytes_per_s: BTreeMap<Strategy, f64>,
    /// The strategy chosen for the rest (one of the ways measured).
    pub chosen: Strategy,
}

#[cfg(test)]
mod tests {
    use super::*;

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
