//! Trace files and trace-driven reports, shared by `record`, `show`, `replay`, `run`,
//! `evict --trace` and `load --trace`.

use super::output::Output;
use super::render::{self, bytes, path_text};
use clap::ValueEnum;
use pagewise_core::trace::{self, SkippedFile, Trace};
use pagewise_core::trace_cache::{self, TraceCacheReport, TraceEvictOptions, TraceLoadOptions};
use pagewise_core::Observer;
use std::path::Path;
use std::sync::atomic::Ordering;

/// How a trace is written (`record --format`; `show` offers the text ones).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// The versioned binary trace (for replay, evict --trace, load --trace)
    Binary,
    /// One line per page: time path offset
    Text,
    /// Contiguous pages merged: time path offset length
    Grouped,
    /// JSON document
    Json,
}

/// Reads and validates a trace file.
pub fn load_trace(path: &Path) -> Result<Trace, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: read failed: {e}", path_text(path)))?;
    Trace::from_bytes(&data).map_err(|e| format!("{}: {e}", path_text(path)))
}

/// Writes a trace in `format` to an output opened beforehand.
pub fn write_trace(t: &Trace, format: TraceFormat, out: Output) -> Result<(), String> {
    out.write(|w| match format {
        TraceFormat::Binary => w.write_all(&t.to_bytes()),
        TraceFormat::Text => trace::write_text(t, false, w),
        TraceFormat::Grouped => trace::write_text(t, true, w),
        TraceFormat::Json => serde_json::to_writer_pretty(&mut *w, t)
            .map_err(std::io::Error::other)
            .and_then(|_| writeln!(w)),
    })
}

/// The observer of `record`, `run` and `assist -p`: cancelled once pagewise received SIGINT
/// or SIGTERM (or, while `record` and `run` supervise a command, SIGHUP or SIGQUIT). The
/// handlers are installed at the first poll, so they change nothing before: `record` and `run`
/// install them themselves when they start the command, `assist` polls once it is tracing.
pub struct Signals;

impl Observer for Signals {
    fn cancelled(&self) -> bool {
        pagewise_core::sys::interrupt_flag().load(Ordering::SeqCst)
    }
}

/// A library error of `record` / `run`: the message, and the exit status a shell would give
/// (127 / 126 when the command could not be started).
pub fn command_error(verb: &str, e: pagewise_core::Error) -> i32 {
    eprintln!("pagewise {verb}: {e}");
    e.exit_code()
}

/// Notes the traced files that were skipped, each with its reason.
pub fn skipped_note(verb: &str, count: u64, skipped: &[SkippedFile]) {
    if count == 0 {
        return;
    }
    eprintln!("pagewise {verb}: note: {count} traced file(s) skipped:");
    for s in skipped {
        eprintln!("pagewise {verb}:   {}: {}", path_text(&s.path), s.reason);
    }
    if count > skipped.len() as u64 {
        eprintln!(
            "pagewise {verb}:   ... and {} more",
            count - skipped.len() as u64
        );
    }
}

/// `evict --trace`: drops exactly the pages recorded in the trace at `path`.
pub fn evict_by_trace(path: &Path, json: bool, dry_run: bool) -> Result<i32, String> {
    let trace = load_trace(path)?;
    let r = trace_cache::evict_trace(&TraceEvictOptions { trace, dry_run }, &());
    cache_verb("evict", path, json, r)
}

/// `load --trace`: loads exactly the pages recorded in the trace at `path`, `depth` reads in
/// flight.
pub fn load_by_trace(path: &Path, json: bool, depth: usize) -> Result<i32, String> {
    let trace = load_trace(path)?;
    let r = trace_cache::load_trace(&TraceLoadOptions { trace, depth }, &());
    cache_verb("load", path, json, r)
}

/// Renders the report of `evict --trace` / `load --trace`.
fn cache_verb(
    verb: &str,
    path: &Path,
    json: bool,
    r: Result<TraceCacheReport, pagewise_core::Error>,
) -> Result<i32, String> {
    let r = r.map_err(|e| format!("{}: {e}", path_text(path)))?;
    let o = &r.outcome;
    if json {
        render::print_json(&r);
    } else {
        render::report_problems(verb, &o.errors, o.error_count, &[]);
        skipped_note(verb, r.files_missing, &r.skipped);
        println!(
            "{} traced ranges in {} files ({} skipped): {} traced, cached {} before, {} after{}, {:.3} s",
            r.ranges,
            r.files,
            r.files_missing,
            bytes(r.bytes),
            render::partial_bytes(r.cached_bytes_before, r.files, r.unknown_files),
            render::partial_bytes(r.cached_bytes_after, r.files, r.unknown_files),
            if r.dry_run { " (dry run: nothing dropped)" } else { "" },
            o.elapsed_s
        );
        if let Some(why) = r.unknown_reason {
            eprintln!(
                "pagewise {verb}: note: {} of {} files: residency unknown (figures marked >= leave them out): {why}",
                r.unknown_files, r.files
            );
        }
    }
    Ok(render::exit_code(o.error_count))
}
