//! `pagewise stat`: render the library's StatReport.

use super::args::{OutputArgs, WalkArgs};
use super::exit::{CliError, ExitCode};
use super::render::{self, bytes, opt_bytes, partial_bytes};
use clap::{Args, ValueEnum};
use pagewise_core::stat::{
    self, ChargeOptions, ChargeReport, FileCharge, FileStat, StatOptions, StatReport, Totals,
};
use pagewise_core::{FileResult, Watch};
use std::cmp::Ordering;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

/// The `pagewise stat --help` epilogue: examples, notes and exit codes.
pub const EXAMPLES: &str = "\
Examples:
  pagewise stat                       summary of the current directory
  pagewise stat /var/lib/postgresql   one line per tree
  pagewise stat -l --sort cached /data --top 20
  pagewise stat --map big.db          per-page residency bar, 60 cells (--map=120: wider)
  pagewise stat --range 0-64M big.img only the first 64 MiB (SIZE becomes IN RANGE)
  find /data -name '*.db' -print0 | pagewise stat --from - -0 --json
  pagewise stat --by-cgroup /var/lib/mysql   which cgroups' pages these are (root; -l per file)

Map cells: ' ' nothing cached, '.' some (even one page), 'o' 34% or more, 'O' all, '?' unknown.
'unknown': cachestat(2) refused the file (not yours, not writable) and mincore(2) would call it
fully cached; totals that leave such files out are marked '>='.
vmtouch users: -v (--map), -p RANGE, -I include, -i ignore, -f follow, -F one filesystem.

Exit codes: 0 success, 1 fatal error, 2 some files failed.";

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Path,
    Size,
    Cached,
    Percent,
    Dirty,
    Evicted,
}

#[derive(Args, Debug)]
pub struct StatArgs {
    #[command(flatten)]
    pub walk: WalkArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// List every file, not only one line per argument
    #[arg(short = 'l', long)]
    pub files: bool,
    /// Order of listed files [default: path; cached with --top]
    #[arg(long, value_enum)]
    pub sort: Option<SortKey>,
    /// List only the N files first in --sort order (memory stays bounded)
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// List only files with at least one cached page
    #[arg(long)]
    pub only_cached: bool,
    /// Show a residency bar under each listed file (like vmtouch -v), 60 cells or
    /// --map=WIDTH. Cells: ' ' nothing cached, '.' some (even one page), 'o' 34% or more,
    /// 'O' all, '?' unknown
    #[arg(
        short = 'v',
        long,
        value_name = "WIDTH",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "60",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub map: Option<u16>,
    /// Which memory cgroup the cached pages are charged to (their frames through
    /// /proc/self/pagemap, then /proc/kpagecgroup; root only). With -l, per file
    #[arg(long, conflicts_with_all = ["map", "sort", "only_cached", "range"])]
    pub by_cgroup: bool,
}

fn compare(key: SortKey, a: &FileStat, b: &FileStat) -> Ordering {
    let desc = |x: u64, y: u64| y.cmp(&x);
    let o = match key {
        SortKey::Path => Ordering::Equal,
        SortKey::Size => desc(a.residency.bytes, b.residency.bytes),
        SortKey::Cached => desc(a.cached_bytes().unwrap_or(0), b.cached_bytes().unwrap_or(0)),
        SortKey::Percent => b
            .percent()
            .unwrap_or(-1.0)
            .total_cmp(&a.percent().unwrap_or(-1.0)),
        SortKey::Dirty => desc(
            a.residency.dirty.unwrap_or(0),
            b.residency.dirty.unwrap_or(0),
        ),
        SortKey::Evicted => desc(
            a.residency.evicted.unwrap_or(0),
            b.residency.evicted.unwrap_or(0),
        ),
    };
    o.then_with(|| a.path.cmp(&b.path))
}

/// What `stat` reports of the files and trees, picked from the flags once.
enum Mode {
    /// How much of each is cached.
    Residency,
    /// `--by-cgroup`: which memory cgroup the cached pages are charged to.
    ByCgroup,
}

/// `pagewise stat`.
pub fn run(a: StatArgs) -> Result<ExitCode, CliError> {
    let mode = if a.by_cgroup {
        Mode::ByCgroup
    } else {
        Mode::Residency
    };
    let roots = a.walk.roots()?;
    match mode {
        Mode::Residency => residency(roots, a),
        Mode::ByCgroup => by_cgroup(roots, a),
    }
}

/// `pagewise stat PATH...`: the residency table, files listed, sorted and mapped as asked.
fn residency(roots: Vec<PathBuf>, a: StatArgs) -> Result<ExitCode, CliError> {
    let out = a.out.format();
    let list = a.files || a.top.is_some() || a.only_cached || a.map.is_some() || a.sort.is_some();
    let key = a.sort.unwrap_or(if a.top.is_some() {
        SortKey::Cached
    } else {
        SortKey::Path
    });
    let opts = StatOptions {
        roots,
        walk: a.walk.walk_options(pagewise_core::walk::default_threads()),
        range: a.walk.range(),
        method: a.walk.method(),
        map_cells: a.map.map_or(0, usize::from),
        files: list || out.streams(),
    };
    let keep: Mutex<Vec<FileStat>> = Mutex::new(Vec::new());
    let top = a.top;
    let only_cached = a.only_cached;
    let on_file = |r: FileResult| {
        let FileResult::Stat(f) = r else { return };
        if only_cached && f.residency.cached == Some(0) {
            return;
        }
        if out.streams() {
            out.item("file", &f, |_| {});
            return;
        }
        if !list {
            return;
        }
        let mut k = keep.lock().unwrap();
        k.push(f);
        if let Some(n) = top {
            // Bounded memory: prune to the best n whenever the buffer doubles.
            if k.len() >= 2 * n.max(512) {
                k.sort_by(|x, y| compare(key, x, y));
                k.truncate(n);
            }
        }
    };
    let observer = Watch {
        progress: None,
        on_file: Some(on_file),
        cancel: None,
    };
    let report = stat::stat(&opts, &observer)?;
    let mut files = keep.into_inner().unwrap();
    files.sort_by(|x, y| compare(key, x, y));
    if let Some(n) = top {
        files.truncate(n);
    }
    let code = ExitCode::from_outcome(&report.outcome);
    let view = View {
        ranged: a.walk.range.is_some(),
        list,
        map: list && a.map.is_some(),
        roots: opts.roots.len(),
    };
    let kept = list.then_some(&files);
    out.report_with(&report, &report.outcome.errors, "files", kept, |r| {
        let o = &r.outcome;
        render::report_problems("stat", &o.errors, o.error_count, &o.notices);
        let _ = write_table(&mut std::io::stdout().lock(), r, &files, &view);
        if let Some(why) = r.total.unknown_reason {
            eprintln!(
                "pagewise stat: note: {} of {} files show 'unknown' (totals marked >= leave them out): {why}",
                r.total.unknown_files, r.total.files
            );
        }
    });
    Ok(code)
}

/// `pagewise stat --by-cgroup`.
fn by_cgroup(roots: Vec<PathBuf>, a: StatArgs) -> Result<ExitCode, CliError> {
    let out = a.out.format();
    let opts = ChargeOptions {
        roots,
        walk: a.walk.walk_options(pagewise_core::walk::default_threads()),
        files: a.files || a.top.is_some() || out.streams(),
    };
    let keep: Mutex<Vec<FileCharge>> = Mutex::new(Vec::new());
    let on_file = |r: FileResult| {
        let FileResult::Charge(f) = r else { return };
        if out.streams() {
            out.item("file", &f, |_| {});
        } else {
            keep.lock().unwrap().push(f);
        }
    };
    let observer = Watch {
        progress: None,
        on_file: Some(on_file),
        cancel: None,
    };
    let report = stat::charged(&opts, &observer)?;
    let mut files = keep.into_inner().unwrap();
    files.sort_by(|x, y| {
        y.cached_bytes
            .cmp(&x.cached_bytes)
            .then_with(|| x.path.cmp(&y.path))
    });
    if let Some(n) = a.top {
        files.truncate(n);
    }
    let code = ExitCode::from_outcome(&report.outcome);
    let kept = opts.files.then_some(&files);
    out.report_with(&report, &report.outcome.errors, "files", kept, |r| {
        let o = &r.outcome;
        render::report_problems("stat", &o.errors, o.error_count, &o.notices);
        let _ = write_charges(&mut std::io::stdout().lock(), r, &files, opts.files);
    });
    Ok(code)
}

/// Per cgroup (or per file and cgroup with -l), then the total.
fn write_charges(
    w: &mut dyn Write,
    r: &ChargeReport,
    files: &[FileCharge],
    list: bool,
) -> std::io::Result<()> {
    // Rows of (name, count or "", cached, cgroup): per file and cgroup with -l (the file's
    // name on its first row only), else per cgroup.
    let mut rows: Vec<[String; 4]> = Vec::new();
    if list {
        for f in files {
            let name = render::path_text(&f.path);
            if f.cgroups.is_empty() {
                rows.push([name.clone(), String::new(), bytes(0), "-".into()]);
            }
            for (i, c) in f.cgroups.iter().enumerate() {
                let shown = if i == 0 { name.clone() } else { String::new() };
                let cg = render::escape_bytes(c.cgroup.as_bytes());
                rows.push([shown, String::new(), bytes(c.bytes), cg]);
            }
        }
    } else {
        for c in &r.cgroups {
            let cg = render::escape_bytes(c.cgroup.as_bytes());
            rows.push([cg, c.files.to_string(), bytes(c.bytes), String::new()]);
        }
    }
    let total_files = if list {
        String::new()
    } else {
        r.total.files.to_string()
    };
    rows.push([
        "TOTAL".into(),
        total_files,
        bytes(r.total.cached_bytes),
        String::new(),
    ]);
    let mut table: Vec<Vec<String>> = vec![if list {
        vec!["PATH".into(), "CACHED".into()]
    } else {
        vec!["CGROUP".into(), "FILES".into(), "CACHED".into()]
    }];
    for [name, files, cached, _] in &rows {
        table.push(if list {
            vec![name.clone(), cached.clone()]
        } else {
            vec![name.clone(), files.clone(), cached.clone()]
        });
    }
    let text = render::table(&table);
    if list {
        // The cgroup last, left-aligned (the table right-aligns every column but the first).
        let cgroups = std::iter::once("CGROUP").chain(rows.iter().map(|r| r[3].as_str()));
        for (line, cg) in text.lines().zip(cgroups) {
            writeln!(w, "{}", format!("{line}  {cg}").trim_end())?;
        }
    } else {
        w.write_all(text.as_bytes())?;
    }
    if r.total.unresolved_bytes > 0 {
        writeln!(
            w,
            "{} cached when looked at could not be attributed (evicted meanwhile)",
            bytes(r.total.unresolved_bytes)
        )?;
    }
    Ok(())
}

/// How the table is laid out.
struct View {
    /// `--range` given: the size column is the bytes in the range.
    ranged: bool,
    /// One row per file (`-l`, `--top`, `--sort`, ...), else one per root.
    list: bool,
    /// A residency bar under each file's row, and the legend under the table.
    map: bool,
    /// Roots given (a TOTAL row when more than one, even if some failed).
    roots: usize,
}

/// Writes the table: one row per file (or per root), a TOTAL row when there is more than one,
/// bars under the rows with `--map`. Nothing when nothing was measured (every root failed:
/// its errors are on stderr).
fn write_table(
    w: &mut dyn Write,
    report: &StatReport,
    files: &[FileStat],
    view: &View,
) -> std::io::Result<()> {
    let mut rows = vec![header(view.ranged)];
    if view.list {
        rows.extend(files.iter().map(file_row));
    } else {
        for r in &report.roots {
            rows.push(totals_row(&render::path_text(&r.path), &r.totals));
        }
    }
    if view.list || view.roots > 1 {
        rows.push(totals_row("TOTAL", &report.total));
    }
    if rows.len() == 1 {
        return Ok(());
    }
    let table = render::table(&rows);
    if !view.map {
        return w.write_all(table.as_bytes());
    }
    // Interleave each file's bar under its row.
    let mut lines = table.lines();
    writeln!(w, "{}", lines.next().unwrap_or_default())?;
    for f in files {
        writeln!(w, "{}", lines.next().unwrap_or_default())?;
        if let Some(m) = &f.map {
            writeln!(w, "  {}", render::map_bar(m))?;
        }
    }
    for l in lines {
        writeln!(w, "{l}")?;
    }
    writeln!(w, "{}", render::MAP_LEGEND)
}

fn header(ranged: bool) -> Vec<String> {
    [
        "PATH",
        "FILES",
        if ranged { "IN RANGE" } else { "SIZE" },
        "CACHED",
        "%",
        "DIRTY",
        "WRITEBACK",
        "EVICTED",
        "RECENT-EVICT",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn file_row(f: &FileStat) -> Vec<String> {
    let r = &f.residency;
    vec![
        render::path_text(&f.path),
        String::new(),
        bytes(r.bytes),
        opt_bytes(r.cached),
        f.percent()
            .map_or_else(|| "unknown".into(), |p| format!("{p:.1}%")),
        opt_bytes(r.dirty),
        opt_bytes(r.writeback),
        opt_bytes(r.evicted),
        opt_bytes(r.recently_evicted),
    ]
}

fn totals_row(name: &str, t: &Totals) -> Vec<String> {
    let b = |v: u64| partial_bytes(v, t.files, t.unknown_files);
    let d = |v: Option<u64>| partial_bytes(v.unwrap_or(0), t.files, t.detail_unknown_files);
    let pct = match t.percent() {
        None => "unknown".into(),
        // A lower bound over all bytes: the unknown files hold some more, or none.
        Some(_) if t.unknown_files > 0 => {
            format!(
                ">={:.1}%",
                t.cached_bytes as f64 * 100.0 / t.bytes.max(1) as f64
            )
        }
        Some(p) => format!("{p:.1}%"),
    };
    vec![
        name.to_string(),
        t.files.to_string(),
        bytes(t.bytes),
        b(t.cached_bytes),
        pct,
        d(t.dirty_bytes),
        d(t.writeback_bytes),
        d(t.evicted_bytes),
        d(t.recently_evicted_bytes),
    ]
}

#[cfg(test)]
mod tests {
    //! The table, rendered from hand-made reports: no kernel involved.
    use super::*;
    use pagewise_core::residency::{MeasuredBy, Residency, UNKNOWN_NOT_WRITABLE};
    use pagewise_core::stat::RootTotals;
    use pagewise_core::walk::WalkSummary;
    use pagewise_core::Outcome;
    use std::path::PathBuf;

    fn residency(bytes: u64, cached: Option<u64>) -> Residency {
        let known = cached.map(|_| 0);
        Residency {
            bytes,
            cached,
            dirty: known,
            writeback: known,
            evicted: known,
            recently_evicted: known,
            method: if cached.is_some() {
                MeasuredBy::Cachestat
            } else {
                MeasuredBy::Unknown
            },
            unknown_reason: cached.is_none().then_some(UNKNOWN_NOT_WRITABLE),
        }
    }

    fn file(path: &str, bytes: u64, cached: Option<u64>, map: Option<Vec<Option<u8>>>) -> FileStat {
        FileStat {
            path: PathBuf::from(path),
            size: bytes,
            allocated_bytes: bytes,
            residency: residency(bytes, cached),
            map,
            root: 0,
        }
    }

    fn report(files: &[FileStat]) -> StatReport {
        let mut total = Totals::default();
        for f in files {
            total.add(f.size, &f.residency);
        }
        StatReport {
            page_size: 4096,
            roots: vec![RootTotals {
                path: PathBuf::from("/data"),
                totals: total.clone(),
            }],
            total,
            walk: WalkSummary::default(),
            outcome: Outcome::default(),
        }
    }

    fn render(report: &StatReport, files: &[FileStat], view: View) -> String {
        let mut out = Vec::new();
        write_table(&mut out, report, files, &view).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn view(list: bool, map: bool) -> View {
        View {
            ranged: false,
            list,
            map,
            roots: 1,
        }
    }

    #[test]
    fn one_root_one_row_no_total() {
        let files = [file("/data/a", 8192, Some(4096), None)];
        let got = render(&report(&files), &[], view(false, false));
        assert_eq!(
            got,
            "PATH   FILES     SIZE   CACHED      %  DIRTY  WRITEBACK  EVICTED  RECENT-EVICT\n\
             /data      1  8.0 KiB  4.0 KiB  50.0%    0 B        0 B      0 B           0 B\n"
        );
    }

    #[test]
    fn listed_files_escape_names_and_total_marks_unknown_with_ge() {
        let files = [
            file("/data/a\nb", 8192, Some(8192), None),
            file("/data/c", 4096, None, None),
        ];
        let got = render(&report(&files), &files, view(true, false));
        assert_eq!(
            got,
            "PATH          FILES      SIZE     CACHED        %    DIRTY  WRITEBACK  EVICTED  RECENT-EVICT\n\
             /data/a\\x0ab          8.0 KiB    8.0 KiB   100.0%      0 B        0 B      0 B           0 B\n\
             /data/c               4.0 KiB    unknown  unknown  unknown    unknown  unknown       unknown\n\
             TOTAL             2  12.0 KiB  >=8.0 KiB  >=66.7%    >=0 B      >=0 B    >=0 B         >=0 B\n"
        );
    }

    #[test]
    fn map_bars_sit_under_their_rows_with_the_legend_last() {
        let files = [file(
            "/data/a",
            4 * 4096,
            Some(8192),
            Some(vec![Some(100), Some(0), Some(20), None]),
        )];
        let got = render(&report(&files), &files, view(true, true));
        let lines: Vec<&str> = got.lines().collect();
        assert!(lines[0].starts_with("PATH"));
        assert!(lines[1].starts_with("/data/a"));
        assert_eq!(lines[2], "  [O .?]");
        assert!(lines[3].starts_with("TOTAL"));
        assert_eq!(lines[4], render::MAP_LEGEND);
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn by_cgroup_tables() {
        use pagewise_core::stat::Charge;
        let c = |n: &str, b: u64| Charge {
            cgroup: n.into(),
            inode: 1,
            bytes: b,
            files: 1,
        };
        let f = FileCharge {
            path: PathBuf::from("/d/a"),
            size: 16384,
            cached_bytes: 12288,
            unresolved_bytes: 0,
            cgroups: vec![c("/app", 8192), c("/db", 4096)],
        };
        let r = ChargeReport {
            total: pagewise_core::stat::ChargeTotals {
                files: 1,
                size: 16384,
                cached_bytes: 12288,
                unresolved_bytes: 4096,
            },
            cgroups: f.cgroups.clone(),
            walk: WalkSummary::default(),
            outcome: Outcome::default(),
        };
        let mut out = Vec::new();
        write_charges(&mut out, &r, &[], false).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "CGROUP  FILES    CACHED\n/app        1   8.0 KiB\n/db         1   4.0 KiB\n\
             TOTAL       1  12.0 KiB\n4.0 KiB cached when looked at could not be attributed (evicted meanwhile)\n"
        );
        let mut out = Vec::new();
        write_charges(&mut out, &r, &[f], true).unwrap();
        assert_eq!(
            String::from_utf8(out)
                .unwrap()
                .lines()
                .take(3)
                .collect::<Vec<_>>(),
            [
                "PATH     CACHED  CGROUP",
                "/d/a    8.0 KiB  /app",
                "        4.0 KiB  /db"
            ]
        );
    }

    #[test]
    fn nothing_measured_prints_nothing() {
        let mut r = report(&[]);
        r.roots.clear();
        assert_eq!(render(&r, &[], view(false, false)), "");
    }
}
