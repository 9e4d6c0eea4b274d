//! Human rendering helpers: sizes, tables, error lists, notices.

use pagewise_core::FileError;
use std::io::Write;

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

/// Bytes, or `?` when unknown.
pub fn opt_bytes(pages: Option<u64>, page: u64) -> String {
    pages.map_or_else(|| "?".to_string(), |p| bytes(p * page))
}

/// A residency bar: one character per cell (`' '` none, `.` some, `o` half, `O` full, `?`).
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

/// A plain text table: first row is the header; numeric columns (all but the first) right-aligned.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut w = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i == 0 {
                line.push_str(&format!("{c:<width$}", width = w[0]));
            } else {
                line.push_str(&format!("  {c:>width$}", width = w[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Prints per-file errors and notices to stderr, prefixed with the verb.
pub fn report_problems(verb: &str, errors: &[FileError], error_count: u64, notices: &[String]) {
    let mut e = std::io::stderr().lock();
    for n in notices {
        let _ = writeln!(e, "pagewise {verb}: note: {n}");
    }
    for err in errors {
        let _ = writeln!(e, "pagewise {verb}: {err}");
    }
    let shown = errors.len() as u64;
    if error_count > shown {
        let _ = writeln!(
            e,
            "pagewise {verb}: ... and {} more errors",
            error_count - shown
        );
    }
    if error_count > 0 {
        let _ = writeln!(e, "pagewise {verb}: {error_count} file(s) failed");
    }
}

/// Exit code for a finished verb.
pub fn exit_code(error_count: u64) -> i32 {
    if error_count > 0 {
        2
    } else {
        0
    }
}

/// Writes a JSON value (one document) to stdout.
pub fn print_json<T: serde::Serialize>(v: &T) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer_pretty(&mut out, v);
    let _ = writeln!(out);
}

/// Writes one JSON line to stdout, tagged with `type`.
pub fn print_json_line<T: serde::Serialize>(kind: &str, v: &T) {
    let mut val = serde_json::to_value(v).unwrap_or(serde_json::Value::Null);
    if let serde_json::Value::Object(m) = &mut val {
        m.insert("type".into(), kind.into());
    }
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, &val);
    let _ = writeln!(out);
}

/// Ends a `--json-lines` stream: one line per error, then the summary.
pub fn print_stream_end<T: serde::Serialize>(errors: &[FileError], summary: &T) {
    for e in errors {
        print_json_line("error", e);
    }
    print_json_line("summary", summary);
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn tables_align() {
        let t = table(&[
            vec!["PATH".into(), "SIZE".into()],
            vec!["a".into(), "10 B".into()],
        ]);
        assert_eq!(t, "PATH  SIZE\na     10 B\n");
    }
}
