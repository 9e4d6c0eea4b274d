//! `pagewise evict`: files and trees, `--trace` or `--cgroup` (one `Mode`, picked once), and
//! the renderers of their reports.

use super::args::{OutputArgs, WalkArgs};
use super::exit::{outcome_in_flag_names, CliError, ExitCode};
use super::output::Output;
use super::progress::ProgressLine;
use super::render::{self, bytes, partial_bytes};
use super::{trace_file, trace_report};
use clap::Args;
use pagewise_core::cgroup::Hierarchy;
use pagewise_core::evict::{
    self, CgroupEvictOptions, CgroupEvictReport, EvictFile, EvictOptions, EvictReport, StayReason,
    TraceEvictOptions,
};
use pagewise_core::{FileResult, Progress, Watch};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The `pagewise evict --help` epilogue: examples, notes and exit codes.
pub const EXAMPLES: &str = "\
Examples:
  pagewise evict /data/db             drop a tree, dirty pages included
  pagewise evict --range 0-1G big.img drop only the first GiB
  pagewise evict --owned --why ~/cache
  pagewise evict --dry-run /srv       what would go
  pagewise evict --cgroup /system.slice/db.service     reclaim a cgroup's file cache
  pagewise evict --cgroup /sys/fs/cgroup/app --bytes 1G   (cgroup v2: reclaim 1 GiB of it)

Exit codes: 0 success, 1 fatal error, 2 some files failed, 3 nothing to do (--trace: the trace
has no pages, or none of its files or pages is there any more).";

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
    /// Reclaim the file cache of a cgroup (a cgroup directory or a path like /system.slice/x):
    /// v2 memory.reclaim with swappiness=0 (Linux 5.19+), v1 memory.force_empty; memory.stat
    /// before and after
    #[arg(long, value_name = "CGROUP", conflicts_with_all = ["paths", "from", "trace"])]
    pub cgroup: Option<PathBuf>,
    /// With --cgroup: reclaim at most SIZE (cgroup v2 only) [default: all its file cache]
    #[arg(long, value_name = "SIZE", requires = "cgroup", value_parser = super::args::parse_size_arg)]
    pub bytes: Option<u64>,
}

/// What `evict` drops, picked from the flags once (clap keeps them apart).
enum Mode {
    /// `--trace TRACE`: exactly the pages it recorded.
    Trace(PathBuf),
    /// `--cgroup CGROUP`: the group's file cache.
    Cgroup(PathBuf),
    /// Files and trees (`PATH...`, `--from`), each whole or its `--range`.
    Paths(Vec<PathBuf>),
}

impl Mode {
    fn of(a: &EvictArgs) -> Result<Mode, CliError> {
        Ok(match (&a.trace, &a.cgroup) {
            (Some(t), _) => Mode::Trace(t.clone()),
            (None, Some(c)) => Mode::Cgroup(c.clone()),
            (None, None) => Mode::Paths(a.walk.roots()?),
        })
    }
}

/// `pagewise evict`.
pub fn run(a: EvictArgs) -> Result<ExitCode, CliError> {
    match Mode::of(&a)? {
        Mode::Trace(t) => evict_by_trace(&t, a.out.format(), a.dry_run),
        Mode::Cgroup(c) => evict_cgroup(&c, &a),
        Mode::Paths(roots) => evict_paths(roots, &a),
    }
}

/// `evict --trace`: drops exactly the pages recorded in the trace at `path`.
fn evict_by_trace(path: &Path, out: Output, dry_run: bool) -> Result<ExitCode, CliError> {
    let trace = trace_file::load_trace(path)?;
    let shape = (trace.events.is_empty(), trace.files.len());
    let r = evict::evict_trace(&TraceEvictOptions { trace, dry_run }, &());
    trace_report::cache_verb("evict", path, out, shape, r)
}

/// `pagewise evict PATH...`.
fn evict_paths(roots: Vec<PathBuf>, a: &EvictArgs) -> Result<ExitCode, CliError> {
    let out = a.out.format();
    let opts = EvictOptions {
        roots,
        walk: a.walk.walk_options(evict::default_threads()),
        range: a.walk.range(),
        method: a.walk.method(),
        sync: !a.no_sync,
        owned: a.owned,
        dry_run: a.dry_run,
        why: a.why,
        files: out.streams() || a.verbose,
    };
    let progress = Arc::new(Progress::default());
    let bar = ProgressLine::start("evict", progress.clone(), out.is_text());
    let verbose = a.verbose;
    let on_file = |r: FileResult| {
        let FileResult::Evict(f) = r else { return };
        out.item("file", &f, |f| {
            if verbose {
                println!(
                    "{}: {} dropped, {} stayed",
                    render::path_text(&f.path),
                    render::opt_bytes(f.dropped_bytes),
                    render::opt_bytes(f.stayed_bytes)
                );
            }
        });
    };
    let observer = Watch {
        progress: Some(&progress),
        on_file: Some(on_file),
        cancel: None,
    };
    let mut report = evict::evict(&opts, &observer)?;
    outcome_in_flag_names(&mut report.outcome);
    bar.finish();
    let code = ExitCode::from_outcome(&report.outcome);
    out.report(&report, &report.outcome.errors, write_text);
    Ok(code)
}

/// `evict PATH...` for people: the problems, the summary, what could not be measured.
fn write_text(report: &EvictReport) {
    let o = &report.outcome;
    render::report_problems("evict", &o.errors, o.error_count, &o.notices);
    let t = &report.total;
    let _ = write_summary(&mut std::io::stdout().lock(), report);
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
}

/// `pagewise evict --cgroup`.
fn evict_cgroup(cgroup: &Path, a: &EvictArgs) -> Result<ExitCode, CliError> {
    let opts = CgroupEvictOptions {
        cgroup: cgroup.to_path_buf(),
        bytes: a.bytes,
        sync: !a.no_sync,
        dry_run: a.dry_run,
    };
    let report = evict::evict_cgroup(&opts, &())?;
    let o = &report.outcome;
    let code = ExitCode::from_outcome(o);
    a.out.format().document(&report, |r| {
        render::report_problems("evict", &o.errors, o.error_count, &o.notices);
        let _ = write_cgroup_summary(&mut std::io::stdout().lock(), r);
    });
    Ok(code)
}

/// Before and after from the group's memory.stat.
fn write_cgroup_summary(w: &mut dyn Write, r: &CgroupEvictReport) -> std::io::Result<()> {
    let verb = if r.dry_run {
        "would reclaim"
    } else {
        "dropped"
    };
    writeln!(
        w,
        "cgroup {} ({}): {verb} {} of {} file cache; {} left",
        render::escape_bytes(r.cgroup.as_bytes()),
        match r.hierarchy {
            Hierarchy::V1 => "v1, memory.force_empty",
            Hierarchy::V2 => "v2, memory.reclaim",
        },
        bytes(r.dropped_bytes),
        bytes(r.before.file_bytes),
        bytes(r.after.file_bytes),
    )?;
    let rows = vec![
        render::file_cache_header("", &[]),
        render::file_cache_row("before".into(), &r.before),
        render::file_cache_row("after".into(), &r.after),
    ];
    w.write_all(render::table(&rows).as_bytes())
}

/// Writes what was dropped, what stayed and why: the summary line, the files `--owned` left
/// alone, and a table of the files where pages stayed.
fn write_summary(w: &mut dyn Write, report: &EvictReport) -> std::io::Result<()> {
    let t = &report.total;
    let verb = if report.dry_run {
        "would drop"
    } else {
        "dropped"
    };
    let b = |v: u64| partial_bytes(v, t.files, t.unknown_files);
    writeln!(
        w,
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
        match t.dirty_bytes_written {
            Some(0) => String::new(),
            Some(w) => format!(" ({} of dirty pages written back first)", bytes(w)),
            None => " (dirty pages written back first: how many unknown without cachestat)".into(),
        }
    )?;
    if t.not_owned_skipped > 0 {
        writeln!(
            w,
            "{} files not owned by you were left alone (--owned)",
            t.not_owned_skipped
        )?;
    }
    if report.residue.is_empty() {
        return Ok(());
    }
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
    w.write_all(render::table(&rows).as_bytes())
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
        Some(StayReason::Mounted) => {
            "a filesystem is mounted on this device and holds its metadata (unmount to free them)"
                .into()
        }
        Some(StayReason::InUse) => "in use (mapped or locked; --why names the process)".into(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    //! The summary, rendered from hand-made reports: no kernel involved.
    use super::*;
    use pagewise_core::evict::EvictTotals;
    use pagewise_core::residency::Residency;
    use pagewise_core::walk::WalkSummary;
    use pagewise_core::Outcome;

    fn report(dry_run: bool, residue: Vec<EvictFile>) -> EvictReport {
        EvictReport {
            dry_run,
            page_size: 4096,
            total: EvictTotals {
                files: 3,
                bytes: 3 << 20,
                cached_bytes_before: 3 << 20,
                cached_bytes_after: 1 << 20,
                dropped_bytes: 2 << 20,
                stayed_bytes: 1 << 20,
                dirty_bytes_written: Some(4096),
                files_with_residue: 1,
                not_owned_skipped: 2,
                ..EvictTotals::default()
            },
            residue,
            walk: WalkSummary::default(),
            outcome: Outcome::default(),
        }
    }

    fn render(r: &EvictReport) -> String {
        let mut out = Vec::new();
        write_summary(&mut out, r).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn summary_residue_and_reasons() {
        let stayed = EvictFile {
            path: "/srv/db".into(),
            size: 1 << 20,
            before: Residency::default(),
            after: Residency::default(),
            dropped_bytes: Some(0),
            stayed_bytes: Some(1 << 20),
            reason: Some(StayReason::Mapped),
            pids: vec![12, 34],
            dev_ino: pagewise_core::sys::FileId::default(),
        };
        assert_eq!(
            render(&report(false, vec![stayed])),
            "3 files, 3.0 MiB: dropped 2.0 MiB of 3.0 MiB cached; 1.0 MiB still cached \
             (4.0 KiB of dirty pages written back first)\n\
             2 files not owned by you were left alone (--owned)\n\
             STILL CACHED     SIZE     LEFT                  WHY\n\
             /srv/db       1.0 MiB  1.0 MiB  mapped by pid 12,34\n"
        );
    }

    #[test]
    fn dry_run_says_would_and_claims_nothing_stays() {
        let got = render(&report(true, Vec::new()));
        assert!(
            got.starts_with("3 files, 3.0 MiB: would drop 2.0 MiB of 3.0 MiB cached (4.0 KiB"),
            "{got}"
        );
        assert!(!got.contains("still cached"));
    }
}
