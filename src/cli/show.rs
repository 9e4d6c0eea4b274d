//! `pagewise show`: a recorded trace as text or JSON.

use super::output::Output;
use super::trace_io::{load_trace, write_trace, TraceFormat};
use clap::{Args, ValueEnum};
use pagewise_core::trace;
use std::path::{Path, PathBuf};

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

pub fn run(a: ShowArgs) -> Result<i32, String> {
    let t = load_trace(&a.trace)?;
    write_trace(&t, a.format.into(), Output::open(Path::new("-"))?)?;
    if !matches!(a.format, ShowFormat::Json) && t.files.iter().any(|f| f.path.is_none()) {
        eprintln!("pagewise show: note: {}", trace::UNNAMED_LEGEND);
    }
    Ok(0)
}
