//! `pagewise load`: files and trees or `--trace` (one `Mode`, picked once), the renderer of
//! the LoadReport, and the hold of locked pages.

use super::args::{parse_duration, parse_size_arg, OutputArgs, WalkArgs};
use super::exit::{CliError, ExitCode};
use super::progress::ProgressLine;
use super::render::{self, bytes};
use super::{trace_file, trace_report};
use clap::Args;
use pagewise_core::load::{self, LoadOptions, LoadReport, TraceLoadOptions};
use pagewise_core::Progress;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The `pagewise load --help` epilogue: examples, notes and exit codes.
pub const EXAMPLES: &str = "\
Examples:
  pagewise load /usr/lib              warm a tree
  pagewise load --lock --for 10m model.bin
  pagewise load --range 0-64M big.db

Exit codes: 0 success, 1 fatal error, 2 some files failed, 3 nothing to do (--trace: the trace
has no pages, or none of its files or pages is there any more).";

/// `--window`'s default as clap shows it: `load::DEFAULT_WINDOW` (checked by a test).
const DEFAULT_WINDOW_ARG: &str = "256M";

#[derive(Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    pub walk: WalkArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Keep the loaded pages locked in memory (mlock) until Ctrl-C or --for ends
    #[arg(long)]
    pub lock: bool,
    /// With --lock: how long to hold (e.g. 30s, 10m, 2h); default until SIGINT/SIGTERM
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration, requires = "lock")]
    pub hold_for: Option<Duration>,
    /// Files each worker queues readahead for before waiting on them
    #[arg(long, value_name = "N", default_value_t = load::DEFAULT_BATCH_FILES)]
    pub batch: usize,
    /// Bytes in flight within one large file (>= 64 MiB), split into --depth chunks
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_WINDOW_ARG, value_parser = parse_size_arg)]
    pub window: u64,
    /// Threads reading one large file
    #[arg(long, value_name = "N", default_value_t = load::DEFAULT_DEPTH)]
    pub depth: usize,
    /// Load exactly the pages recorded in TRACE, in on-disk order with a deep queue
    #[arg(long, value_name = "TRACE", conflicts_with_all = ["paths", "from", "lock"])]
    pub trace: Option<PathBuf>,
}

/// What `load` brings in, picked from the flags once (clap keeps them apart).
enum Mode {
    /// `--trace TRACE`: exactly the pages it recorded, `depth` (`--threads`) reads in flight.
    Trace { path: PathBuf, depth: usize },
    /// Files and trees (`PATH...`, `--from`), each whole or its `--range`.
    Paths(Vec<PathBuf>),
}

impl Mode {
    fn of(a: &LoadArgs) -> Result<Mode, CliError> {
        Ok(match &a.trace {
            Some(t) => Mode::Trace {
                path: t.clone(),
                depth: a.walk.threads.unwrap_or(load::DEFAULT_TRACE_DEPTH),
            },
            None => Mode::Paths(a.walk.roots()?),
        })
    }
}

/// `pagewise load`.
pub fn run(a: LoadArgs) -> Result<ExitCode, CliError> {
    match Mode::of(&a)? {
        Mode::Trace { path, depth } => load_by_trace(&path, a.out.json, depth),
        Mode::Paths(roots) => load_paths(roots, a),
    }
}

/// `load --trace`: loads exactly the pages recorded in the trace at `path`, `depth` reads in
/// flight.
fn load_by_trace(path: &Path, json: bool, depth: usize) -> Result<ExitCode, CliError> {
    let trace = trace_file::load_trace(path)?;
    let shape = (trace.events.is_empty(), trace.files.len());
    let r = load::load_trace(&TraceLoadOptions { trace, depth }, &());
    trace_report::cache_verb("load", path, json, shape, r)
}

/// `pagewise load PATH...`, holding the pages locked with `--lock`.
fn load_paths(roots: Vec<PathBuf>, a: LoadArgs) -> Result<ExitCode, CliError> {
    if a.batch == 0 {
        return Err(CliError::Usage("--batch must be at least 1".into()));
    }
    let opts = LoadOptions {
        roots,
        walk: pagewise_core::WalkOptions {
            noatime: true,
            ..a.walk.walk_options(load::default_threads())
        },
        range: a.walk.range(),
        method: a.walk.method(),
        lock: a.lock,
        batch_files: a.batch,
        window: a.window.max(1 << 20),
        depth: a.depth.max(1),
    };
    let progress = Arc::new(Progress::default());
    let bar = ProgressLine::start("load", progress.clone(), !a.out.json && !a.out.json_lines);
    let mut report = load::load(&opts, progress.as_ref())?;
    bar.finish();
    let locks = std::mem::take(&mut report.locks);
    let o = &report.outcome;
    let code = ExitCode::from_outcome(o);
    if a.out.json || a.out.json_lines {
        if a.out.json_lines {
            render::print_stream_end(&o.errors, &report);
        } else {
            render::print_json(&report);
        }
    } else {
        render::report_problems("load", &o.errors, o.error_count, &o.notices);
        let t = &report.total;
        let mut out = std::io::stdout().lock();
        let _ = write_summary(&mut out, &report, a.walk.range.is_some());
        drop(out);
        if let Some(why) = t.unknown_reason {
            eprintln!(
                "pagewise load: note: {} of {} files: what was cached before is unknown: {why}",
                t.unknown_files, t.files
            );
        }
    }
    if a.lock && !locks.is_empty() {
        // Before the "holding" line: a SIGINT sent as soon as it is read must end the hold,
        // not kill the process.
        pagewise_core::sys::block_interrupts();
        let t = &report.total;
        let until = match a.hold_for {
            Some(d) => format!("for {:.0} s", d.as_secs_f64()),
            None => "until Ctrl-C / SIGTERM".into(),
        };
        eprintln!(
            "pagewise load: holding {} locked in {} files {until}",
            bytes(t.locked_bytes),
            t.locked_files
        );
        pagewise_core::sys::wait_for_interrupt(a.hold_for);
        drop(locks);
    }
    Ok(code)
}

/// Writes the one-line summary: files, bytes (in range), cached now and before, rate.
fn write_summary(w: &mut dyn Write, report: &LoadReport, ranged: bool) -> std::io::Result<()> {
    let t = &report.total;
    writeln!(
        w,
        "{} files, {}{}: {} cached now (was {}); {} files were already cached; {:.2} s, {}/s",
        t.files,
        bytes(t.bytes),
        if ranged { " in range" } else { "" },
        bytes(t.cached_bytes_after),
        render::partial_bytes(t.cached_bytes_before, t.files, t.unknown_files),
        t.already_cached_files,
        report.outcome.elapsed_s,
        bytes(report.rate_bytes_per_s as u64),
    )
}

#[cfg(test)]
mod tests {
    //! The summary, rendered from a hand-made report: no kernel involved.
    use super::*;
    use pagewise_core::load::LoadTotals;
    use pagewise_core::walk::WalkSummary;
    use pagewise_core::Outcome;

    #[test]
    fn the_window_default_is_the_library_s() {
        assert_eq!(parse_size_arg(DEFAULT_WINDOW_ARG), Ok(load::DEFAULT_WINDOW));
    }

    #[test]
    fn summary_marks_unknown_before_with_ge() {
        let r = LoadReport {
            page_size: 4096,
            total: LoadTotals {
                files: 4,
                bytes: 8 << 20,
                cached_bytes_before: 1 << 20,
                cached_bytes_after: 8 << 20,
                already_cached_files: 1,
                unknown_files: 1,
                ..LoadTotals::default()
            },
            rate_bytes_per_s: (7 << 20) as f64 / 0.5,
            walk: WalkSummary::default(),
            outcome: Outcome {
                elapsed_s: 0.5,
                ..Outcome::default()
            },
            locks: Default::default(),
        };
        let mut out = Vec::new();
        write_summary(&mut out, &r, true).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "4 files, 8.0 MiB in range: 8.0 MiB cached now (was >=1.0 MiB); 1 files were \
             already cached; 0.50 s, 14.0 MiB/s\n"
        );
    }
}
