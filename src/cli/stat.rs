//! `pagewise stat`: render the library's StatReport.

use super::render::{self, bytes, opt_bytes};
use super::{SortKey, StatArgs};
use pagewise_core::residency::{self, FileStat, StatOptions, Totals};
use std::cmp::Ordering;
use std::sync::Mutex;

fn compare(key: SortKey, a: &FileStat, b: &FileStat) -> Ordering {
    let desc = |x: u64, y: u64| y.cmp(&x);
    let o = match key {
        SortKey::Path => Ordering::Equal,
        SortKey::Size => desc(a.size, b.size),
        SortKey::Cached => desc(a.cached_bytes.unwrap_or(0), b.cached_bytes.unwrap_or(0)),
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

pub fn run(a: StatArgs) -> Result<i32, String> {
    let roots = a.walk.roots()?;
    let list = a.files || a.top.is_some() || a.only_cached || a.map.is_some() || a.sort.is_some();
    let key = a.sort.unwrap_or(if a.top.is_some() {
        SortKey::Cached
    } else {
        SortKey::Path
    });
    let opts = StatOptions {
        walk: a.walk.walk_options(pagewise_core::walk::default_threads()),
        range: a.walk.range(),
        method: a.walk.method(),
        map_cells: a.map.unwrap_or(0),
        files: list || a.out.json_lines,
    };
    let keep: Mutex<Vec<FileStat>> = Mutex::new(Vec::new());
    let top = a.top;
    let stream = a.out.json_lines;
    let only_cached = a.only_cached;
    let report = residency::stat(&roots, &opts, |f| {
        if only_cached && f.residency.cached == Some(0) {
            return;
        }
        if stream {
            render::print_json_line("file", &f);
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
    })
    .map_err(|e| e.to_string())?;
    let mut files = keep.into_inner().unwrap();
    files.sort_by(|x, y| compare(key, x, y));
    if let Some(n) = top {
        files.truncate(n);
    }
    let code = render::exit_code(report.error_count);
    if stream {
        render::print_stream_end(&report.errors, &report);
        return Ok(code);
    }
    if a.out.json {
        let mut v = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        if list {
            v["files"] = serde_json::to_value(&files).map_err(|e| e.to_string())?;
        }
        render::print_json(&v);
        return Ok(code);
    }
    render::report_problems("stat", &report.errors, report.error_count, &report.notices);
    let page = report.page_size;
    let mut rows = vec![header()];
    if list {
        for f in &files {
            rows.push(file_row(f, page));
        }
    } else {
        for r in &report.roots {
            rows.push(totals_row(&r.path.display().to_string(), &r.totals));
        }
    }
    if list || report.roots.len() > 1 {
        rows.push(totals_row("TOTAL", &report.total));
    }
    let table = render::table(&rows);
    if list && a.map.is_some() {
        // Interleave each file's bar under its row.
        let mut lines = table.lines();
        println!("{}", lines.next().unwrap_or_default());
        for f in &files {
            println!("{}", lines.next().unwrap_or_default());
            if let Some(m) = &f.map {
                println!("  {}", render::map_bar(m));
            }
        }
        for l in lines {
            println!("{l}");
        }
    } else {
        print!("{table}");
    }
    Ok(code)
}

fn header() -> Vec<String> {
    [
        "PATH",
        "FILES",
        "SIZE",
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

fn file_row(f: &FileStat, page: u64) -> Vec<String> {
    let r = &f.residency;
    vec![
        f.path.display().to_string(),
        String::new(),
        bytes(f.size),
        f.cached_bytes.map_or_else(|| "unknown".into(), bytes),
        f.percent()
            .map_or_else(|| "?".into(), |p| format!("{p:.1}%")),
        opt_bytes(r.dirty, page),
        opt_bytes(r.writeback, page),
        opt_bytes(r.evicted, page),
        opt_bytes(r.recently_evicted, page),
    ]
}

fn totals_row(name: &str, t: &Totals) -> Vec<String> {
    let page = pagewise_core::sys::page_size();
    let pct = if t.unknown_files > 0 {
        format!("{:.1}%*", t.percent())
    } else {
        format!("{:.1}%", t.percent())
    };
    vec![
        name.to_string(),
        t.files.to_string(),
        bytes(t.size),
        bytes(t.cached_bytes),
        pct,
        bytes(t.dirty_pages * page),
        bytes(t.writeback_pages * page),
        bytes(t.evicted_pages * page),
        bytes(t.recently_evicted_pages * page),
    ]
}
