//! `pagewise evict`: render the library's EvictReport.

use super::args::{OutputArgs, WalkArgs};
use super::progress::ProgressLine;
use super::render::{self, bytes, partial_bytes};
use clap::Args;
use pagewise_core::evict::{self, EvictFile, EvictOptions, StayReason};
use pagewise_core::Progress;
use std::path::PathBuf;
use std::sync::Arc;

pub const EXAMPLES: &str = "\
Examples:
  pagewise evict /data/db             drop a tree, dirty pages included
  pagewise evict --range 0-1G big.img drop only the first GiB
  pagewise evict --owned --why ~/cache
  pagewise evict --dry-run /srv       what would go

Exit codes: 0 success, 1 fatal error, 2 some files failed.";

#[derive(Args, Debug)]
pub struct EvictArgs {
    #[command(flatten)]
    pub walk: WalkArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Do not write dirty pages back first (they will stay cached)
    #[arg(long)]
    pub no_sync: bool,
    /// Only files owned by you; others are counted and left alone
    #[arg(long)]
    pub owned: bool,
    /// Measure what would be dropped; change nothing
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Name the processes whose mappings keep pages in (reads /proc/*/maps)
    #[arg(long)]
    pub why: bool,
    /// List every file evicted, not only those with pages left
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Evict exactly the pages recorded in TRACE (a selectively cold cache)
    #[arg(long, value_name = "TRACE", conflicts_with_all = ["paths", "from"])]
    pub trace: Option<PathBuf>,
}

pub fn run(a: EvictArgs) -> Result<i32, String> {
    if let Some(t) = &a.trace {
        return super::trace_io::evict_by_trace(t, a.out.json, a.dry_run);
    }
    let roots = a.walk.roots()?;
    let opts = EvictOptions {
        walk: a
            .walk
            .walk_options(pagewise_core::walk::default_threads() * 2),
        range: a.walk.range(),
        method: a.walk.method(),
        sync: !a.no_sync,
        owned: a.owned,
        dry_run: a.dry_run,
        why: a.why,
    };
    let progress = Arc::new(Progress::default());
    let bar = ProgressLine::start("evict", progress.clone(), !a.out.json && !a.out.json_lines);
    let stream = a.out.json_lines;
    let verbose = a.verbose;
    let report = evict::evict(&roots, &opts, &progress, |f: &EvictFile| {
        if stream {
            render::print_json_line("file", f);
        } else if verbose {
            println!(
                "{}: {} dropped, {} stayed",
                render::path_text(&f.path),
                render::opt_bytes(f.dropped_bytes),
                render::opt_bytes(f.stayed_bytes)
            );
        }
    })
    .map_err(|e| e.to_string())?;
    bar.finish();
    let code = render::exit_code(report.error_count);
    if stream {
        render::print_stream_end(&report.errors, &report);
        return Ok(code);
    }
    if a.out.json {
        render::print_json(&report);
        return Ok(code);
    }
    render::report_problems("evict", &report.errors, report.error_count, &report.notices);
    let t = &report.total;
    let verb = if report.dry_run {
        "would drop"
    } else {
        "dropped"
    };
    let b = |v: u64| partial_bytes(v, t.files, t.unknown_files);
    println!(
        "{} files, {}: {verb} {} of {} cached{}{}",
        t.files,
        bytes(t.bytes),
        b(t.dropped_bytes),
        b(t.cached_bytes_before),
        if report.dry_run {
            String::new()
        } else {
            format!("; {} still cached", b(t.stayed_bytes))
        },
        if t.dirty_bytes_written > 0 {
            format!(
                " ({} of dirty pages written back first)",
                bytes(t.dirty_bytes_written)
            )
        } else {
            String::new()
        }
    );
    if let Some(why) = t.unknown_reason {
        eprintln!(
            "pagewise evict: note: {} of {} files were {} without a measure ('unknown', totals \
             marked >= leave them out): {why}",
            t.unknown_files,
            t.files,
            if report.dry_run {
                "left alone"
            } else {
                "advised out"
            }
        );
    }
    if t.not_owned_skipped > 0 {
        println!(
            "{} files not owned by you were left alone (--owned)",
            t.not_owned_skipped
        );
    }
    if !report.residue.is_empty() {
        let mut rows = vec![vec![
            "STILL CACHED".to_string(),
            "SIZE".into(),
            "LEFT".into(),
            "WHY".into(),
        ]];
        for f in &report.residue {
            rows.push(vec![
                render::path_text(&f.path),
                bytes(f.size),
                render::opt_bytes(f.stayed_bytes),
                reason_text(f),
            ]);
        }
        print!("{}", render::table(&rows));
    }
    Ok(code)
}

fn reason_text(f: &EvictFile) -> String {
    let pids = if f.pids.is_empty() {
        String::new()
    } else {
        format!(
            " by pid {}",
            f.pids
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    match f.reason {
        Some(StayReason::Dirty) => "dirty (not written back)".into(),
        Some(StayReason::Writeback) => "under writeback".into(),
        Some(StayReason::Mapped) => format!("mapped{pids}"),
        Some(StayReason::Locked) => format!("mlocked{pids}"),
        Some(StayReason::PartialFolio) => "large folio crosses the range edge".into(),
        Some(StayReason::NoBackingStore) => {
            "tmpfs/shmem: no backing file to drop the pages to (delete the file to free them)"
                .into()
        }
        Some(StayReason::InUse) => "in use (mapped or locked; --why names the process)".into(),
        None => String::new(),
    }
}
