//! A trace as text: one line per page, or contiguous pages merged (`show`, `record --format`).

use super::Trace;

/// One merged run of pages of a file: `(file, first page, pages, first time)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Run {
    /// Index into [`Trace::files`].
    pub file: u32,
    /// First page.
    pub index: u64,
    /// Pages in the run.
    pub pages: u64,
    /// Time of its first event, ns since the recording started.
    pub ts_ns: u64,
}

/// Consecutive events (in time order) on the same file with contiguous pages, merged: the
/// grouped view of the original experiments.
pub fn grouped(trace: &Trace) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for e in &trace.events {
        if let Some(last) = out.last_mut() {
            if last.file == e.file && last.index.checked_add(last.pages) == Some(e.index) {
                last.pages += e.pages as u64;
                continue;
            }
        }
        out.push(Run {
            file: e.file,
            index: e.index,
            pages: e.pages as u64,
            ts_ns: e.ts_ns,
        });
    }
    out
}

/// Writes the trace as text: `time path offset` per page, or grouped `time path offset length`.
pub fn write_text(
    trace: &Trace,
    grouped_view: bool,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let page = trace.page_size as u64;
    let names: Vec<String> = trace.files.iter().map(|f| f.display()).collect();
    // A checked trace names only its files; a hand-built one is printed all the same.
    let name = |f: u32| {
        names
            .get(f as usize)
            .map_or("<no such file>", String::as_str)
    };
    writeln!(
        out,
        "# pagewise trace v{}: {} events, {} files, {} bytes, {} lost events; command: {}",
        trace.version,
        trace.events.len(),
        trace.files.len(),
        trace.bytes(),
        trace.lost_events,
        trace
            .command
            .iter()
            .map(|a| crate::names::escape(a.as_bytes()))
            .collect::<Vec<_>>()
            .join(" ")
    )?;
    if grouped_view {
        writeln!(out, "# time_s path offset length")?;
        for r in grouped(trace) {
            writeln!(
                out,
                "{:.6} {} {} {}",
                r.ts_ns as f64 / 1e9,
                name(r.file),
                r.index.saturating_mul(page),
                r.pages.saturating_mul(page)
            )?;
        }
    } else {
        writeln!(out, "# time_s path offset")?;
        for e in &trace.events {
            for p in 0..e.pages as u64 {
                writeln!(
                    out,
                    "{:.6} {} {}",
                    e.ts_ns as f64 / 1e9,
                    name(e.file),
                    e.index.saturating_add(p).saturating_mul(page)
                )?;
            }
        }
    }
    Ok(())
}
