//! What `run` reports ([`RunReport`]), and the figures of the drops it shares with
//! [`DroppingReport`](super::DroppingReport) ([`DropFigures`]).

use super::drop_behind::Counts;
use crate::assist::AssistReport;
use crate::residency::MeasuredBy;
use crate::verb::Outcome;
use serde::Serialize;

/// What `run` did to the page cache.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunReport {
    /// The command's exit code (128 + signal when it was killed).
    pub exit_code: i32,
    /// Bytes the command brought into the cache (the kernel's events for its processes).
    pub added_bytes: u64,
    /// Bytes `--assist` asked the kernel to prefetch for it (windows; dropped again too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetched_bytes: Option<u64>,
    /// What the drops did: dropped, left and how it was measured.
    #[serde(flatten)]
    pub figures: DropFigures,
    /// What `--assist` did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assist: Option<AssistReport>,
    /// Errors, notices (fallbacks taken, processes left running); `elapsed_s` is the
    /// command's run time; `interrupted` when the observer was cancelled by the time the
    /// command ended (the CLI: a signal was received, and forwarded to the command).
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What the drops did to the followed pages, in bytes: the figures [`RunReport`] and
/// [`DroppingReport`] share (flattened into both, so their JSON keys are these). "The pages"
/// are the command's (`run`) or those brought in between `start` and `finish` ([`Dropping`]).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, Serialize)]
pub struct DropFigures {
    /// Bytes dropped again, as measured before and after each drop (`method`).
    pub dropped_bytes: u64,
    /// Of the pages, bytes still cached after the final drop (measured).
    pub left_bytes: u64,
    /// Of `left_bytes`, dirty or under writeback (None: unknown, see `unknown_reason`).
    pub left_dirty_bytes: Option<u64>,
    /// Of `left_bytes`, clean: mapped by a process, or busy (None: unknown).
    pub left_mapped_or_busy_bytes: Option<u64>,
    /// How the pages were measured: cachestat(2), or mmap+mincore(2) (no cachestat before
    /// Linux 6.5, [`crate::residency::Method::Mincore`] / `--method mincore`, or cachestat
    /// refused a file).
    pub method: MeasuredBy,
    /// Why `left_dirty_bytes` and `left_mapped_or_busy_bytes` are null (only when they are).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_reason: Option<&'static str>,
    /// Bytes of written files left alone (`keep_written`, the CLI's --keep-written).
    pub kept_written_bytes: u64,
    /// Drop-behind passes before the final one (`max_cache`): while the command ran, or
    /// between `start` and `finish`.
    pub drops_while_running: u64,
    /// Files pages were added to (by the command or `--assist`, or since `start`).
    pub files: u64,
    /// Files that could not be opened to drop their pages (gone, no handle support, or
    /// several files under one tracepoint key).
    pub files_unreachable: u64,
    /// Bytes the command added to those files: neither dropped nor measured (they may all be
    /// cached still). Non-zero means the run's promise was not kept (the CLI exits 2).
    pub unreachable_bytes: u64,
    /// Why one of those files could not be opened (only when some could not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable_reason: Option<String>,
    /// Bytes the command brought into file systems' own pages (metadata read through the
    /// block device, btrfs's btree inode): not file data, which no advice reaches; reported,
    /// not dropped.
    pub metadata_bytes: u64,
    /// Events the kernel lost (ring buffer overrun): their pages may stay cached.
    pub lost_events: u64,
}

impl DropFigures {
    /// The figures of a finished session: its drop counts, files followed and events lost.
    pub(super) fn new(c: &Counts, files: u64, lost_events: u64) -> DropFigures {
        DropFigures {
            dropped_bytes: c.dropped_bytes,
            left_bytes: c.left_bytes,
            left_dirty_bytes: c.left_dirty_bytes,
            left_mapped_or_busy_bytes: c.left_mapped_or_busy_bytes,
            method: c.method,
            unknown_reason: c.unknown_reason(),
            kept_written_bytes: c.kept_written_bytes,
            drops_while_running: c.drops_while_running,
            files,
            files_unreachable: c.files_unreachable,
            unreachable_bytes: c.unreachable_bytes,
            unreachable_reason: c.unreachable_reason.clone(),
            metadata_bytes: c.metadata_bytes,
            lost_events,
        }
    }
}
