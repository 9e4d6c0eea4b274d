//! Trace files: read one (bounded, refused before it is read when too large), write one in a
//! format. Used by `record`, `show`, `replay`, `assist --simulate`, `evict --trace` and
//! `load --trace`.

use super::exit::CliError;
use super::out_file::OutFile;
use super::render::path_text;
use clap::ValueEnum;
use pagewise_core::trace::{self, Trace};
use std::io::Write;
use std::path::Path;

/// How a trace is written (`record --format`; `show` offers the text ones).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// The versioned binary trace (for replay, evict --trace, load --trace)
    Binary,
    /// One line per page: time path offset
    Text,
    /// Contiguous pages merged: time path offset length
    Grouped,
    /// JSON document
    Json,
}

/// Reads and validates a trace file.
pub fn load_trace(path: &Path) -> Result<Trace, CliError> {
    let data = read_trace_file(path)?;
    Trace::from_bytes(&data).map_err(|e| CliError::about(path_text(path), e))
}

/// The bytes of a trace file (or a pipe), at most [`trace::format::MAX_TRACE_BYTES`]: a
/// larger file, or a pipe that goes on, is refused before it is read into memory; the memory
/// is reserved fallibly.
fn read_trace_file(path: &Path) -> Result<Vec<u8>, CliError> {
    use std::io::Read;
    const MAX: u64 = trace::format::MAX_TRACE_BYTES;
    let too_large = |what: String| {
        CliError::Message(format!(
            "{}: trace too large: {what}, larger than the {MAX} bytes (1 GiB) a trace may be",
            path_text(path)
        ))
    };
    let no_memory = |n: usize| {
        CliError::Message(format!(
            "{}: cannot read the trace: no memory for {n} bytes",
            path_text(path)
        ))
    };
    let mut f =
        std::fs::File::open(path).map_err(|e| CliError::file(path_text(path), "open", e))?;
    let meta = f
        .metadata()
        .map_err(|e| CliError::file(path_text(path), "fstat", e))?;
    if meta.is_file() && meta.len() > MAX {
        return Err(too_large(format!("{} bytes", meta.len())));
    }
    let mut data: Vec<u8> = Vec::new();
    let first = if meta.is_file() {
        meta.len() as usize
    } else {
        0
    };
    data.try_reserve(first).map_err(|_| no_memory(first))?;
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CliError::file(path_text(path), "read", e)),
        };
        if (data.len() + n) as u64 > MAX {
            return Err(too_large(format!("more than {MAX} bytes")));
        }
        data.try_reserve(n).map_err(|_| no_memory(data.len() + n))?;
        data.extend_from_slice(&chunk[..n]);
    }
    Ok(data)
}

/// Writes a trace in `format` to an output opened beforehand.
pub fn write_trace(t: &Trace, format: TraceFormat, out: OutFile) -> Result<(), CliError> {
    out.write(|w| render_trace(w, t, format))
}

/// Writes a trace in `format`: the binary file, text per page or grouped, or JSON.
pub fn render_trace(w: &mut dyn Write, t: &Trace, format: TraceFormat) -> std::io::Result<()> {
    match format {
        TraceFormat::Binary => w.write_all(&t.to_bytes()),
        TraceFormat::Text => trace::write_text(t, false, w),
        TraceFormat::Grouped => trace::write_text(t, true, w),
        TraceFormat::Json => serde_json::to_writer_pretty(&mut *w, t)
            .map_err(std::io::Error::other)
            .and_then(|_| writeln!(w)),
    }
}

/// A small hand-made trace for the renderers' tests: a named file, a name with a newline in
/// it, and a file recorded without a path.
#[cfg(test)]
pub fn sample_trace() -> Trace {
    use pagewise_core::trace::{Event, TraceFile};
    let file = |ino: u64, path: Option<&str>| TraceFile {
        dev_major: 8,
        dev_minor: 1,
        ino,
        size: 1 << 20,
        path: path.map(String::from),
        path_bytes: path.map(|p| p.as_bytes().to_vec()),
        deleted: false,
        handle: None,
    };
    let event = |ts_ns: u64, file: u32, index: u64, pages: u32| Event {
        ts_ns,
        file,
        pid: 42,
        index,
        pages,
    };
    Trace {
        page_size: 4096,
        duration_ns: 1_500_000_000,
        command: vec!["cat".into(), "a b".into()],
        files: vec![
            file(11, Some("/data/a")),
            file(12, Some("/data/new\nline")),
            file(13, None),
        ],
        events: vec![
            event(1_000, 0, 0, 1),
            event(2_000, 0, 1, 2),
            event(3_000, 1, 8, 1),
            event(4_000, 0, 3, 1),
            event(5_000, 2, 0, 4),
        ],
        ..Trace::default()
    }
}
