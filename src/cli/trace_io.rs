//! Trace files and trace-driven reports, shared by `record`, `show`, `replay`, `run`,
//! `evict --trace` and `load --trace`.

use super::exit::{CliError, ExitCode};
use super::output::Output;
use super::render::{self, bytes, path_text};
use clap::ValueEnum;
use pagewise_core::evict::{evict_trace, TraceEvictOptions};
use pagewise_core::load::{load_trace as load_traced, TraceLoadOptions};
use pagewise_core::trace::TraceCacheReport;
use pagewise_core::trace::{self, SkippedFile, Trace};
use pagewise_core::Observer;
use std::io::Write;
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
pub fn load_trace(path: &Path) -> Result<Trace, CliError> {
    let data = read_trace_file(path)?;
    Trace::from_bytes(&data).map_err(|e| CliError::about(path_text(path), e))
}

/// The bytes of a trace file (or a pipe), at most [`trace::format::MAX_TRACE_BYTES`]: a
/// larger file, or a pipe that goes on, is refused before it is read into memory; the memory
/// is reserved fallibly.
fn read_trace_file(path: &Path) -> Result<Vec<u8>, CliError> {
    use std::io::Read;
    const MAX: u64 = trace::format::MAX_TRACE_BYTES;
    let too_large = |what: String| {
        CliError::Message(format!(
            "{}: trace too large: {what}, larger than the {MAX} bytes (1 GiB) a trace may be",
            path_text(path)
        ))
    };
    let no_memory = |n: usize| {
        CliError::Message(format!(
            "{}: cannot read the trace: no memory for {n} bytes",
            path_text(path)
        ))
    };
    let mut f =
        std::fs::File::open(path).map_err(|e| CliError::file(path_text(path), "open", e))?;
    let meta = f
        .metadata()
        .map_err(|e| CliError::file(path_text(path), "fstat", e))?;
    if meta.is_file() && meta.len() > MAX {
        return Err(too_large(format!("{} bytes", meta.len())));
    }
    let mut data: Vec<u8> = Vec::new();
    let first = if meta.is_file() {
        meta.len() as usize
    } else {
        0
    };
    data.try_reserve(first).map_err(|_| no_memory(first))?;
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CliError::file(path_text(path), "read", e)),
        };
        if (data.len() + n) as u64 > MAX {
            return Err(too_large(format!("more than {MAX} bytes")));
        }
        data.try_reserve(n).map_err(|_| no_memory(data.len() + n))?;
        data.extend_from_slice(&chunk[..n]);
    }
    Ok(data)
}

/// Why a trace-driven verb had nothing to act on, from what it found: the trace had no
/// pages, none of its files could be opened, or every traced page lies past its file's end.
pub fn nothing_to_do_reason(empty_trace: bool, files_opened: u64, files_total: usize) -> String {
    if empty_trace {
        "the trace has no pages: nothing was read from disk while it was recorded (the \
         files were cached then; evict them first to record a cold start)"
            .into()
    } else if files_opened == 0 {
        format!(
            "none of its {files_total} traced file(s) is there any more (each is listed with the \
             reason)"
        )
    } else {
        "every traced page lies past the end of its file now (the files shrank since the \
         recording)"
            .into()
    }
}

/// Says on stderr that `verb` had nothing to act on in the trace at `path`, and why; the exit
/// code for it ([`ExitCode::NothingToDo`]).
pub fn nothing_to_do(verb: &str, path: &Path, reason: &str) -> ExitCode {
    eprintln!(
        "pagewise {verb}: nothing to do: {}: {reason}",
        path_text(path)
    );
    ExitCode::NothingToDo
}

/// Writes a trace in `format` to an output opened beforehand.
pub fn write_trace(t: &Trace, format: TraceFormat, out: Output) -> Result<(), CliError> {
    out.write(|w| render_trace(w, t, format))
}

/// Writes a trace in `format`: the binary file, text per page or grouped, or JSON.
pub fn render_trace(w: &mut dyn Write, t: &Trace, format: TraceFormat) -> std::io::Result<()> {
    match format {
        TraceFormat::Binary => w.write_all(&t.to_bytes()),
        TraceFormat::Text => trace::write_text(t, false, w),
        TraceFormat::Grouped => trace::write_text(t, true, w),
        TraceFormat::Json => serde_json::to_writer_pretty(&mut *w, t)
            .map_err(std::io::Error::other)
            .and_then(|_| writeln!(w)),
    }
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
pub fn command_error(verb: &str, e: pagewise_core::Error) -> ExitCode {
    eprintln!("pagewise {verb}: {e}");
    ExitCode::from_error(&e)
}

/// Notes the traced files that were skipped, each with its reason (on stderr).
pub fn skipped_note(verb: &str, count: u64, skipped: &[SkippedFile]) {
    let _ = write_skipped(&mut std::io::stderr().lock(), verb, count, skipped);
}

/// Writes the note on skipped traced files: how many, then each listed one with its reason.
/// Nothing when none were.
pub fn write_skipped(
    w: &mut dyn Write,
    verb: &str,
    count: u64,
    skipped: &[SkippedFile],
) -> std::io::Result<()> {
    if count == 0 {
        return Ok(());
    }
    writeln!(w, "pagewise {verb}: note: {count} traced file(s) skipped:")?;
    for s in skipped {
        writeln!(w, "pagewise {verb}:   {}: {}", path_text(&s.path), s.reason)?;
    }
    if count > skipped.len() as u64 {
        writeln!(
            w,
            "pagewise {verb}:   ... and {} more",
            count - skipped.len() as u64
        )?;
    }
    Ok(())
}

/// `evict --trace`: drops exactly the pages recorded in the trace at `path`.
pub fn evict_by_trace(path: &Path, json: bool, dry_run: bool) -> Result<ExitCode, CliError> {
    let trace = load_trace(path)?;
    let shape = (trace.events.is_empty(), trace.files.len());
    let r = evict_trace(&TraceEvictOptions { trace, dry_run }, &());
    cache_verb("evict", path, json, shape, r)
}

/// `load --trace`: loads exactly the pages recorded in the trace at `path`, `depth` reads in
/// flight.
pub fn load_by_trace(path: &Path, json: bool, depth: usize) -> Result<ExitCode, CliError> {
    let trace = load_trace(path)?;
    let shape = (trace.events.is_empty(), trace.files.len());
    let r = load_traced(&TraceLoadOptions { trace, depth }, &());
    cache_verb("load", path, json, shape, r)
}

/// Renders the report of `evict --trace` / `load --trace`: JSON, or the problems and notes
/// on stderr and the summary on stdout. `shape`: whether the trace had no events, and its
/// files. The exit code: some files failed (2), else nothing to act on (3), else 0.
fn cache_verb(
    verb: &str,
    path: &Path,
    json: bool,
    (empty_trace, files_total): (bool, usize),
    r: Result<TraceCacheReport, pagewise_core::Error>,
) -> Result<ExitCode, CliError> {
    let r = r.map_err(|e| CliError::about(path_text(path), e))?;
    let o = &r.outcome;
    // Said last, after the files skipped that explain it.
    let finish = || match ExitCode::from_outcome(o) {
        ExitCode::Success if r.ranges == 0 && !o.interrupted => {
            let reason = nothing_to_do_reason(empty_trace, r.files, files_total);
            nothing_to_do(verb, path, &reason)
        }
        code => code,
    };
    if json {
        render::print_json(&r);
        return Ok(finish());
    }
    render::report_problems(verb, &o.errors, o.error_count, &[]);
    skipped_note(verb, r.files_missing, &r.skipped);
    let _ = write_cache_summary(&mut std::io::stdout().lock(), &r);
    if let Some(why) = r.unknown_reason {
        eprintln!(
            "pagewise {verb}: note: {} of {} files: residency unknown (figures marked >= leave them out): {why}",
            r.unknown_files, r.files
        );
    }
    Ok(finish())
}

/// Writes the summary line of `evict --trace` / `load --trace`: ranges, files, bytes traced,
/// cached before and after.
pub fn write_cache_summary(w: &mut dyn Write, r: &TraceCacheReport) -> std::io::Result<()> {
    writeln!(
        w,
        "{} traced ranges in {} files ({} skipped): {} traced, cached {} before, {} after{}, {:.3} s",
        r.ranges,
        r.files,
        r.files_missing,
        bytes(r.bytes),
        render::partial_bytes(r.cached_bytes_before, r.files, r.unknown_files),
        render::partial_bytes(r.cached_bytes_after, r.files, r.unknown_files),
        if r.dry_run { " (dry run: nothing dropped)" } else { "" },
        r.outcome.elapsed_s
    )
}

/// A small hand-made trace for the renderers' tests: a named file, a name with a newline in
/// it, and a file recorded without a path.
#[cfg(test)]
pub fn sample_trace() -> Trace {
    use pagewise_core::trace::{Event, TraceFile};
    let file = |ino: u64, path: Option<&str>| TraceFile {
        dev_major: 8,
        dev_minor: 1,
        ino,
        size: 1 << 20,
        path: path.map(String::from),
        path_bytes: path.map(|p| p.as_bytes().to_vec()),
        deleted: false,
    };
    let event = |ts_ns: u64, file: u32, index: u64, pages: u32| Event {
        ts_ns,
        file,
        pid: 42,
        index,
        pages,
    };
    Trace {
        page_size: 4096,
        duration_ns: 1_500_000_000,
        command: vec!["cat".into(), "a b".into()],
        files: vec![
            file(11, Some("/data/a")),
            file(12, Some("/data/new\nline")),
            file(13, None),
        ],
        events: vec![
            event(1_000, 0, 0, 1),
            event(2_000, 0, 1, 2),
            event(3_000, 1, 8, 1),
            event(4_000, 0, 3, 1),
            event(5_000, 2, 0, 4),
        ],
        ..Trace::default()
    }
}

#[cfg(test)]
mod tests {
    //! The trace-driven reports, rendered from hand-made ones: no kernel involved.
    use super::*;
    use pagewise_core::trace::SkipReason;
    use pagewise_core::Outcome;

    fn text(f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> String {
        let mut out = Vec::new();
        f(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn report(dry_run: bool, unknown_files: u64) -> TraceCacheReport {
        TraceCacheReport {
            dry_run,
            files: 3,
            files_missing: 1,
            ranges: 7,
            bytes: 3 << 20,
            cached_bytes_before: 2 << 20,
            cached_bytes_after: 4096,
            unknown_files,
            outcome: Outcome {
                elapsed_s: 0.0125,
                ..Outcome::default()
            },
            ..TraceCacheReport::default()
        }
    }

    #[test]
    fn cache_summary_after_evict() {
        assert_eq!(
            text(|w| write_cache_summary(w, &report(false, 0))),
            "7 traced ranges in 3 files (1 skipped): 3.0 MiB traced, cached 2.0 MiB before, \
             4.0 KiB after, 0.013 s\n"
        );
    }

    #[test]
    fn cache_summary_dry_run_with_unknown_files() {
        assert_eq!(
            text(|w| write_cache_summary(w, &report(true, 1))),
            "7 traced ranges in 3 files (1 skipped): 3.0 MiB traced, cached >=2.0 MiB before, \
             >=4.0 KiB after (dry run: nothing dropped), 0.013 s\n"
        );
    }

    #[test]
    fn skipped_files_are_listed_with_their_reason_and_the_rest_counted() {
        let skipped = vec![
            SkippedFile {
                path: "<0:5 inode 9>".into(),
                reason: SkipReason::NotMounted {
                    dev_major: 0,
                    dev_minor: 5,
                },
            },
            SkippedFile {
                path: "/data/gone\tx".into(),
                reason: SkipReason::Gone,
            },
        ];
        assert_eq!(
            text(|w| write_skipped(w, "replay", 5, &skipped)),
            "pagewise replay: note: 5 traced file(s) skipped:\n\
             pagewise replay:   <0:5 inode 9>: recorded without a path: device 0:5 is not mounted anywhere (an internal filesystem: pipes, sockets, memfd or anonymous shared memory), so there is no file to read\n\
             pagewise replay:   /data/gone\\x09x: gone: deleted since it was recorded\n\
             pagewise replay:   ... and 3 more\n"
        );
        assert_eq!(text(|w| write_skipped(w, "replay", 0, &[])), "");
    }
}
