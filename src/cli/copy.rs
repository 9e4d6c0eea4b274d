//! `pagewise copy`: render the library's CopyReport.

use super::args::parse_size_arg;
use super::progress::ProgressLine;
use super::render::{self, bytes};
use clap::{Args, ValueEnum};
use pagewise_core::copy::{self, CopyOptions, CopyReport, Strategy};
use pagewise_core::{sys, Error, Progress, Watch};
use std::path::PathBuf;
use std::sync::Arc;

pub const EXAMPLES: &str = "\
Examples:
  pagewise copy big.img /backup/                  one file into a directory
  pagewise copy -p /srv/data /mnt/new/data        a tree, keeping mode/owner/times/xattrs
  pagewise copy --verify --fsync db/ /backup/db   durable, and re-read from disk to compare
  pagewise copy --cache drop-behind a b           force a strategy

Strategies (--cache): auto picks dontcache (RWF_DONTCACHE) where the filesystem has it, else
direct (O_DIRECT, many I/Os in flight) for files of 1 MiB and more, else drop-behind;
buffered leaves both files cached, like cp.

Exit codes: 0 success, 1 fatal error, 2 some files failed, 130 interrupted (no partial file is
left under a final name).";

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum CacheArg {
    Auto,
    Dontcache,
    Direct,
    DropBehind,
    Buffered,
}

#[derive(Args, Debug)]
pub struct CopyArgs {
    /// Sources, then the destination (a directory when there are several sources)
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<PathBuf>,
    /// How the page cache is kept clean
    #[arg(long, value_enum, default_value_t = CacheArg::Auto)]
    pub cache: CacheArg,
    /// Keep mode, owner (when root), timestamps and extended attributes
    #[arg(short = 'p', long)]
    pub preserve: bool,
    /// Do not fallocate destinations before writing
    #[arg(long)]
    pub no_preallocate: bool,
    /// Write each file under a hidden temporary name, renamed into place when complete
    /// (default: an unnamed O_TMPFILE file, linked into place, where the filesystem has it)
    #[arg(long)]
    pub named_temp: bool,
    /// fsync each file before it is linked (or renamed) into place, and the directories at the end
    #[arg(long)]
    pub fsync: bool,
    /// Re-read every copied file from disk (not cache) and compare checksums with the source
    #[arg(long)]
    pub verify: bool,
    /// Files copied in parallel
    #[arg(short = 'j', long, value_name = "N", default_value_t = 16)]
    pub threads: usize,
    /// I/Os in flight within one large file
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub depth: usize,
    /// Bytes per I/O
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = parse_size_arg)]
    pub chunk: u64,
    /// Say which strategy each kind of file used
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// One JSON document on stdout (schema: docs/json.md)
    #[arg(short = 'J', long)]
    pub json: bool,
}

pub fn run(a: CopyArgs) -> Result<i32, String> {
    let (dest, sources) = a
        .paths
        .split_last()
        .ok_or("need a source and a destination")?;
    let opts = CopyOptions {
        sources: sources.to_vec(),
        dest: dest.clone(),
        strategy: match a.cache {
            CacheArg::Auto => Strategy::Auto,
            CacheArg::Dontcache => Strategy::Dontcache,
            CacheArg::Direct => Strategy::Direct,
            CacheArg::DropBehind => Strategy::DropBehind,
            CacheArg::Buffered => Strategy::Buffered,
        },
        preserve: a.preserve,
        preallocate: !a.no_preallocate,
        named_temp: a.named_temp,
        fsync: a.fsync,
        verify: a.verify,
        threads: a.threads.max(1),
        depth: a.depth.max(1),
        chunk: usize::try_from(a.chunk).unwrap_or(usize::MAX),
        ..Default::default()
    };
    opts.validate().map_err(|e| match e {
        // The library names the option, the CLI its flag: "--chunk must be a multiple of 4 KiB".
        Error::Invalid {
            what: what @ ("chunk" | "threads" | "depth"),
            message,
        } => format!("--{what} {message}"),
        e => e.to_string(),
    })?;
    let progress = Arc::new(Progress::default());
    let bar = ProgressLine::start("copy", progress.clone(), !a.json);
    // SIGINT/SIGTERM set this flag instead of killing pagewise: the copy stops between chunks
    // and removes what it had not finished.
    let observer: Watch = Watch {
        progress: Some(&progress),
        on_file: None,
        cancel: Some(sys::interrupt_flag()),
    };
    let report = copy::copy(&opts, &observer).map_err(|e| e.to_string())?;
    bar.finish();
    let code = if report.outcome.interrupted {
        // 128 + the signal that stopped it: 130 for SIGINT, 143 for SIGTERM.
        sys::last_signal().map_or(super::exit::INTERRUPTED, |s| 128 + s)
    } else {
        render::exit_code(report.outcome.error_count)
    };
    if a.json {
        render::print_json(&report);
        return Ok(code);
    }
    print_summary(&report, a.verbose, a.verify);
    Ok(code)
}

/// The problems, then one summary line, on stderr.
fn print_summary(report: &CopyReport, verbose: bool, verify: bool) {
    let o = &report.outcome;
    render::report_problems("copy", &o.errors, o.error_count, &o.notices);
    let r = &report.residue;
    let strategies = report
        .strategies
        .iter()
        .map(|(k, v)| {
            if verbose {
                format!("{}: {v} files", k.name())
            } else {
                k.name().to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let pct = |x: u64, of: u64| {
        if of == 0 {
            0.0
        } else {
            x as f64 * 100.0 / of as f64
        }
    };
    eprintln!(
        "copied {} files ({}), {} dirs, {} symlinks, {} hard links in {:.2} s, {}/s via {}; cache left: source +{} ({:.1}%), destination {} ({:.1}%){}",
        report.files,
        bytes(report.bytes),
        report.dirs,
        report.symlinks,
        report.hardlinks,
        o.elapsed_s,
        bytes(report.rate_bytes_per_s as u64),
        if strategies.is_empty() { "-".into() } else { strategies },
        render::partial_bytes(r.source_added_bytes, report.files, r.source_unknown_files),
        pct(r.source_added_bytes, r.source_bytes),
        bytes(r.dest_cached_bytes),
        pct(r.dest_cached_bytes, r.dest_bytes),
        if verify {
            format!("; verified {} files from disk, {} mismatches", report.verified_files, report.verify_mismatches)
        } else {
            String::new()
        }
    );
}
