//! `pagewise top`: the library's top intervals as a live table, one table per interval in a
//! pipe, one JSON document or JSON lines.

use super::args::parse_duration;
use super::exit::{CliError, ExitCode};
use super::output::Output;
use super::render;
use super::signals::Signals;
use clap::{Args, ValueEnum};
use pagewise_core::top::{
    self, CgroupRow, Counts, FileRow, Interval, ProcessRow, Rows, SamplerOptions, TopOptions, Views,
};
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// The `pagewise top --help` epilogue.
pub const EXAMPLES: &str = "\
Examples:
  pagewise top                            processes filling or evicting the cache, each second
  pagewise top --by cgroup                by memory cgroup (containers, pods and units named)
  pagewise top --by file --limit 20       the 20 files with the most traffic
  pagewise top --once --interval 5s       one 5-second interval, then exit
  pagewise top --by process,cgroup,file --json-lines   every view, one JSON line per interval

ADDED: pages added to the page cache (reads, read-ahead, new pages written;
mm_filemap_add_to_page_cache). DIRTIED: folios made dirty (writeback_dirty_folio); that
tracepoint has no folio size, so a folio counts the size it had when top saw it added, else
one page, shown '>=' (a lower bound). EVICTED: pages removed (mm_filemap_delete_from_page_cache:
reclaim, eviction, truncation). REFAULTS: evicted file pages read again over the interval
(memory.stat workingset_refault_file; '-' where unknown). Needs root or CAP_PERFMON.

Exit codes: 0 success, 1 fatal error (tracing unavailable, bad arguments).";

/// Rows per table of the text view unless `--limit` says.
const DEFAULT_LIMIT: usize = 20;

/// A view of `--by`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// By process (pid and command)
    Process,
    /// By memory cgroup (the groups `pagewise cgroups` shows)
    Cgroup,
    /// By file (device and inode, with its path)
    File,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// What the rows are; several (comma-separated) for several tables
    #[arg(long, value_enum, value_delimiter = ',', default_value = "process")]
    pub by: Vec<By>,
    /// Length of an interval (500ms, 1s, 10s)
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub interval: Duration,
    /// Print one interval and exit (--count 1)
    #[arg(long, conflicts_with = "count")]
    pub once: bool,
    /// Intervals to print, then exit [default: until Ctrl-C]
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Rows named per table, largest first; the others are summed as one `rest` row
    /// [default: 20; in JSON every row]
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Distinct keys counted per table and interval; the rest are counted as `other`
    #[arg(long, value_name = "N", default_value_t = top::DEFAULT_MAX_KEYS)]
    pub max_keys: usize,
    /// Ring buffer per CPU, KiB
    #[arg(long, value_name = "KIB", default_value_t = pagewise_core::trace::DEFAULT_BUFFER_KB)]
    pub buffer_kb: u64,
    /// One JSON document at the end, with every interval (schema: docs/json.md)
    #[arg(short = 'J', long, conflicts_with = "json_lines")]
    pub json: bool,
    /// One JSON line per interval as it ends, then a summary line
    #[arg(long)]
    pub json_lines: bool,
}

/// `pagewise top`.
pub fn run(a: TopArgs) -> Result<ExitCode, CliError> {
    let views = Views {
        process: a.by.contains(&By::Process),
        cgroup: a.by.contains(&By::Cgroup),
        file: a.by.contains(&By::File),
    };
    let out = Output::of(a.json, a.json_lines);
    let opts = TopOptions {
        sampler: SamplerOptions {
            views,
            max_keys: a.max_keys,
            buffer_kb: a.buffer_kb,
            max_rows: a.limit.or(out.is_text().then_some(DEFAULT_LIMIT)),
        },
        interval: a.interval,
        count: if a.once { Some(1) } else { a.count },
    };
    let tty = out.is_text() && std::io::stdout().is_terminal();
    let mut all = Vec::new();
    let mut on = |i: &Interval| {
        if out == Output::Json {
            all.push(i.clone());
        }
        out.item("interval", i, |i| {
            let mut text = Vec::new();
            let _ = write_interval(&mut text, i, &a.by, a.limit.unwrap_or(DEFAULT_LIMIT));
            let text = String::from_utf8_lossy(&text);
            let mut out = std::io::stdout().lock();
            if tty {
                let cols = pagewise_core::sys::terminal_columns(std::io::stdout().as_fd_ref())
                    .map_or(usize::MAX, usize::from);
                let _ = write!(out, "\x1b[H\x1b[2J");
                for l in text.lines() {
                    let _ = writeln!(out, "{}", cut(l, cols));
                }
            } else {
                let _ = writeln!(out, "{text}");
            }
            let _ = out.flush();
        });
    };
    let report = top::top(&opts, &Signals, &mut on)?;
    let errors = &report.outcome.errors;
    out.report_with(&report, errors, "intervals", Some(&all), |r| {
        render::report_problems("top", &[], 0, &r.outcome.notices);
        if r.lost_events > 0 {
            eprintln!("{}", render::lost_events_warning(r.lost_events));
        }
    });
    Ok(ExitCode::from_outcome(&report.outcome))
}

/// Stdout as a borrowed descriptor (for the terminal's width).
trait AsFdRef {
    fn as_fd_ref(&self) -> std::os::fd::BorrowedFd<'_>;
}

impl AsFdRef for std::io::Stdout {
    fn as_fd_ref(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.as_fd()
    }
}

/// `line` cut to `cols` characters (a wrapped line breaks the redraw).
fn cut(line: &str, cols: usize) -> &str {
    match line.char_indices().nth(cols) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}

/// A byte figure of a table: human units, `>=` when a lower bound.
fn figure(bytes: u64, lower: bool) -> String {
    let b = render::bytes(bytes);
    if lower && bytes > 0 {
        format!(">={b}")
    } else {
        b
    }
}

fn figures(c: &Counts, dirtied: bool) -> Vec<String> {
    vec![
        figure(c.added_bytes, c.added_lower_bound),
        if dirtied {
            figure(c.dirtied_bytes, c.dirtied_lower_bound)
        } else {
            "-".into()
        },
        figure(c.evicted_bytes, c.evicted_lower_bound),
    ]
}

/// Columns right-aligned but the last, which is left as is (names, paths).
fn layout(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut w = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let n = r.len();
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i + 1 == n {
                    c.clone()
                } else {
                    format!("{c:>width$}", width = w[i])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// One interval as text: a totals line, then a table per view asked for.
pub fn write_interval(
    w: &mut dyn Write,
    i: &Interval,
    by: &[By],
    limit: usize,
) -> std::io::Result<()> {
    let d = i.dirtied_counted;
    let t = figures(&i.totals, d);
    writeln!(
        w,
        "pagewise top: {:.1}s, added {}, dirtied {}, evicted {}, {} events{}",
        i.elapsed_s,
        t[0],
        t[1],
        t[2],
        i.totals.events,
        if i.lost_events > 0 {
            format!(", {} LOST (ring full: figures short)", i.lost_events)
        } else {
            String::new()
        }
    )?;
    for b in by {
        let rows = match b {
            By::Process => i.processes.as_ref().map(|v| process_rows(v, d, limit)),
            By::Cgroup => i.cgroups.as_ref().map(|v| cgroup_rows(v, d, limit)),
            By::File => i.files.as_ref().map(|v| file_rows(v, d, limit)),
        };
        if let Some(rows) = rows {
            writeln!(w)?;
            w.write_all(layout(&rows).as_bytes())?;
        }
    }
    Ok(())
}

/// A table's header: the figures, then the view's own columns.
fn head(first: &[&str]) -> Vec<String> {
    let mut h: Vec<String> = ["ADDED", "DIRTIED", "EVICTED"].map(String::from).to_vec();
    h.extend(first.iter().map(|s| s.to_string()));
    h
}

/// The rows past `--limit` and past `--max-keys`, summed (`pad` empty cells before the label).
fn with_other<R>(rows: &mut Vec<Vec<String>>, v: &Rows<R>, d: bool, pad: usize) {
    for (c, what) in [
        (&v.rest, format!("({} more rows)", v.rest_rows)),
        (&v.other, "(other: past --max-keys)".to_string()),
    ] {
        if let Some(c) = c {
            let mut r = figures(c, d);
            r.extend(std::iter::repeat_n(String::new(), pad));
            r.push(what);
            rows.push(r);
        }
    }
}

fn process_rows(v: &Rows<ProcessRow>, d: bool, limit: usize) -> Vec<Vec<String>> {
    let mut rows = vec![head(&["PID", "COMM", "CGROUP"])];
    for p in v.rows.iter().take(limit) {
        let mut r = figures(&p.counts, d);
        r.push(p.pid.to_string());
        r.push(
            p.comm
                .as_deref()
                .map_or("unknown".into(), render::escape_bytes),
        );
        r.push(p.cgroup.as_deref().map_or("unknown".into(), escape));
        rows.push(r);
    }
    with_other(&mut rows, v, d, 2);
    rows
}

fn cgroup_rows(v: &Rows<CgroupRow>, d: bool, limit: usize) -> Vec<Vec<String>> {
    let mut rows = vec![head(&["REFAULTS", "NAME", "CGROUP"])];
    for c in v.rows.iter().take(limit) {
        let mut r = figures(&c.counts, d);
        r.push(c.workingset_refaults.map_or("-".into(), |n| n.to_string()));
        r.push(c.name.as_deref().map_or("-".into(), escape));
        r.push(c.cgroup.as_deref().map_or_else(
            || format!("unknown ({})", c.cgroup_unknown.as_deref().unwrap_or("")),
            escape,
        ));
        rows.push(r);
    }
    with_other(&mut rows, v, d, 2);
    rows
}

fn file_rows(v: &Rows<FileRow>, d: bool, limit: usize) -> Vec<Vec<String>> {
    let mut rows = vec![head(&["FILE"])];
    for f in v.rows.iter().take(limit) {
        let mut r = figures(&f.counts, d);
        r.push(match (&f.path, &f.path_unknown) {
            (Some(p), _) if f.deleted => format!("{} (deleted)", render::escape_bytes(p)),
            (Some(p), _) => render::escape_bytes(p),
            (None, why) => format!(
                "unknown {}:{} ({})",
                f.dev.as_deref().unwrap_or("-"),
                f.ino,
                why.as_deref().unwrap_or("")
            ),
        });
        rows.push(r);
    }
    with_other(&mut rows, v, d, 0);
    rows
}

fn escape(s: &str) -> String {
    render::escape_bytes(s.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagewise_core::top::{FileRow, ProcessRow, Rows};

    fn counts(a: u64, d: u64, e: u64) -> Counts {
        Counts {
            added_bytes: a,
            dirtied_bytes: d,
            evicted_bytes: e,
            events: 3,
            dirtied_lower_bound: d == 4096,
            ..Counts::default()
        }
    }

    #[test]
    fn an_interval_renders_as_tables() {
        let i = Interval {
            elapsed_s: 1.0,
            totals: counts(32 << 20, 4096, 0),
            lost_events: 0,
            dirtied_counted: true,
            processes: Some(Rows {
                rows: vec![ProcessRow {
                    pid: 42,
                    comm: Some(b"cat".to_vec()),
                    cgroup: Some("/a/b".into()),
                    counts: counts(32 << 20, 4096, 0),
                }],
                other: None,
                rest: None,
                rest_rows: 0,
            }),
            cgroups: None,
            files: Some(Rows {
                rows: vec![FileRow {
                    dev: Some("254:0".into()),
                    ino: 12,
                    path: None,
                    deleted: false,
                    path_unknown: Some("gone: deleted since".into()),
                    counts: counts(0, 0, 1 << 20),
                }],
                other: Some(counts(4096, 0, 0)),
                rest: Some(counts(8192, 0, 0)),
                rest_rows: 2,
            }),
        };
        let mut out = Vec::new();
        write_interval(&mut out, &i, &[By::Process, By::File], 10).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "pagewise top: 1.0s, added 32.0 MiB, dirtied >=4.0 KiB, evicted 0 B, 3 events\n\
             \n\
             \x20  ADDED    DIRTIED  EVICTED  PID  COMM  CGROUP\n\
             32.0 MiB  >=4.0 KiB      0 B   42   cat  /a/b\n\
             \n\
             \x20 ADDED  DIRTIED  EVICTED  FILE\n\
             \x20   0 B      0 B  1.0 MiB  unknown 254:0:12 (gone: deleted since)\n\
             8.0 KiB      0 B      0 B  (2 more rows)\n\
             4.0 KiB      0 B      0 B  (other: past --max-keys)\n"
        );
        assert_eq!(cut("abcdef", 3), "abc");
    }
}
