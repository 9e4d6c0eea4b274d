//! `record`, `show`, `replay`, and the trace side of `evict`/`load`.

use super::render::{self, bytes};
use super::{OrderArg, RecordArgs, ReplayArgs, RunArgs, ShowArgs, TraceFormat};
use pagewise_core::replay::{self, Order, ReplayOptions, TraceCacheReport};
use pagewise_core::trace::{self, Backend, RecordOptions, Trace};
use std::io::Write;
use std::path::Path;

/// Reads and validates a trace file.
pub fn load_trace(path: &Path) -> Result<Trace, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: read failed: {e}", path.display()))?;
    Trace::from_bytes(&data).map_err(|e| format!("{}: {e}", path.display()))
}

fn write_trace(t: &Trace, format: TraceFormat, out: &Path) -> Result<(), String> {
    // Write beside, then rename: a trace is never seen half written. Not for stdout, and not
    // for an existing non-regular file (/dev/null, a FIFO, a device): renaming over that would
    // replace it, so it is written to directly. A symlink is followed: the file it names is
    // replaced, the link stays.
    let meta = std::fs::metadata(out).ok();
    let direct = out.as_os_str() == "-" || meta.as_ref().is_some_and(|m| !m.is_file());
    let target = if direct {
        out.to_path_buf()
    } else if let Ok(p) = std::fs::canonicalize(out) {
        p
    } else if let Ok(l) = std::fs::read_link(out) {
        // A dangling symlink: create what it names.
        out.parent().map_or(l.clone(), |d| d.join(&l))
    } else {
        out.to_path_buf()
    };
    let mut w: Box<dyn Write> = if out.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else if direct {
        Box::new(std::io::BufWriter::new(
            std::fs::OpenOptions::new()
                .write(true)
                .open(out)
                .map_err(|e| format!("{}: open failed: {e}", out.display()))?,
        ))
    } else {
        Box::new(std::io::BufWriter::new(
            std::fs::File::create(tmp_name(&target))
                .map_err(|e| format!("{}: create failed: {e}", out.display()))?,
        ))
    };
    let r = match format {
        TraceFormat::Binary => w.write_all(&t.to_bytes()),
        TraceFormat::Text => trace::write_text(t, false, &mut w),
        TraceFormat::Grouped => trace::write_text(t, true, &mut w),
        TraceFormat::Json => serde_json::to_writer_pretty(&mut w, t).map_err(std::io::Error::other),
    };
    r.and_then(|_| w.flush()).map_err(|e| {
        if !direct {
            let _ = std::fs::remove_file(tmp_name(&target));
        }
        format!("{}: write failed: {e}", out.display())
    })?;
    drop(w);
    if !direct {
        std::fs::rename(tmp_name(&target), &target)
            .map_err(|e| format!("{}: rename failed: {e}", out.display()))?;
    }
    Ok(())
}

fn tmp_name(p: &Path) -> std::path::PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".pagewise-tmp");
    s.into()
}

fn backend(b: super::BackendArg) -> Backend {
    match b {
        super::BackendArg::Auto => Backend::Auto,
        super::BackendArg::Perf => Backend::Perf,
        super::BackendArg::Tracefs => Backend::Tracefs,
    }
}

pub fn run(a: RecordArgs) -> Result<i32, String> {
    let rec = trace::record(
        &a.command,
        &RecordOptions {
            buffer_kb: a.buffer_kb,
            faults: a.faults,
            backend: backend(a.backend),
        },
    )
    .map_err(|e| format!("record: {e}"))?;
    for n in &rec.notices {
        eprintln!("pagewise record: {n}");
    }
    let (t, status, source) = (rec.trace, rec.status, rec.source);
    write_trace(&t, a.format, &a.output)?;
    let files_known = t.files.iter().filter(|f| f.path.is_some()).count();
    eprintln!(
        "pagewise record ({source}): {} events, {} pages ({}) in {} files ({} resolved to paths), {:.3} s{}{}",
        t.events.len(),
        t.bytes() / t.page_size as u64,
        bytes(t.bytes()),
        t.files.len(),
        files_known,
        t.duration_ns as f64 / 1e9,
        if t.lost_events > 0 {
            format!(
                "; WARNING: {} events lost (ring buffer overrun: raise --buffer-kb)",
                t.lost_events
            )
        } else {
            String::new()
        },
        if a.output.as_os_str() != "-" {
            format!(" -> {}", a.output.display())
        } else {
            String::new()
        }
    );
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

pub fn show(a: ShowArgs) -> Result<i32, String> {
    let t = load_trace(&a.trace)?;
    write_trace(&t, a.format, Path::new("-"))?;
    Ok(0)
}

pub fn replay(a: ReplayArgs) -> Result<i32, String> {
    let t = load_trace(&a.trace)?;
    let order = match a.order {
        OrderArg::Recorded => Order::Recorded,
        OrderArg::File => Order::File,
        OrderArg::Disk => Order::Disk,
    };
    let reports = if a.compare {
        replay::compare(&t, a.direct, a.merge_gap, a.max_request, a.runs)
    } else {
        vec![replay::replay(
            &t,
            &ReplayOptions {
                order,
                direct: a.direct,
                merge_gap: a.merge_gap,
                depth: a.depth,
                max_request: a.max_request,
            },
        )]
    };
    let errors: u64 = reports.iter().map(|r| r.error_count).sum();
    if a.json {
        render::print_json(&reports);
        return Ok(render::exit_code(errors));
    }
    for r in &reports {
        render::report_problems("replay", &r.errors, r.error_count, &[]);
    }
    if let Some(m) = reports.first().filter(|r| r.files_missing > 0) {
        eprintln!(
            "pagewise replay: note: {} traced files are gone and were skipped",
            m.files_missing
        );
    }
    let base = reports.first().map_or(1.0, |r| r.elapsed_s.max(1e-9));
    let mut rows = vec![[
        "ORDER", "DEPTH", "REQUESTS", "BYTES", "TIME", "MB/s", "SPEED-UP",
    ]
    .map(String::from)
    .to_vec()];
    for r in &reports {
        rows.push(vec![
            format!(
                "{}{}",
                r.order.name(),
                if r.direct { " (direct)" } else { "" }
            ),
            r.depth.to_string(),
            r.requests.to_string(),
            bytes(r.bytes),
            format!("{:.3} s", r.elapsed_s),
            format!("{:.1}", r.mb_per_s),
            format!("{:.2}x", base / r.elapsed_s.max(1e-9)),
        ]);
    }
    print!("{}", render::table(&rows));
    Ok(render::exit_code(errors))
}

/// `evict --trace` / `load --trace`.
pub fn cache_verb(
    verb: &str,
    path: &Path,
    json: bool,
    f: impl FnOnce(&Trace) -> TraceCacheReport,
) -> Result<i32, String> {
    let t = load_trace(path)?;
    let r = f(&t);
    if json {
        render::print_json(&r);
    } else {
        render::report_problems(verb, &r.errors, r.error_count, &[]);
        println!(
            "{} traced ranges in {} files ({} gone): {} traced, cached {} before, {} after, {:.3} s",
            r.ranges,
            r.files,
            r.files_missing,
            bytes(r.bytes),
            bytes(r.cached_bytes_before),
            bytes(r.cached_bytes_after),
            r.elapsed_s
        );
    }
    Ok(render::exit_code(r.error_count))
}

/// `pagewise run`.
pub fn run_cmd(a: RunArgs) -> Result<i32, String> {
    let opts = pagewise_core::run::RunOptions {
        max_cache: a.max_cache,
        keep_written: a.keep_written,
        buffer_kb: a.buffer_kb,
        backend: backend(a.backend),
        assist: a
            .assist
            .then(|| super::assist::options(&a.tuning, a.buffer_kb)),
    };
    let r = pagewise_core::run::run(&a.command, &opts).map_err(|e| format!("run: {e}"))?;
    let page = pagewise_core::sys::page_size();
    for n in &r.notices {
        eprintln!("pagewise run: note: {n}");
    }
    if let Some(path) = &a.report {
        let json = serde_json::to_vec_pretty(&r).map_err(|e| e.to_string())?;
        std::fs::write(path, json).map_err(|e| format!("{}: write failed: {e}", path.display()))?;
    } else {
        render::report_problems("run", &r.errors, r.error_count, &[]);
        eprintln!(
            "pagewise run: the command brought {} into the page cache; dropped {}, {} left ({} dirty, {} mapped or busy){}{}; {} files, {:.2} s",
            bytes(r.pages_added * page),
            bytes(r.pages_dropped * page),
            bytes(r.pages_left * page),
            bytes(r.pages_left_dirty * page),
            bytes(r.pages_left_mapped_or_busy * page),
            if r.pages_kept_written > 0 { format!(", {} of written files kept", bytes(r.pages_kept_written * page)) } else { String::new() },
            if r.lost_events > 0 { format!("; WARNING: {} events lost (raise --buffer-kb)", r.lost_events) } else { String::new() },
            r.files,
            r.elapsed_s
        );
        if let Some(ar) = &r.assist {
            super::assist::print_live(ar);
        }
    }
    Ok(r.exit_code)
}
