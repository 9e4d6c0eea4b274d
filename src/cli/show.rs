//! `pagewise show`: a recorded trace as text or JSON.

use super::exit::{CliError, ExitCode};
use super::out_file::OutFile;
use super::render;
use super::trace_file::{load_trace, write_trace, TraceFormat};
use clap::{Args, ValueEnum};
use pagewise_core::trace;
use std::path::{Path, PathBuf};

/// The `pagewise show --help` epilogue: examples, notes and exit codes.
pub const EXAMPLES: &str = "\
Examples:
  pagewise show app.trace                    merged runs: time path offset length
  pagewise show --format text app.trace      one line per page
  pagewise show --format json app.trace | jq '.files[].path'

<MAJOR:MINOR inode N> names a file recorded without a path: deleted by the end of the
recording, or on a filesystem with no mount point (pipes, memfd, shared memory). Paths are
printed with control characters and non-UTF-8 bytes as \\xHH; JSON keeps the bytes.";

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShowFormat {
    /// One line per page: time path offset
    Text,
    /// Contiguous pages merged: time path offset length
    Grouped,
    /// The whole trace as one JSON document (schema: docs/json.md)
    Json,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// A trace written by `pagewise record`
    pub trace: PathBuf,
    /// How to print it
    #[arg(long, value_enum, default_value_t = ShowFormat::Grouped)]
    pub format: ShowFormat,
}

impl From<ShowFormat> for TraceFormat {
    fn from(f: ShowFormat) -> TraceFormat {
        match f {
            ShowFormat::Text => TraceFormat::Text,
            ShowFormat::Grouped => TraceFormat::Grouped,
            ShowFormat::Json => TraceFormat::Json,
        }
    }
}

/// Most lines `show --format text` prints (one per page): 2^32, 16 TiB of 4 KiB pages. A
/// trace may claim 2^20 pages per 28-byte event; beyond this the grouped view says the same
/// in a line per run.
const MAX_TEXT_LINES: u64 = 1 << 32;

/// `pagewise show`.
pub fn run(a: ShowArgs) -> Result<ExitCode, CliError> {
    let t = load_trace(&a.trace)?;
    let pages = t
        .events
        .iter()
        .fold(0u64, |n, e| n.saturating_add(e.pages as u64));
    if a.format == ShowFormat::Text && pages > MAX_TEXT_LINES {
        return Err(CliError::Message(format!(
            "{}: {pages} pages: more than the {MAX_TEXT_LINES} lines --format text prints \
             (one per page); --format grouped prints one line per run of them",
            render::path_text(&a.trace)
        )));
    }
    write_trace(&t, a.format.into(), OutFile::open(Path::new("-"))?)?;
    if !matches!(a.format, ShowFormat::Json) && t.files.iter().any(|f| f.path.is_none()) {
        eprintln!("pagewise show: note: {}", trace::UNNAMED_LEGEND);
    }
    Ok(ExitCode::Success)
}

#[cfg(test)]
mod tests {
    //! The text views of a hand-made trace: no kernel involved.
    use super::*;
    use crate::cli::trace_file::{render_trace, sample_trace};

    fn show(format: ShowFormat) -> String {
        let mut out = Vec::new();
        render_trace(&mut out, &sample_trace(), format.into()).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn grouped_merges_contiguous_pages() {
        assert_eq!(
            show(ShowFormat::Grouped),
            "# pagewise trace v2: 5 events, 3 files, 36864 bytes, 0 lost events; command: cat a b\n\
             # time_s path offset length\n\
             0.000001 /data/a 0 12288\n\
             0.000003 /data/new\\x0aline 32768 4096\n\
             0.000004 /data/a 12288 4096\n\
             0.000005 <8:1 inode 13> 0 16384\n"
        );
    }

    #[test]
    fn text_has_one_line_per_page() {
        assert_eq!(
            show(ShowFormat::Text),
            "# pagewise trace v2: 5 events, 3 files, 36864 bytes, 0 lost events; command: cat a b\n\
             # time_s path offset\n\
             0.000001 /data/a 0\n\
             0.000002 /data/a 4096\n\
             0.000002 /data/a 8192\n\
             0.000003 /data/new\\x0aline 32768\n\
             0.000004 /data/a 12288\n\
             0.000005 <8:1 inode 13> 0\n\
             0.000005 <8:1 inode 13> 4096\n\
             0.000005 <8:1 inode 13> 8192\n\
             0.000005 <8:1 inode 13> 12288\n"
        );
    }

    #[test]
    fn json_keeps_the_name_bytes() {
        let v: serde_json::Value = serde_json::from_str(&show(ShowFormat::Json)).unwrap();
        assert_eq!(v["files"][1]["path"], "/data/new\nline");
        assert_eq!(v["files"][2]["path"], serde_json::Value::Null);
        assert_eq!(v["events"].as_array().unwrap().len(), 5);
    }
}
