//! `pagewise load`: files and trees or `--trace` (one `Mode`, picked once), the renderer of
//! the LoadReport, and the hold of locked pages (in the foreground, or detached with
//! `--daemon`; `--pidfile`; sd_notify readiness when NOTIFY_SOCKET is set).

use super::args::{at_least_one, parse_duration, parse_size_arg, OutputArgs, WalkArgs};
use super::exit::{CliError, ExitCode};
use super::output::Output;
use super::progress::ProgressLine;
use super::render::{self, bytes};
use super::{trace_file, trace_report};
use clap::Args;
use pagewise_core::load::hold::{self, ChildSaid, Detached, Notifier, Pidfile, Reporter};
use pagewise_core::load::{self, LoadOptions, LoadReport, LockSet, TraceLoadOptions};
use pagewise_core::{Op, Progress};
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
  pagewise load --lock --daemon --pidfile /run/pagewise-db.pid /srv/db/index
                                      lock, then detach; `kill $(cat /run/pagewise-db.pid)` ends it

--lock --daemon returns once the pages are locked (0, or 2 when some files failed) or with the
daemon's error (nothing locked). With NOTIFY_SOCKET set (systemd Type=notify), READY=1 and
STATUS=locked N bytes of M files are sent once locked, STOPPING=1 when the hold ends.

Exit codes: 0 success, 1 fatal error, 2 some files failed, 3 nothing to do (--trace: the trace
has no pages, or none of its files or pages is there any more; --daemon: nothing to lock).";

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
    /// With --lock: detach once the pages are locked; this command then exits 0 (2 when some
    /// files failed), or with the daemon's error when nothing could be locked
    #[arg(long, requires = "lock")]
    pub daemon: bool,
    /// With --lock: write the holding process's PID to FILE (locked while held, mode 0644;
    /// removed when the hold ends); refuse to start while FILE is held or names a running
    /// pagewise
    #[arg(long, value_name = "FILE", requires = "lock")]
    pub pidfile: Option<PathBuf>,
    /// Files each worker queues readahead for before waiting on them
    #[arg(long, value_name = "N", default_value_t = load::DEFAULT_BATCH_FILES)]
    pub batch: usize,
    /// Bytes in flight within one large file (>= 64 MiB), split into --depth chunks
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_WINDOW_ARG, value_parser = parse_size_arg)]
    pub window: u64,
    /// Threads reading one large file
    #[arg(long, value_name = "N", default_value_t = load::DEFAULT_DEPTH, value_parser = at_least_one)]
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
        Mode::Trace { path, depth } => load_by_trace(&path, a.out.format(), depth),
        Mode::Paths(roots) => load_paths(roots, a),
    }
}

/// `load --trace`: loads exactly the pages recorded in the trace at `path`, `depth` reads in
/// flight.
fn load_by_trace(path: &Path, out: Output, depth: usize) -> Result<ExitCode, CliError> {
    let trace = trace_file::load_trace(path)?;
    let shape = (trace.events.is_empty(), trace.files.len());
    let r = load::load_trace(&TraceLoadOptions { trace, depth }, &());
    trace_report::cache_verb("load", path, out, shape, r)
}

/// `pagewise load PATH...`, holding the pages locked with `--lock` (detached with `--daemon`).
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
        depth: a.depth,
    };
    // Checked before forking, so a refusal is this command's own error.
    let pidfile = match &a.pidfile {
        Some(p) => Some(Pidfile::claim(p)?),
        None => None,
    };
    // Fork before the first thread (the walk's, the progress line's) exists.
    let reporter = match a.daemon {
        false => None,
        true => match hold::detach()? {
            Detached::Parent(w) => return Ok(parent_exit(w.wait())),
            Detached::Child(r) => Some(r),
        },
    };
    let progress = Arc::new(Progress::default());
    let shown = a.out.format().is_text() && !a.daemon;
    let bar = ProgressLine::start("load", progress.clone(), shown);
    let mut report = match load::load(&opts, progress.as_ref()) {
        Ok(r) => r,
        Err(e) => {
            bar.finish();
            if let Some(r) = reporter {
                r.failed(ExitCode::Fatal.code(), &e.to_string());
            }
            return Err(e.into());
        }
    };
    bar.finish();
    let locks = std::mem::take(&mut report.locks);
    let code = ExitCode::from_outcome(&report.outcome);
    render_report(&report, &a);
    if !a.lock {
        return Ok(code);
    }
    let hold = Hold {
        hold_for: a.hold_for,
        pidfile,
        reporter,
    };
    hold_locks(locks, &report, code, hold)
}

/// The report: JSON (`--json`, `--json-lines`) on stdout, or the summary and the problems.
fn render_report(report: &LoadReport, a: &LoadArgs) {
    a.out
        .format()
        .report(report, &report.outcome.errors, |r| write_text(r, a));
}

/// `load` for people: the problems, the summary (or the lock's failure), what is unknown.
fn write_text(report: &LoadReport, a: &LoadArgs) {
    let o = &report.outcome;
    render::report_problems("load", &o.errors, o.error_count, &o.notices);
    let t = &report.total;
    let mut out = std::io::stdout().lock();
    // A lock that failed gets no success figure (no rate, no "cached now").
    let lock_failed = a.lock
        && o.errors
            .iter()
            .any(|e| matches!(e.op, Op::Mlock | Op::Mmap));
    let _ = match lock_failed {
        true => write_lock_failed(&mut out, report),
        false => write_summary(&mut out, report, a.walk.range.is_some()),
    };
    drop(out);
    if let Some(why) = t.unknown_reason {
        eprintln!(
            "pagewise load: note: {} of {} files: what was cached before is unknown: {why}",
            t.unknown_files, t.files
        );
    }
}

/// How the locked pages are held: for how long, with which pidfile, detached or not.
struct Hold {
    hold_for: Option<Duration>,
    pidfile: Option<Pidfile>,
    /// `--daemon`: the child's line to the process that started it.
    reporter: Option<Reporter>,
}

/// Holds `locks` until SIGINT/SIGTERM or `--for` ends: writes the pidfile, notifies the
/// service manager, detaches (`--daemon`), waits, then says STOPPING=1 and lets go.
fn hold_locks(
    locks: LockSet,
    report: &LoadReport,
    code: ExitCode,
    mut h: Hold,
) -> Result<ExitCode, CliError> {
    let t = &report.total;
    if locks.is_empty() {
        let Some(r) = h.reporter else { return Ok(code) };
        let why = match report.outcome.errors.first() {
            Some(e) => format!("nothing locked: {e}"),
            None => "nothing locked: no file with data to lock".to_string(),
        };
        let code = match code {
            ExitCode::Success => ExitCode::NothingToDo,
            c => c,
        };
        r.failed(code.code(), &why);
        return Ok(code);
    }
    // Before anything says "ready": a SIGTERM sent as soon as it is read must end the hold,
    // not kill the process.
    pagewise_core::sys::block_interrupts();
    let pid = std::process::id();
    if let Some(p) = h.pidfile.as_mut() {
        if let Err(e) = p.write(pid) {
            if let Some(r) = h.reporter {
                r.failed(ExitCode::Fatal.code(), &e.to_string());
            }
            return Err(e.into());
        }
    }
    let notifier = Notifier::from_env().unwrap_or_else(|why| {
        eprintln!("pagewise load: NOTIFY_SOCKET ignored: {why}");
        None
    });
    let until = match h.hold_for {
        Some(d) => format!("for {:.0} s", d.as_secs_f64()),
        None => "until Ctrl-C / SIGTERM".into(),
    };
    eprintln!(
        "pagewise load: holding {} locked in {} files {until}{}",
        bytes(t.locked_bytes),
        t.locked_files,
        if h.reporter.is_some() {
            format!(" (daemon, PID {pid})")
        } else {
            String::new()
        }
    );
    let mainpid = match h.reporter {
        Some(_) => format!("MAINPID={pid}\n"),
        None => String::new(),
    };
    let status = format!(
        "STATUS=locked {} bytes of {} files",
        t.locked_bytes, t.locked_files
    );
    notify(notifier.as_ref(), &format!("READY=1\n{mainpid}{status}"));
    if let Some(r) = h.reporter.take() {
        if let Err(e) = r.ready(code.code()) {
            // The starter is gone or detaching failed: nobody knows this hold exists.
            eprintln!("pagewise load: --daemon: could not detach: {e}");
            notify(notifier.as_ref(), "STOPPING=1");
            return Ok(ExitCode::Fatal);
        }
    }
    pagewise_core::sys::wait_for_interrupt(h.hold_for);
    notify(notifier.as_ref(), "STOPPING=1");
    drop(locks);
    drop(h.pidfile);
    Ok(code)
}

/// Sends `state` to the service manager, if there is one; a failure is a warning.
fn notify(n: Option<&Notifier>, state: &str) {
    if let Some(n) = n {
        if let Err(e) = n.send(state) {
            eprintln!("pagewise load: sd_notify to {n}: sendto failed: {e}");
        }
    }
}

/// The exit of the process that started `--daemon`: what the daemon reported.
fn parent_exit(said: ChildSaid) -> ExitCode {
    match said {
        ChildSaid::Ready { code, .. } => ExitCode::Status(code),
        ChildSaid::Failed { code, message } => {
            eprintln!("pagewise load: --daemon: {message}");
            ExitCode::Status(code)
        }
        ChildSaid::Died { code, how } => {
            eprintln!("pagewise load: --daemon: the daemon {how} before it had locked anything");
            ExitCode::Status(code)
        }
    }
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

/// The summary of a `--lock` that failed (the errors say why): what is locked of what was
/// asked, and what is in the page cache, without a rate.
fn write_lock_failed(w: &mut dyn Write, report: &LoadReport) -> std::io::Result<()> {
    let t = &report.total;
    writeln!(
        w,
        "{} files, {}: --lock failed: {} of {} locked in {} files ({} in the page cache)",
        t.files,
        bytes(t.bytes),
        bytes(t.locked_bytes),
        bytes(t.bytes),
        t.locked_files,
        bytes(t.cached_bytes_after),
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
