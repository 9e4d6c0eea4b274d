//! `pagewise replay`: re-issue a recorded read set in a chosen order and time it.

use super::args::{at_least_one, parse_size_arg};
use super::exit::{CliError, ExitCode};
use super::output::Output;
use super::render::{self, bytes, path_text};
use super::trace_file::load_trace;
use super::trace_report::{nothing_to_do, nothing_to_do_reason, skipped_note};
use clap::{Args, ValueEnum};
use pagewise_core::replay::{self, CompareOptions, Order, ReplayOptions, ReplayReport};
use std::io::Write;
use std::path::PathBuf;

/// The `pagewise replay --help` epilogue: examples, notes and exit codes.
pub const EXAMPLES: &str = "\
Examples:
  pagewise replay --compare --direct app.trace     all orders, cold, side by side
  pagewise replay --order disk --depth 64 app.trace
  hyperfine --prepare 'pagewise evict --trace app.trace' './app'   selectively cold start

Files recorded without a path (<MAJOR:MINOR inode N>), or deleted since, are skipped and
listed with the reason; pages past a file's end now are left out. Exit codes: 0 success,
1 fatal error (unreadable trace), 2 some reads failed, 3 nothing to replay (the trace has no
pages, or none of its files or pages is there any more).";

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum OrderArg {
    /// As the program read them (the order of the trace)
    Recorded,
    /// File by file, each file's pages in offset order
    File,
    /// By on-disk position (FIEMAP), across files: the fewest seeks
    Disk,
}

impl From<OrderArg> for Order {
    fn from(o: OrderArg) -> Order {
        match o {
            OrderArg::Recorded => Order::Recorded,
            OrderArg::File => Order::File,
            OrderArg::Disk => Order::Disk,
        }
    }
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// A trace written by `pagewise record`
    pub trace: PathBuf,
    /// Order of the reads
    #[arg(long, value_enum, default_value_t = OrderArg::Disk)]
    pub order: OrderArg,
    /// Read with O_DIRECT: exactly the recorded pages, no cache, no readahead
    #[arg(long)]
    pub direct: bool,
    /// Merge ranges at most SIZE apart (reading the gap)
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = parse_size_arg)]
    pub merge_gap: u64,
    /// Requests in flight [default: 1 for recorded/file, 32 for disk]
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub depth: Option<usize>,
    /// Longest single request (merged ranges are split)
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size_arg)]
    pub max_request: u64,
    /// Run every order on a cold cache (evicting the traced pages before each) and compare
    #[arg(long)]
    pub compare: bool,
    /// Runs per order with --compare (median reported)
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    pub runs: usize,
    /// One JSON document on stdout: a list of replay reports (schema: docs/json.md)
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// `pagewise replay`.
pub fn run(a: ReplayArgs) -> Result<ExitCode, CliError> {
    let trace = load_trace(&a.trace)?;
    let (empty_trace, files_total) = (trace.events.is_empty(), trace.files.len());
    let reports = if a.compare {
        let opts = CompareOptions {
            trace,
            direct: a.direct,
            merge_gap: a.merge_gap,
            max_request: a.max_request,
            runs: a.runs,
        };
        replay::compare(&opts, &())
    } else {
        let opts = ReplayOptions {
            trace,
            order: a.order.into(),
            direct: a.direct,
            merge_gap: a.merge_gap,
            depth: a.depth,
            max_request: a.max_request,
        };
        replay::replay(&opts, &()).map(|r| vec![r])
    };
    let reports = reports.map_err(|e| CliError::about(path_text(&a.trace), e))?;
    let mut code = ExitCode::from_errors(reports.iter().map(|r| r.outcome.error_count).sum());
    let nothing = code == ExitCode::Success
        && !reports.is_empty()
        && reports
            .iter()
            .all(|r| r.requests == 0 && !r.outcome.interrupted);
    let files_opened = reports.first().map_or(0, |r| r.files);
    let mut finish = || {
        if nothing {
            let reason = nothing_to_do_reason(empty_trace, files_opened, files_total);
            code = nothing_to_do("replay", &a.trace, &reason);
        }
        code
    };
    Output::of(a.json, false).document(&reports, |reports| {
        if let Some(r) = reports.first() {
            render::report_problems("replay", &r.outcome.errors, r.outcome.error_count, &[]);
            skipped_note("replay", r.files_missing, &r.skipped);
        }
        let _ = write_table(&mut std::io::stdout().lock(), reports);
    });
    Ok(finish())
}

/// Writes one row per replay (one, or one per order with `--compare`), each timed against the
/// first.
fn write_table(w: &mut dyn Write, reports: &[ReplayReport]) -> std::io::Result<()> {
    let base = reports
        .first()
        .map_or(1.0, |r| r.outcome.elapsed_s.max(1e-9));
    let mut rows = vec![[
        "ORDER", "DEPTH", "REQUESTS", "BYTES", "TIME", "MB/s", "SPEED-UP",
    ]
    .map(String::from)
    .to_vec()];
    for r in reports {
        let elapsed = r.outcome.elapsed_s;
        rows.push(vec![
            format!(
                "{}{}",
                r.order.name(),
                if r.direct { " (direct)" } else { "" }
            ),
            r.depth.to_string(),
            r.requests.to_string(),
            bytes(r.bytes),
            format!("{:.3} s", elapsed),
            format!("{:.1}", r.mb_per_s),
            format!("{:.2}x", base / elapsed.max(1e-9)),
        ]);
    }
    w.write_all(render::table(&rows).as_bytes())
}

#[cfg(test)]
mod tests {
    //! The table, rendered from hand-made reports: no kernel involved.
    use super::*;
    use pagewise_core::Outcome;

    fn report(order: Order, depth: usize, elapsed_s: f64) -> ReplayReport {
        ReplayReport {
            order,
            direct: order != Order::Recorded,
            depth,
            requests: 120,
            bytes: 48 << 20,
            mb_per_s: (48 << 20) as f64 / 1e6 / elapsed_s,
            files: 9,
            files_missing: 0,
            skipped: Vec::new(),
            outcome: Outcome {
                elapsed_s,
                ..Outcome::default()
            },
        }
    }

    fn table(reports: &[ReplayReport]) -> String {
        let mut out = Vec::new();
        write_table(&mut out, reports).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn one_replay() {
        assert_eq!(
            table(&[report(Order::Disk, 32, 0.25)]),
            "ORDER          DEPTH  REQUESTS     BYTES     TIME   MB/s  SPEED-UP\n\
             disk (direct)     32       120  48.0 MiB  0.250 s  201.3     1.00x\n"
        );
    }

    #[test]
    fn compare_times_each_order_against_the_first() {
        let reports = [
            report(Order::Recorded, 1, 2.0),
            report(Order::File, 1, 1.0),
            report(Order::Disk, 32, 0.4),
        ];
        assert_eq!(
            table(&reports),
            "ORDER          DEPTH  REQUESTS     BYTES     TIME   MB/s  SPEED-UP\n\
             recorded           1       120  48.0 MiB  2.000 s   25.2     1.00x\n\
             file (direct)      1       120  48.0 MiB  1.000 s   50.3     2.00x\n\
             disk (direct)     32       120  48.0 MiB  0.400 s  125.8     5.00x\n"
        );
    }
}
