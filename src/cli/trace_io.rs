//! Trace files and trace-driven reports, shared by `record`, `show`, `replay`, `run`,
//! `evict --trace` and `load --trace`.

use super::output::Output;
use super::render::{self, bytes, path_text};
use clap::ValueEnum;
use pagewise_core::replay::{SkippedFile, TraceCacheReport};
use pagewise_core::trace::{self, Trace};
use std::path::Path;

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

/// `evict --trace` / `load --trace`.
pub fn cache_verb(
    verb: &str,
    path: &Path,
    json: bool,
    f: impl FnOnce(&Trace) -> TraceCacheReport,
) -> Result<i32, String> {
    let t = load_trace(path)?;
    let r = f(&t);
    if json {
        render::print_json(&r);
    } else {
        render::report_problems(verb, &r.errors, r.error_count, &[]);
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
            r.elapsed_s
        );
        if let Some(why) = r.unknown_reason {
            eprintln!(
                "pagewise {verb}: note: {} of {} files: residency unknown (figures marked >= leave them out): {why}",
                r.unknown_files, r.files
            );
        }
    }
    Ok(render::exit_code(r.error_count))
}
