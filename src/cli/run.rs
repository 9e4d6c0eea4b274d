//! `pagewise run`: run a command and drop again the pages it brings into the page cache.

use super::args::{parse_limit_arg, AssistTuning, BackendArg, MethodArg};
use super::exit::{command_error, outcome_in_flag_names, CliError, ExitCode};
use super::out_file::OutFile;
use super::render::{self, bytes};
use super::signals::Signals;
use clap::Args;
use pagewise_core::run::{DroppingOptions, RunOptions, RunReport};
use pagewise_core::trace::{FollowOptions, DEFAULT_BUFFER_KB};
use std::io::Write;
use std::path::PathBuf;

/// The `pagewise run --help` epilogue: examples, notes and exit codes.
pub const EXAMPLES: &str = "\
Examples:
  pagewise run -- tar cf /backup/home.tar /home        the backup leaves the cache as it was
  pagewise run --max-cache 16M -- grep -r needle /data
  pagewise run --keep-written --report run.json -- rsync -a /src /dst

The command's stdin/stdout/stderr are untouched; pagewise's report goes to stderr (or
--report FILE as JSON, created before the command starts). SIGINT, SIGTERM, SIGHUP and SIGQUIT
sent to pagewise are forwarded to the command as they are, and its pages are dropped before
pagewise exits. Exit code: the command's own (128+N when killed by signal N: 130 for Ctrl-C);
127 command not found, 126 not executable; 1 when tracing is impossible (needs root or
CAP_SYS_ADMIN with tracefs); 2 when the command succeeded but pages it brought in could not be
reached to drop (files that could not be opened again: the report says which and why).";

/// `--max-cache`'s default as clap shows it: `run::DEFAULT_MAX_CACHE` (checked by a test).
const DEFAULT_MAX_CACHE_ARG: &str = "64M";

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Drop the command's pages whenever more than SIZE of them are cached ('none': only when
    /// the command exits)
    // `std::option::Option`: clap takes the type as it is (`none` parses to None).
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_MAX_CACHE_ARG, value_parser = parse_limit_arg)]
    pub max_cache: std::option::Option<u64>,
    /// Prefetch for the command like `pagewise assist` (the prefetched pages are dropped too)
    #[arg(long)]
    pub assist: bool,
    #[command(flatten)]
    pub tuning: AssistTuning,
    /// Leave the pages of files the command wrote alone
    #[arg(long)]
    pub keep_written: bool,
    /// Write the report as JSON to FILE instead of a line on stderr
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Ring buffer per CPU in KiB
    #[arg(long, value_name = "KIB", default_value_t = DEFAULT_BUFFER_KB)]
    pub buffer_kb: u64,
    /// How the command's page-cache events are followed (as for `record`)
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Do not watch the command's closes to learn its files (no seccomp filter): its files are
    /// then opened again by handle only (ext2/3/4, squashfs; needs CAP_DAC_READ_SEARCH)
    #[arg(long)]
    pub no_witness: bool,
    /// How the command's pages are measured before and after each drop: cachestat, or
    /// mmap+mincore (auto: cachestat when the kernel has it, Linux >= 6.5)
    #[arg(long, value_enum, default_value_t = MethodArg::Auto)]
    pub method: MethodArg,
    /// The command and its arguments ('--' before it is optional; needed when the command's
    /// own options could be taken for pagewise's)
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

/// `pagewise run`.
pub fn run(a: RunArgs) -> Result<ExitCode, CliError> {
    let opts = RunOptions {
        command: a.command,
        dropping: DroppingOptions {
            max_cache: a.max_cache,
            keep_written: a.keep_written,
            follow: FollowOptions {
                buffer_kb: a.buffer_kb,
                backend: a.backend.into(),
                witness: !a.no_witness,
            },
            method: a.method.into(),
        },
        assist: a.assist.then(|| a.tuning.options()),
    };
    // The report file first: a bad path is found before the command runs.
    let report_out = a.report.as_deref().map(OutFile::open).transpose()?;
    let mut r = match pagewise_core::run::run(&opts, &Signals) {
        Ok(r) => r,
        Err(e) => return Ok(command_error("run", e)),
    };
    outcome_in_flag_names(&mut r.outcome);
    if let Some(out) = report_out {
        out.write(|w| {
            serde_json::to_writer_pretty(&mut *w, &r)
                .map_err(std::io::Error::other)
                .and_then(|_| writeln!(w))
        })?;
    }
    let o = &r.outcome;
    for n in &o.notices {
        eprintln!("pagewise run: note: {n}");
    }
    if a.report.is_none() {
        render::report_problems("run", &o.errors, o.error_count, &[]);
        let _ = write_summary(&mut std::io::stderr().lock(), &r);
    }
    // A promise not kept: pages of the command's that could not be dropped nor measured.
    if r.exit_code == 0 && r.figures.unreachable_bytes > 0 {
        return Ok(ExitCode::Status(2));
    }
    Ok(ExitCode::Status(r.exit_code))
}

/// Writes the summary line (what the command brought in, what was dropped and what stayed),
/// then `--assist`'s line when it ran.
fn write_summary(w: &mut dyn Write, r: &RunReport) -> std::io::Result<()> {
    let d = &r.figures;
    let lost = render::lost_events_warning(d.lost_events);
    let kept = if d.kept_written_bytes > 0 {
        format!(", {} of written files kept", bytes(d.kept_written_bytes))
    } else {
        String::new()
    };
    // Without cachestat (mincore) dirty pages cannot be told from the others.
    let why_left = match (d.left_dirty_bytes, d.left_mapped_or_busy_bytes) {
        (Some(d), Some(m)) => format!("{} dirty, {} mapped or busy", bytes(d), bytes(m)),
        _ => format!(
            "dirty unknown, mapped or busy unknown: {}",
            d.unknown_reason.unwrap_or("not measured")
        ),
    };
    writeln!(
        w,
        "pagewise run: the command brought {} into the page cache{}; dropped {}, {} left ({why_left}){kept}{lost}; {} files, {:.2} s",
        bytes(r.added_bytes),
        r.prefetched_bytes.map_or_else(String::new, |p| format!(" and --assist prefetched {}", bytes(p))),
        bytes(d.dropped_bytes),
        bytes(d.left_bytes),
        d.files,
        r.outcome.elapsed_s
    )?;
    if d.unreachable_bytes > 0 {
        writeln!(
            w,
            "pagewise run: {} the command brought in, in {} file(s), could not be reached to drop or measure (e.g. {})",
            bytes(d.unreachable_bytes),
            d.files_unreachable,
            d.unreachable_reason.as_deref().unwrap_or("unknown")
        )?;
    }
    if d.metadata_bytes > 0 {
        writeln!(
            w,
            "pagewise run: also {} of file-system metadata (the block device's or btrfs's own pages: no advice reaches them)",
            bytes(d.metadata_bytes)
        )?;
    }
    if let Some(ar) = &r.assist {
        render::write_assist_summary(w, ar)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The summary, rendered from hand-made reports: no kernel involved.
    use super::*;
    use pagewise_core::assist::AssistReport;
    use pagewise_core::run::DropFigures;
    use pagewise_core::Outcome;

    fn report() -> RunReport {
        RunReport {
            exit_code: 0,
            added_bytes: 96 << 20,
            figures: DropFigures {
                dropped_bytes: 95 << 20,
                left_bytes: 1 << 20,
                left_dirty_bytes: Some(768 << 10),
                left_mapped_or_busy_bytes: Some(256 << 10),
                files: 12,
                ..DropFigures::default()
            },
            outcome: Outcome {
                elapsed_s: 3.456,
                ..Outcome::default()
            },
            ..RunReport::default()
        }
    }

    #[test]
    fn the_max_cache_default_is_the_library_s() {
        assert_eq!(
            super::super::args::parse_limit_arg(DEFAULT_MAX_CACHE_ARG),
            Ok(Some(pagewise_core::run::DEFAULT_MAX_CACHE))
        );
    }

    fn summary(r: &RunReport) -> String {
        let mut out = Vec::new();
        write_summary(&mut out, r).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn plain_summary() {
        assert_eq!(
            summary(&report()),
            "pagewise run: the command brought 96.0 MiB into the page cache; dropped 95.0 MiB, \
             1.0 MiB left (768 KiB dirty, 256 KiB mapped or busy); 12 files, 3.46 s\n"
        );
    }

    #[test]
    fn unknown_dirty_split_is_said_to_be_unknown() {
        let base = report();
        let r = RunReport {
            figures: DropFigures {
                left_dirty_bytes: None,
                left_mapped_or_busy_bytes: None,
                unknown_reason: Some("why"),
                ..base.figures.clone()
            },
            ..base
        };
        assert_eq!(
            summary(&r),
            "pagewise run: the command brought 96.0 MiB into the page cache; dropped 95.0 MiB, \
             1.0 MiB left (dirty unknown, mapped or busy unknown: why); 12 files, 3.46 s\n"
        );
    }

    #[test]
    fn kept_written_lost_events_and_assist() {
        let base = report();
        let r = RunReport {
            prefetched_bytes: Some(8 << 20),
            figures: DropFigures {
                kept_written_bytes: 4 << 20,
                lost_events: 3,
                ..base.figures.clone()
            },
            assist: Some(AssistReport {
                faults: 100,
                misses: 40,
                faults_on_prefetched: 25,
                prefetches: 9,
                prefetches_range: 5,
                prefetches_sequential: 3,
                prefetches_stride: 1,
                prefetched_bytes: 8 << 20,
                wasted_bytes_estimate: 1 << 20,
                issue_latency_us_p50: 12.5,
                issue_latency_us_p90: 40.0,
                issue_latency_us_p99: 95.25,
                files: 4,
                files_unreachable: 1,
                lost_events: 3,
                outcome: Outcome::default(),
                ..AssistReport::default()
            }),
            ..base
        };
        assert_eq!(
            summary(&r),
            "pagewise run: the command brought 96.0 MiB into the page cache and --assist \
             prefetched 8.0 MiB; dropped 95.0 MiB, 1.0 MiB left (768 KiB dirty, 256 KiB mapped or \
             busy), 4.0 MiB of written files kept; WARNING: 3 events lost (raise --buffer-kb); \
             12 files, 3.46 s\n\
             pagewise assist: 100 faults (40 misses, 25 on prefetched pages); 9 prefetches (5 \
             range, 3 sequential, 1 stride) of 8.0 MiB, ~1.0 MiB wasted; fault-to-prefetch \
             latency p50 12.5 us, p90 40 us, p99 95.25 us (reads queued by p50 0 us, p99 0 us); 4 \
             files (1 unreachable); WARNING: 3 \
             events lost (raise --buffer-kb)\n"
        );
    }
}
