//! `record`, `show`, `replay`, and the trace side of `evict`/`load`.

use super::output::Output;
use super::render::{self, bytes, path_text};
use super::{OrderArg, RecordArgs, ReplayArgs, RunArgs, ShowArgs, ShowFormat, TraceFormat};
use pagewise_core::replay::{self, Order, ReplayOptions, SkippedFile, TraceCacheReport};
use pagewise_core::trace::{self, Backend, RecordOptions, Trace};
use std::path::Path;

/// Reads and validates a trace file.
pub fn load_trace(path: &Path) -> Result<Trace, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: read failed: {e}", path_text(path)))?;
    Trace::from_bytes(&data).map_err(|e| format!("{}: {e}", path_text(path)))
}

/// Writes a trace in `format` to an output opened beforehand.
fn write_trace(t: &Trace, format: TraceFormat, out: Output) -> Result<(), String> {
    out.write(|w| match format {
        TraceFormat::Binary => w.write_all(&t.to_bytes()),
        TraceFormat::Text => trace::write_text(t, false, w),
        TraceFormat::Grouped => trace::write_text(t, true, w),
        TraceFormat::Json => serde_json::to_writer_pretty(&mut *w, t)
            .map_err(std::io::Error::other)
            .and_then(|_| writeln!(w)),
    })
}

fn backend(b: super::BackendArg) -> Backend {
    match b {
        super::BackendArg::Auto => Backend::Auto,
        super::BackendArg::Perf => Backend::Perf,
        super::BackendArg::Tracefs => Backend::Tracefs,
    }
}

/// A library error of `record` / `run`: the message, and the exit status a shell would give
/// (127 / 126 when the command could not be started).
fn command_error(verb: &str, e: pagewise_core::Error) -> i32 {
    eprintln!("pagewise {verb}: {e}");
    e.exit_code()
}

pub fn run(a: RecordArgs) -> Result<i32, String> {
    // The output first: a bad path is found before the command runs.
    let out = Output::open(&a.output)?;
    let rec = match trace::record(
        &a.command,
        &RecordOptions {
            buffer_kb: a.buffer_kb,
            faults: a.faults,
            backend: backend(a.backend),
        },
    ) {
        Ok(r) => r,
        Err(e) => return Ok(command_error("record", e)),
    };
    let (t, status, source) = (rec.trace, rec.status, rec.source);
    // The trace first, then the words about it.
    write_trace(&t, a.format, out)?;
    for n in &rec.notices {
        eprintln!("pagewise record: note: {n}");
    }
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
            format!(" -> {}", path_text(&a.output))
        } else {
            String::new()
        }
    );
    Ok(super::exit::of_status(status))
}

pub fn show(a: ShowArgs) -> Result<i32, String> {
    let t = load_trace(&a.trace)?;
    let format = match a.format {
        ShowFormat::Text => TraceFormat::Text,
        ShowFormat::Grouped => TraceFormat::Grouped,
        ShowFormat::Json => TraceFormat::Json,
    };
    write_trace(&t, format, Output::open(Path::new("-"))?)?;
    if !matches!(a.format, ShowFormat::Json) && t.files.iter().any(|f| f.path.is_none()) {
        eprintln!("pagewise show: note: {}", trace::UNNAMED_LEGEND);
    }
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
    if let Some(r) = reports.first() {
        render::report_problems("replay", &r.errors, r.error_count, &[]);
        skipped_note("replay", r.files_missing, &r.skipped);
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

/// Notes the traced files that were skipped, each with its reason.
fn skipped_note(verb: &str, count: u64, skipped: &[SkippedFile]) {
    if count == 0 {
        return;
    }
    eprintln!("pagewise {verb}: note: {count} traced file(s) skipped:");
    for s in skipped {
        eprintln!("pagewise {verb}:   {}: {}", path_text(&s.path), s.reason);
    }
    if count > skipped.len() as u64 {
        eprintln!(
            "pagewise {verb}:   ... and {} more",
            count - skipped.len() as u64
        );
    }
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
        skipped_note(verb, r.files_missing, &r.skipped);
        println!(
            "{} traced ranges in {} files ({} skipped): {} traced, cached {} before, {} after{}, {:.3} s",
            r.ranges,
            r.files,
            r.files_missing,
            bytes(r.bytes),
            render::partial_bytes(r.cached_bytes_before, r.files, r.unknown_files),
            render::partial_bytes(r.cached_bytes_after, r.files, r.unknown_files),
            if r.dry_run { " (dry run: nothing dropped)" } else { "" },
            r.elapsed_s
        );
        if let Some(why) = r.unknown_reason {
            eprintln!(
                "pagewise {verb}: note: {} of {} files: residency unknown (figures marked >= leave them out): {why}",
                r.unknown_files, r.files
            );
        }
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
    // The report file first: a bad path is found before the command runs.
    let report_out = a.report.as_deref().map(Output::open).transpose()?;
    let r = match pagewise_core::run::run(&a.command, &opts) {
        Ok(r) => r,
        Err(e) => return Ok(command_error("run", e)),
    };
    if let Some(out) = report_out {
        out.write(|w| {
            serde_json::to_writer_pretty(&mut *w, &r)
                .map_err(std::io::Error::other)
                .and_then(|_| writeln!(w))
        })?;
    }
    for n in &r.notices {
        eprintln!("pagewise run: note: {n}");
    }
    if a.report.is_none() {
        render::report_problems("run", &r.errors, r.error_count, &[]);
        eprintln!(
            "pagewise run: the command brought {} into the page cache{}; dropped {}, {} left ({} dirty, {} mapped or busy){}{}; {} files, {:.2} s",
            bytes(r.added_bytes),
            r.prefetched_bytes.map_or_else(String::new, |p| format!(" and --assist prefetched {}", bytes(p))),
            bytes(r.dropped_bytes),
            bytes(r.left_bytes),
            bytes(r.left_dirty_bytes),
            bytes(r.left_mapped_or_busy_bytes),
            if r.kept_written_bytes > 0 { format!(", {} of written files kept", bytes(r.kept_written_bytes)) } else { String::new() },
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
