//! Where a verb's results go, chosen once from its flags: text for people (tables, summaries,
//! problems on stderr), one JSON document (`--json`), or JSON lines streamed as items finish
//! (`--json-lines`: one object per item, then a line per error and the summary). A verb hands
//! its items and its report here with its own text renderer and never branches on the format
//! itself (as ripgrep's `Printer`, hyperfine's exporters).

use pagewise_core::FileError;
use serde::Serialize;
use std::io::Write;

/// The output format of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
    JsonLines,
}

impl Output {
    /// From a verb's `--json` and `--json-lines` flags (clap keeps them exclusive).
    pub fn of(json: bool, json_lines: bool) -> Output {
        match (json, json_lines) {
            (_, true) => Output::JsonLines,
            (true, false) => Output::Json,
            (false, false) => Output::Text,
        }
    }

    /// For people: progress lines and text renderers run.
    pub fn is_text(self) -> bool {
        self == Output::Text
    }

    /// Items go out one by one as they finish (the verb must hand each to [`Output::item`]).
    pub fn streams(self) -> bool {
        self == Output::JsonLines
    }

    /// One finished item (a file, an entry, an interval): a JSON line tagged `kind` when
    /// streaming; with text, `text` renders it; a JSON document holds items in its report.
    pub fn item<T: Serialize>(self, kind: &str, item: &T, text: impl FnOnce(&T)) {
        match self {
            Output::JsonLines => json_line(kind, item),
            Output::Text => text(item),
            Output::Json => {}
        }
    }

    /// The verb's report: `text` renders it; one JSON document; or, ending a stream, a line
    /// per error and the summary.
    pub fn report<R: Serialize>(self, report: &R, errors: &[FileError], text: impl FnOnce(&R)) {
        self.report_with(report, errors, "", None::<&()>, text);
    }

    /// [`Output::report`], the JSON document given `extra` under `key` (the items a verb kept
    /// for it: `stat -l`'s files, `top`'s intervals).
    pub fn report_with<R: Serialize, X: Serialize>(
        self,
        report: &R,
        errors: &[FileError],
        key: &str,
        extra: Option<&X>,
        text: impl FnOnce(&R),
    ) {
        match self {
            Output::Text => text(report),
            Output::JsonLines => {
                for e in errors {
                    json_line("error", e);
                }
                json_line("summary", report);
            }
            Output::Json => {
                let mut v = serde_json::to_value(report).unwrap_or_default();
                if let (Some(x), serde_json::Value::Object(m)) = (extra, &mut v) {
                    m.insert(key.into(), serde_json::to_value(x).unwrap_or_default());
                }
                document(&v);
            }
        }
    }

    /// A report that has no stream form (`evict --cgroup`, `cgroups`, `replay`, `assist`):
    /// `text` renders it, else it is one JSON document (also under `--json-lines`).
    pub fn document<R: Serialize>(self, report: &R, text: impl FnOnce(&R)) {
        match self {
            Output::Text => text(report),
            Output::Json | Output::JsonLines => document(report),
        }
    }
}

/// One JSON document on stdout.
fn document<T: Serialize>(v: &T) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer_pretty(&mut out, v);
    let _ = writeln!(out);
}

/// One JSON line on stdout, tagged with `type` and `time`.
fn json_line<T: Serialize>(kind: &str, v: &T) {
    let mut val = serde_json::to_value(v).unwrap_or(serde_json::Value::Null);
    if let serde_json::Value::Object(m) = &mut val {
        m.insert("type".into(), kind.into());
        m.insert(
            "time".into(),
            super::render::utc(std::time::SystemTime::now()).into(),
        );
    }
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, &val);
    let _ = writeln!(out);
}

#[cfg(test)]
mod tests {
    use super::Output;

    #[test]
    fn the_format_is_chosen_once_from_the_flags() {
        assert_eq!(Output::of(false, false), Output::Text);
        assert_eq!(Output::of(true, false), Output::Json);
        assert_eq!(Output::of(false, true), Output::JsonLines);
        assert!(Output::Text.is_text() && !Output::Json.is_text());
        assert!(Output::JsonLines.streams() && !Output::Json.streams());
        let mut seen = 0;
        Output::Text.item("file", &1, |_| seen += 1);
        Output::Json.item("file", &1, |_| seen += 10);
        assert_eq!(
            seen, 1,
            "text renders items; a document holds them in its report"
        );
    }
}
