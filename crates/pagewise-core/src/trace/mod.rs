//! Tracing the page cache: which file pages a command (and all its descendants) brought into
//! the page cache, from the kernel's `mm_filemap_add_to_page_cache` tracepoint — pages that
//! really came from disk, readahead and mmap faults included, not the read() calls the program
//! made.
//!
//! - [`record`] runs a command under the tracepoint and returns its [`Trace`];
//! - [`format`] is the trace file (what `replay`, `evict --trace` and `load --trace` read);
//! - [`Follower`] follows a process tree by [`perf`] events or a [`tracefs`] instance (used by
//!   `record` and `run`; `assist -p` follows running processes through a [`tracefs`] instance);
//! - [`files`] reaches the traced files again, by path or by handle;
//! - [`file_ranges`] and [`TraceCacheReport`]: a trace's pages in the files as they are now,
//!   and what of them is cached (`replay`, `evict --trace`, `load --trace`);
//! - [`text`] prints a trace.

pub mod command;
pub mod faults;
pub mod files;
mod follower;
pub mod format;
pub(crate) mod pages;
pub mod perf;
mod record;
pub mod text;
pub mod tracefs;
pub mod witness;

pub use command::exit_code;
pub(crate) use command::{orphans_left, orphans_notice};
pub use files::{
    open_file, open_inode, resolve, Mounts, OpenFiles, SkipReason, SkippedFile, TracedFd,
};
pub use follower::{Follow, Follower, Source, StartError};
pub use format::{Event, Fault, Trace, TraceError, TraceFile, UNNAMED_LEGEND};
pub use pages::{file_ranges, TraceCacheReport};
pub(crate) use record::record_seen;
pub use record::{record, RecordOptions, RecordReport};
pub use text::{grouped, write_text, Run};
pub use tracefs::TraceUnavailable;
pub use witness::{trace_key, Witnessed};

/// Where a trace reader hands the events it reads: any `FnMut(RawEvent)`, or a type that also
/// has deferred work to do between events (`--assist`'s windows issued piece by piece).
pub trait EventSink: Send + 'static {
    /// One event.
    fn event(&mut self, e: tracefs::RawEvent);
    /// Called when the reader has handed over every event waiting: does one piece of
    /// deferred work and returns true, or returns false when there is none. The reader reads
    /// its events again after each piece, so new events go first.
    fn idle(&mut self) -> bool {
        false
    }
    /// One event, then all the deferred work: for readers that take events one at a time
    /// and cannot tell whether more wait (tracefs text lines).
    fn event_and_deferred(&mut self, e: tracefs::RawEvent) {
        self.event(e);
        while self.idle() {}
    }
}

impl<F: FnMut(tracefs::RawEvent) + Send + 'static> EventSink for F {
    fn event(&mut self, e: tracefs::RawEvent) {
        self(e)
    }
}

/// How `record`, `run` and `assist` follow the events ([`FollowOptions::backend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// Perf events where the kernel allows them, else a tracefs instance (with a notice).
    #[default]
    Auto,
    /// Perf events ([`perf`]): no PID list, binary samples, nothing to wait for at the end.
    Perf,
    /// A tracefs instance ([`tracefs`]) following the command with set_event_pid.
    Tracefs,
}

/// Ring buffer per CPU of a follower, KiB: [`FollowOptions::buffer_kb`]'s default (and the
/// CLI's `--buffer-kb`, Python's `buffer_kb`).
pub const DEFAULT_BUFFER_KB: u64 = 4096;

/// How a verb follows the page-cache events: the option group `record`, `run` (and
/// [`crate::run::Dropping`]) and `assist` embed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowOptions {
    /// Ring buffer per CPU, KiB (events beyond it are lost, and counted).
    /// Default: [`DEFAULT_BUFFER_KB`].
    pub buffer_kb: u64,
    /// How the events are collected. Default: [`Backend::Auto`].
    pub backend: Backend,
    /// Learn the command's files from the command itself ([`witness`]: a seccomp filter stops
    /// each call that closes a descriptor until pagewise has looked at it). Without, files are
    /// opened again by handle only: ext2/3/4 and squashfs, with CAP_DAC_READ_SEARCH. A command
    /// closing many files pays one round trip each (20,000 small files: see
    /// bench/filesystems). Only for commands pagewise starts. Default: true.
    pub witness: bool,
}

impl Default for FollowOptions {
    fn default() -> Self {
        FollowOptions {
            buffer_kb: DEFAULT_BUFFER_KB,
            backend: Backend::Auto,
            witness: true,
        }
    }
}

/// The tracepoint of pages entering the page cache.
pub const ADD_EVENT: &str = "filemap/mm_filemap_add_to_page_cache";
/// The tracepoint of page faults on file mappings.
pub const FAULT_EVENT: &str = "filemap/mm_filemap_fault";
/// Fault-around: pages mapped around a fault from what is cached (Linux 6.14+), the faults
/// `FAULT_EVENT` does not see.
pub const MAP_EVENT: &str = "filemap/mm_filemap_map_pages";
