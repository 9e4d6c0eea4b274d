//! `pagewise record`: a command's page-cache reads, from the kernel's tracepoint.

use super::args::BackendArg;
use super::output::Output;
use super::render::{bytes, path_text};
use super::trace_io::{command_error, write_trace, Signals, TraceFormat};
use clap::Args;
use pagewise_core::trace::{self, RecordOptions};
use std::path::PathBuf;

pub const EXAMPLES: &str = "\
Examples:
  pagewise record -o py.trace -- python3 -c 'import asyncio, json'
  pagewise record --format grouped -o - -- ./app --init     grouped text on stdout
  pagewise show --format text py.trace                      one line per page

Needs root (perf events or tracefs). SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to pagewise are
forwarded to the command; the trace is written when it ends. Processes the command leaves
running (daemons) are not recorded after it exits (a note says how many).
Exit code: the command's own (128+N when it died of signal N); 127 command not found, 126 not
executable; 1 when tracing could not start or the output cannot be created (checked before the
command runs).";

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Where to write the trace ('-' for stdout)
    #[arg(short = 'o', long, default_value = "pagewise.trace")]
    pub output: PathBuf,
    /// What to write: the binary trace (for replay, show, evict --trace, load --trace), or
    /// text as `show` prints it
    #[arg(long, value_enum, default_value_t = TraceFormat::Binary)]
    pub format: TraceFormat,
    /// Ring buffer per CPU in KiB (events beyond it are lost, and counted)
    #[arg(long, value_name = "KIB", default_value_t = 4096)]
    pub buffer_kb: u64,
    /// Also record the command's page faults on file mappings (for `assist --simulate`)
    #[arg(long)]
    pub faults: bool,
    /// How events are collected
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// The command and its arguments ('--' before it is optional; needed when the command's
    /// own options could be taken for pagewise's)
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

pub fn run(a: RecordArgs) -> Result<i32, String> {
    // The output first: a bad path is found before the command runs.
    let out = Output::open(&a.output)?;
    let opts = RecordOptions {
        command: a.command,
        buffer_kb: a.buffer_kb,
        faults: a.faults,
        backend: a.backend.into(),
    };
    let rec = match trace::record(&opts, &Signals) {
        Ok(r) => r,
        Err(e) => return Ok(command_error("record", e)),
    };
    let (t, source) = (&rec.trace, rec.source);
    // The trace first, then the words about it.
    write_trace(t, a.format, out)?;
    for n in &rec.outcome.notices {
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
    Ok(rec.exit_code)
}
