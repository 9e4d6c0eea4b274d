//! Human rendering helpers: sizes, tables, error lists, notices.

use pagewise_core::cgroup::FileCache;
use pagewise_core::FileError;
use std::io::Write;

/// The page-cache columns of a cgroup table (`cgroups`, `evict --cgroup`).
const FILE_CACHE_COLUMNS: [&str; 6] =
    ["FILE", "DIRTY", "WRITEBACK", "MAPPED", "ACTIVE", "INACTIVE"];

/// The header of a cgroup table: `first`, the page-cache columns, then `last`.
pub fn file_cache_header(first: &str, last: &[&str]) -> Vec<String> {
    std::iter::once(first)
        .chain(FILE_CACHE_COLUMNS)
        .chain(last.iter().copied())
        .map(str::to_string)
        .collect()
}

/// A row of a cgroup table: `name`, then the file, dirty, writeback, mapped, active and
/// inactive bytes of `c`.
pub fn file_cache_row(name: String, c: &FileCache) -> Vec<String> {
    vec![
        name,
        bytes(c.file_bytes),
        bytes(c.dirty_bytes),
        bytes(c.writeback_bytes),
        bytes(c.mapped_bytes),
        bytes(c.active_bytes),
        bytes(c.inactive_bytes),
    ]
}

/// `; WARNING: N events lost (raise --buffer-kb)` when the kernel lost events, else nothing.
pub fn lost_events_warning(lost: u64) -> String {
    if lost > 0 {
        format!("; WARNING: {lost} events lost (raise --buffer-kb)")
    } else {
        String::new()
    }
}

/// `1.5 GiB`, `12 KiB`, `0 B`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Bytes, or `unknown` when the kernel cannot tell.
pub fn opt_bytes(b: Option<u64>) -> String {
    b.map_or_else(|| "unknown".to_string(), bytes)
}

/// A total over files of which `unknown` of `files` could not be measured: the sum of the
/// others, marked `>=` (the unknown ones hold some more, or none), or `unknown` when none could.
pub fn partial_bytes(known: u64, files: u64, unknown: u64) -> String {
    if unknown == 0 {
        bytes(known)
    } else if unknown >= files {
        "unknown".into()
    } else {
        format!(">={}", bytes(known))
    }
}

/// The `--map` legend, also printed under every map.
pub const MAP_LEGEND: &str =
    "map: one cell per 1/WIDTH of the range; ' ' none cached, '.' under 34%, 'o' under 100%, \
     'O' all, '?' unknown";

/// A residency bar: one character per cell (`' '` none, `.` some (any page, even one), `o`
/// from 34%, `O` full, `?` unknown).
pub fn map_bar(cells: &[Option<u8>]) -> String {
    let mut s = String::with_capacity(cells.len() + 2);
    s.push('[');
    for c in cells {
        s.push(match c {
            None => '?',
            Some(0) => ' ',
            Some(p) if *p < 34 => '.',
            Some(p) if *p < 100 => 'o',
            Some(_) => 'O',
        });
    }
    s.push(']');
    s
}

/// A path for a table or a text line: control characters (newline, tab, escape...) and bytes
/// that are not UTF-8 become `\xHH`, as fincore and ls show them, so one name is one line and
/// a terminal is never driven by a file name. JSON carries the exact bytes instead.
pub fn path_text(p: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    escape_bytes(p.as_os_str().as_bytes())
}

/// [`path_text`] for raw bytes.
pub fn escape_bytes(b: &[u8]) -> String {
    pagewise_core::names::escape(b)
}

/// Columns a string takes on a terminal (wide characters count two).
fn width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

fn pad(s: &str, w: usize, left: bool) -> String {
    let fill = " ".repeat(w.saturating_sub(width(s)));
    if left {
        format!("{s}{fill}")
    } else {
        format!("{fill}{s}")
    }
}

/// A plain text table: first row is the header; numeric columns (all but the first) right-aligned.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut w = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(width(c));
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i == 0 {
                line.push_str(&pad(c, w[0], true));
            } else {
                line.push_str("  ");
                line.push_str(&pad(c, w[i], false));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Prints per-file errors and notices to stderr, prefixed with the verb.
pub fn report_problems(verb: &str, errors: &[FileError], error_count: u64, notices: &[String]) {
    let _ = write_problems(
        &mut std::io::stderr().lock(),
        verb,
        errors,
        error_count,
        notices,
    );
}

/// Writes the notices, then the per-file errors (and how many more were only counted), each
/// line prefixed with `pagewise VERB:`.
pub fn write_problems(
    w: &mut dyn Write,
    verb: &str,
    errors: &[FileError],
    error_count: u64,
    notices: &[String],
) -> std::io::Result<()> {
    for n in notices {
        writeln!(w, "pagewise {verb}: note: {n}")?;
    }
    for err in errors {
        writeln!(w, "pagewise {verb}: {}", error_text(err))?;
    }
    let shown = errors.len() as u64;
    if error_count > shown {
        writeln!(
            w,
            "pagewise {verb}: ... and {} more errors",
            error_count - shown
        )?;
    }
    if error_count > 0 {
        writeln!(w, "pagewise {verb}: {error_count} file(s) failed")?;
    }
    Ok(())
}

/// A per-file error as a line, the path escaped: `cannot create 'PATH': MESSAGE (SYSCALL)` for
/// a step that writes to a destination, else `PATH: SYSCALL failed: MESSAGE`.
pub fn error_text(e: &FileError) -> String {
    match e.op.plain_words() {
        Some(words) => format!(
            "{words} '{}': {} ({})",
            path_text(&e.path),
            e.plain_message(),
            e.op
        ),
        None => format!("{}: {} failed: {}", path_text(&e.path), e.op, e.message),
    }
}

/// A time as RFC 3339 in UTC with milliseconds: `2026-11-26T15:20:01.123Z`.
pub fn utc(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (year, month, day) = pagewise_build_info::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The report of `assist -p` and `run --assist`: one line.
pub fn write_assist_summary(
    w: &mut dyn Write,
    r: &pagewise_core::assist::AssistReport,
) -> std::io::Result<()> {
    writeln!(
        w,
        "pagewise assist: {} faults ({} misses, {} on prefetched pages); {} prefetches ({} range, {} sequential, {} stride) of {}, ~{} wasted; fault-to-prefetch latency p50 {} us, p90 {} us, p99 {} us (reads queued by p50 {} us, p99 {} us); {} files{}{}{}",
        r.faults,
        r.misses,
        r.faults_on_prefetched,
        r.prefetches,
        r.prefetches_range,
        r.prefetches_sequential,
        r.prefetches_stride,
        bytes(r.prefetched_bytes),
        bytes(r.wasted_bytes_estimate),
        r.issue_latency_us_p50,
        r.issue_latency_us_p90,
        r.issue_latency_us_p99,
        r.submit_latency_us_p50,
        r.submit_latency_us_p99,
        r.files,
        if r.files_unreachable > 0 {
            format!(" ({} unreachable)", r.files_unreachable)
        } else {
            String::new()
        },
        lost_events_warning(r.lost_events),
        match r.source {
            Some(pagewise_core::trace::Source::PerfFaults) => {
                "; faults sampled (perf software events: no mm_filemap_fault tracepoint)"
            }
            Some(pagewise_core::trace::Source::Perf) => "; faults traced (perf)",
            Some(pagewise_core::trace::Source::Tracefs) => "; faults traced (tracefs)",
            None => "",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times() {
        use std::time::{Duration, UNIX_EPOCH};
        let t = |s| utc(UNIX_EPOCH + Duration::from_millis(s));
        assert_eq!(t(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(t(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(t(1_795_708_801_123), "2026-11-26T16:00:01.123Z");
    }

    #[test]
    fn sizes_render() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(4 << 30), "4.0 GiB");
        assert_eq!(bytes(200 << 20), "200 MiB");
    }

    #[test]
    fn bars_render() {
        assert_eq!(
            map_bar(&[Some(0), Some(10), Some(50), Some(100), None]),
            "[ .oO?]"
        );
    }

    #[test]
    fn names_are_escaped_for_tables() {
        use std::os::unix::ffi::OsStrExt;
        let p = std::path::Path::new(std::ffi::OsStr::from_bytes(b"a\nb\xff\x1b[31mc"));
        assert_eq!(path_text(p), "a\\x0ab\\xff\\x1b[31mc");
        assert_eq!(path_text(std::path::Path::new("é/日本")), "é/日本");
    }

    #[test]
    fn wide_names_align_by_display_width() {
        let t = table(&[
            vec!["PATH".into(), "SIZE".into()],
            vec!["日本".into(), "1 B".into()],
            vec!["ab".into(), "2 B".into()],
        ]);
        assert_eq!(t, "PATH  SIZE\n日本   1 B\nab     2 B\n");
    }

    #[test]
    fn partial_totals_say_what_is_known() {
        assert_eq!(partial_bytes(2048, 3, 0), "2.0 KiB");
        assert_eq!(partial_bytes(2048, 3, 1), ">=2.0 KiB");
        assert_eq!(partial_bytes(0, 3, 3), "unknown");
    }

    #[test]
    fn tables_align() {
        let t = table(&[
            vec!["PATH".into(), "SIZE".into()],
            vec!["a".into(), "10 B".into()],
        ]);
        assert_eq!(t, "PATH  SIZE\na     10 B\n");
    }

    fn text(f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> String {
        let mut out = Vec::new();
        f(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn problems_list_notes_errors_and_the_uncounted_rest() {
        let errors = [
            FileError::io(
                std::path::Path::new("/data/a\nb"),
                pagewise_core::Op::FadviseDontneed,
                &std::io::Error::from_raw_os_error(5),
            ),
            FileError::other(
                std::path::Path::new("/data/c"),
                pagewise_core::Op::VerifyContent,
                "content differs from the source",
            ),
        ];
        let notes = ["cachestat missing: mincore used".to_string()];
        assert_eq!(
            text(|w| write_problems(w, "evict", &errors, 5, &notes)),
            "pagewise evict: note: cachestat missing: mincore used\n\
             pagewise evict: /data/a\\x0ab: fadvise(DONTNEED) failed: Input/output error (os \
             error 5)\n\
             pagewise evict: /data/c: verify failed: content differs from the source\n\
             pagewise evict: ... and 3 more errors\n\
             pagewise evict: 5 file(s) failed\n"
        );
        assert_eq!(text(|w| write_problems(w, "evict", &[], 0, &[])), "");
    }

    fn assist_report() -> pagewise_core::assist::AssistReport {
        pagewise_core::assist::AssistReport {
            faults: 5000,
            misses: 1200,
            faults_on_prefetched: 800,
            prefetches: 64,
            prefetches_range: 40,
            prefetches_sequential: 20,
            prefetches_stride: 4,
            prefetched_bytes: 200 << 20,
            wasted_bytes_estimate: 3 << 20,
            issue_latency_us_p50: 18.0,
            issue_latency_us_p90: 55.5,
            issue_latency_us_p99: 210.125,
            files: 7,
            ..Default::default()
        }
    }

    #[test]
    fn assist_summary_line() {
        assert_eq!(
            text(|w| write_assist_summary(w, &assist_report())),
            "pagewise assist: 5000 faults (1200 misses, 800 on prefetched pages); 64 prefetches \
             (40 range, 20 sequential, 4 stride) of 200 MiB, ~3.0 MiB wasted; fault-to-prefetch \
             latency p50 18 us, p90 55.5 us, p99 210.125 us (reads queued by p50 0 us, p99 0 us); 7 \
             files\n"
        );
    }

    #[test]
    fn assist_summary_names_unreachable_files_and_lost_events() {
        let r = pagewise_core::assist::AssistReport {
            files_unreachable: 2,
            lost_events: 9,
            ..assist_report()
        };
        assert_eq!(
            text(|w| write_assist_summary(w, &r)),
            "pagewise assist: 5000 faults (1200 misses, 800 on prefetched pages); 64 prefetches \
             (40 range, 20 sequential, 4 stride) of 200 MiB, ~3.0 MiB wasted; fault-to-prefetch \
             latency p50 18 us, p90 55.5 us, p99 210.125 us (reads queued by p50 0 us, p99 0 us); 7 \
             files (2 unreachable); WARNING: 9 \
             events lost (raise --buffer-kb)\n"
        );
    }

    #[test]
    fn assist_summary_says_how_faults_were_followed() {
        use pagewise_core::trace::Source;
        let line = |source| {
            let r = pagewise_core::assist::AssistReport {
                source,
                ..assist_report()
            };
            text(|w| write_assist_summary(w, &r))
        };
        assert!(line(Some(Source::PerfFaults)).ends_with(
            "7 files; faults sampled (perf software events: no mm_filemap_fault tracepoint)\n"
        ));
        assert!(line(Some(Source::Perf)).ends_with("7 files; faults traced (perf)\n"));
        assert!(line(Some(Source::Tracefs)).ends_with("7 files; faults traced (tracefs)\n"));
    }
}
