//! `pagewise record`: a command's page-cache reads, from the kernel's tracepoint.

use super::args::BackendArg;
use super::exit::{command_error, outcome_in_flag_names, CliError, ExitCode};
use super::out_file::OutFile;
use super::render::{bytes, path_text};
use super::signals::Signals;
use super::trace_file::{write_trace, TraceFormat};
use clap::Args;
use pagewise_core::trace::{self, FollowOptions, RecordOptions, RecordReport};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The `pagewise record --help` epilogue: examples, notes and exit codes.
pub const EXAMPLES: &str = "\
Examples:
  pagewise record -o py.trace -- python3 -c 'import asyncio, json'
  pagewise record --format grouped -o - -- ./app --init     grouped text on stdout
  pagewise record --cold -o app.trace -- ./app              a cold start (its files dropped first)
  pagewise show --format text py.trace                      one line per page

Needs root (perf events or tracefs). SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to pagewise are
forwarded to the command; the trace is written when it ends. Processes the command leaves
running (daemons) are not recorded after it exits (a note says how many).
Only pages read from disk are recorded: of a command whose files are all cached, the trace is
empty (a note says so; --cold records a cold start: its files dropped first, put back after).
Exit code: the command's own (128+N when it died of signal N); 127 command not found, 126 not
executable; 1 when tracing could not start or the output cannot be created (checked before the
command runs).";

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Where to write the trace ('-' for stdout)
    #[arg(short = 'o', long, default_value = "pagewise.trace")]
    pub output: PathBuf,
    /// What to write: the binary trace (for replay, show, evict --trace, load --trace), or
    /// text as `show` prints it
    #[arg(long, value_enum, default_value_t = TraceFormat::Binary)]
    pub format: TraceFormat,
    /// Ring buffer per CPU in KiB (events beyond it are lost, and counted)
    #[arg(long, value_name = "KIB", default_value_t = trace::DEFAULT_BUFFER_KB)]
    pub buffer_kb: u64,
    /// Also record the command's page faults on file mappings (for `assist --simulate`)
    #[arg(long)]
    pub faults: bool,
    /// How events are collected
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Do not watch the command's closes to learn its files (no seccomp filter): its files are
    /// then opened again by handle only (ext2/3/4, squashfs; needs CAP_DAC_READ_SEARCH)
    #[arg(long, conflicts_with = "cold")]
    pub no_witness: bool,
    /// Record a cold start: a first run (output hidden) finds every file the command opens,
    /// those are dropped from the cache, the command is recorded again, and the files are put
    /// back as they were
    #[arg(long)]
    pub cold: bool,
    /// The command and its arguments ('--' before it is optional; needed when the command's
    /// own options could be taken for pagewise's)
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

/// `pagewise record`.
pub fn run(a: RecordArgs) -> Result<ExitCode, CliError> {
    // The output first: a bad path is found before the command runs.
    let out = OutFile::open(&a.output)?;
    let opts = RecordOptions {
        command: a.command,
        follow: FollowOptions {
            buffer_kb: a.buffer_kb,
            backend: a.backend.into(),
            witness: !a.no_witness,
        },
        faults: a.faults,
        quiet: false,
    };
    let recorded = if a.cold {
        pagewise_core::bench::record_cold(&opts, &Signals)
    } else {
        trace::record(&opts, &Signals)
    };
    let mut rec = match recorded {
        Ok(r) => r,
        Err(e) => return Ok(command_error("record", e)),
    };
    outcome_in_flag_names(&mut rec.outcome);
    // The trace first, then the words about it.
    write_trace(&rec.trace, a.format, out)?;
    for n in &rec.outcome.notices {
        eprintln!("pagewise record: note: {n}");
    }
    let view = View {
        output: (a.output.as_os_str() != "-").then_some(a.output.as_path()),
    };
    let _ = write_summary(&mut std::io::stderr().lock(), &rec, &view);
    let _ = write_empty_note(&mut std::io::stderr().lock(), &rec.trace);
    Ok(ExitCode::Status(rec.exit_code))
}

/// When nothing was read from disk (and no event was lost), says so and how to record a cold
/// start: an empty trace is of no use to replay, evict --trace or load --trace (they exit 3).
fn write_empty_note(w: &mut dyn Write, t: &trace::Trace) -> std::io::Result<()> {
    if !t.events.is_empty() || t.lost_events > 0 {
        return Ok(());
    }
    writeln!(
        w,
        "pagewise record: note: 0 pages read from disk: everything the command read was \
         already in the page cache, so the trace is empty (replay, evict --trace and load \
         --trace will have nothing to do, and exit 3). To record a cold start, evict the \
         command's files first and record again: `pagewise evict --trace OLD.trace` with an \
         earlier trace of it, or `pagewise evict FILE...` (its binary, libraries, data)."
    )
}

/// What the summary shows besides the report.
struct View<'a> {
    /// The trace file written (not shown when the trace went to stdout).
    output: Option<&'a Path>,
}

/// Writes the summary line: events, pages, files, time, lost events and where the trace went.
fn write_summary(w: &mut dyn Write, rec: &RecordReport, view: &View) -> std::io::Result<()> {
    let t = &rec.trace;
    let files_known = t.files.iter().filter(|f| f.path.is_some()).count();
    writeln!(
        w,
        "pagewise record ({}): {} events, {} pages ({}) in {} files ({} resolved to paths), {:.3} s{}{}",
        rec.source,
        t.events.len(),
        t.bytes() / t.page_size as u64,
        bytes(t.bytes()),
        t.files.len(),
        files_known,
        t.duration_ns as f64 / 1e9,
        if t.lost_events > 0 {
            format!(
                "; WARNING: {} events lost (ring buffer overrun: raise --buffer-kb)",
                t.lost_events
            )
        } else {
            String::new()
        },
        view.output.map_or_else(String::new, |p| format!(" -> {}", path_text(p)))
    )
}

#[cfg(test)]
mod tests {
    //! The summary line, rendered from a hand-made report: no kernel involved.
    use super::*;
    use crate::cli::trace_file::sample_trace;
    use pagewise_core::trace::Source;
    use pagewise_core::Outcome;

    fn summary(lost_events: u64, output: Option<&Path>) -> String {
        let rec = RecordReport {
            trace: pagewise_core::trace::Trace {
                lost_events,
                ..sample_trace()
            },
            exit_code: 0,
            source: Source::Perf,
            outcome: Outcome::default(),
        };
        let mut out = Vec::new();
        write_summary(&mut out, &rec, &View { output }).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn summary_names_the_output() {
        assert_eq!(
            summary(0, Some(Path::new("py.trace"))),
            "pagewise record (perf): 5 events, 9 pages (36.0 KiB) in 3 files (2 resolved to \
             paths), 1.500 s -> py.trace\n"
        );
    }

    #[test]
    fn an_empty_trace_gets_a_note_saying_how_to_record_a_cold_start() {
        let note = |t: &pagewise_core::trace::Trace| {
            let mut out = Vec::new();
            write_empty_note(&mut out, t).unwrap();
            String::from_utf8(out).unwrap()
        };
        let empty = pagewise_core::trace::Trace::default();
        let text = note(&empty);
        assert!(text.starts_with("pagewise record: note: 0 pages read from disk:"));
        assert!(text.contains("pagewise evict --trace OLD.trace"), "{text}");
        // Not for a trace with pages, nor when events were lost (the summary warns then).
        assert_eq!(note(&sample_trace()), "");
        let lost = pagewise_core::trace::Trace {
            lost_events: 3,
            ..empty
        };
        assert_eq!(note(&lost), "");
    }

    #[test]
    fn summary_warns_of_lost_events_and_omits_stdout() {
        assert_eq!(
            summary(17, None),
            "pagewise record (perf): 5 events, 9 pages (36.0 KiB) in 3 files (2 resolved to \
             paths), 1.500 s; WARNING: 17 events lost (ring buffer overrun: raise --buffer-kb)\n"
        );
    }
}
