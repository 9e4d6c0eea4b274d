//! `pagewise assist`: live prefetching for running processes, or the predictor on a trace.

use super::args::{parse_duration, AssistTuning};
use super::exit::{CliError, ExitCode};
use super::output::Output;
use super::render::{self, bytes, table};
use super::signals::Signals;
use super::trace_file::load_trace;
use clap::Args;
use pagewise_core::assist::sim::{self, SimReport, SimulateOptions};
use pagewise_core::assist::{self, AssistOptions};
use pagewise_core::trace::{FollowOptions, DEFAULT_BUFFER_KB};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The `pagewise assist --help` epilogue: examples, notes and exit codes.
pub const EXAMPLES: &str = "\
Examples:
  pagewise assist -p $(pidof postgres)          assist running processes until they exit
  pagewise run --assist --max-cache none -- fio job.fio
  pagewise record --faults -o fio.trace -- fio job.fio
  pagewise assist --simulate fio.trace          hit rate with and without the range detector

How it works: the target's page faults (tracepoint mm_filemap_fault) feed a predictor with
sequential, stride and range detectors. The range detector (Lustre LU-13669) groups faults
within --range of each other into clusters; on the next miss it prefetches a window of the last
cluster's span (at least --min-window) with fadvise(WILLNEED), starting at the fault when the
last cluster was read upwards (--centred: centred on it, as Lustre does). Hits prefetch nothing.

Assistance ends when every process has exited (a zombie, exited but not yet reaped by its
parent, counts as exited: a note says so).
Exit codes: 0 success, 1 fatal error (no tracing rights, no such process, a zombie, a kernel
thread, bad trace), 2 when files the target faulted on could not be opened to prefetch from
(the summary counts them).";

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "simulate"])))]
pub struct AssistArgs {
    /// Processes to assist: all their threads, the processes they started before (fio's jobs),
    /// and children they start from now on
    #[arg(short = 'p', long = "pid", value_name = "PID", num_args = 1..)]
    pub pid: Vec<u32>,
    /// Replay the faults of a trace (`record --faults`) through the predictor instead
    #[arg(long, value_name = "TRACE")]
    pub simulate: Option<PathBuf>,
    /// With --simulate: time from a fault to its prefetch being ready
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = parse_duration, requires = "simulate")]
    pub latency: Duration,
    /// Stop after DURATION even if the processes still run
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration, conflicts_with = "simulate")]
    pub for_: Option<Duration>,
    /// Ring buffer per CPU in KiB
    #[arg(long, value_name = "KIB", default_value_t = DEFAULT_BUFFER_KB)]
    pub buffer_kb: u64,
    #[command(flatten)]
    pub tuning: AssistTuning,
    /// One JSON document on stdout: the assist or simulation report (schema: docs/json.md)
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// `pagewise assist`.
pub fn run(a: AssistArgs) -> Result<ExitCode, CliError> {
    if let Some(path) = &a.simulate {
        return simulate(path, &a);
    }
    let opts = AssistOptions {
        prefetch: a.tuning.options(),
        follow: FollowOptions {
            buffer_kb: a.buffer_kb,
            ..FollowOptions::default()
        },
        pids: a.pid,
        duration: a.for_,
    };
    let r = assist::assist(&opts, &Signals).map_err(|e| CliError::about("assist", e))?;
    Output::of(a.json, false).document(&r, |r| {
        for n in &r.outcome.notices {
            eprintln!("pagewise assist: note: {n}");
        }
        let _ = render::write_assist_summary(&mut std::io::stderr().lock(), r);
    });
    // A promise not kept: faults on files that could not be reached were not assisted.
    if r.files_unreachable > 0 {
        return Ok(ExitCode::Status(2));
    }
    Ok(ExitCode::Success)
}

/// `assist --simulate TRACE`: the predictor's variants on the trace's faults, side by side.
fn simulate(path: &Path, a: &AssistArgs) -> Result<ExitCode, CliError> {
    let trace = load_trace(path)?;
    let opts = SimulateOptions {
        config: a.tuning.config(trace.page_size as u64),
        trace,
        latency_ns: a.latency.as_nanos() as u64,
    };
    let rows = sim::compare(&opts).map_err(|e| CliError::about(path.display().to_string(), e))?;
    let view = SimView {
        trace: path,
        latency: a.latency,
    };
    Output::of(a.json, false).document(&rows, |rows| {
        let _ = write_simulation(&mut std::io::stdout().lock(), rows, &view);
    });
    Ok(ExitCode::Success)
}

/// What the simulation table says besides the reports.
struct SimView<'a> {
    /// The trace simulated.
    trace: &'a Path,
    /// `--latency`.
    latency: Duration,
}

/// Writes one row per predictor variant, then a line saying what was replayed.
fn write_simulation(w: &mut dyn Write, rows: &[SimReport], view: &SimView) -> std::io::Result<()> {
    let mut tab = vec![vec![
        "predictor".to_string(),
        "faults".into(),
        "hit rate".into(),
        "late hits".into(),
        "misses".into(),
        "prefetches".into(),
        "prefetched".into(),
        "wasted".into(),
    ]];
    for r in rows {
        tab.push(vec![
            r.label.clone(),
            r.accesses.to_string(),
            format!("{:.1}%", r.hit_rate * 100.0),
            r.late_hits.to_string(),
            r.misses.to_string(),
            r.windows.to_string(),
            bytes(r.prefetched_bytes),
            bytes(r.wasted_bytes),
        ]);
    }
    w.write_all(table(&tab).as_bytes())?;
    writeln!(
        w,
        "(faults of {} replayed against a simulated cache; prefetches ready {:?} after the fault)",
        view.trace.display(),
        view.latency
    )
}

#[cfg(test)]
mod tests {
    //! The simulation table, rendered from hand-made reports: no kernel involved.
    use super::*;

    fn row(label: &str, hit_rate: f64, windows: u64) -> SimReport {
        SimReport {
            label: label.into(),
            accesses: 1000,
            hits: (hit_rate * 900.0) as u64,
            late_hits: (hit_rate * 100.0) as u64,
            misses: 1000 - (hit_rate * 1000.0) as u64,
            hit_rate,
            windows,
            prefetched_bytes: windows * (256 << 10),
            wasted_bytes: windows * (16 << 10),
            ..SimReport::default()
        }
    }

    #[test]
    fn simulation_table_and_its_footnote() {
        let rows = [
            row("no prefetching", 0.0, 0),
            row("sequential + stride", 0.4215, 120),
            row("sequential + stride + range (forward)", 0.9, 310),
        ];
        let view = SimView {
            trace: Path::new("fio.trace"),
            latency: Duration::from_micros(250),
        };
        let mut out = Vec::new();
        write_simulation(&mut out, &rows, &view).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "predictor                              faults  hit rate  late hits  misses  prefetches  prefetched   wasted\n\
             no prefetching                           1000      0.0%          0    1000           0         0 B      0 B\n\
             sequential + stride                      1000     42.1%         42     579         120    30.0 MiB  1.9 MiB\n\
             sequential + stride + range (forward)    1000     90.0%         90     100         310    77.5 MiB  4.8 MiB\n\
             (faults of fio.trace replayed against a simulated cache; prefetches ready 250µs \
             after the fault)\n"
        );
    }
}
