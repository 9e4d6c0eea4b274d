//! `pagewise assist`: live prefetching for running processes, or the predictor on a trace.

use super::args::{parse_duration, AssistTuning};
use super::render::{self, bytes, table};
use super::trace_io::Signals;
use clap::Args;
use pagewise_core::assist::live::{self, WatchOptions};
use pagewise_core::assist::sim::{self, SimulateOptions};
use std::path::PathBuf;
use std::time::Duration;

pub const EXAMPLES: &str = "\
Examples:
  pagewise assist -p $(pidof postgres)          assist running processes until they exit
  pagewise run --assist --max-cache none -- fio job.fio
  pagewise record --faults -o fio.trace -- fio job.fio
  pagewise assist --simulate fio.trace          hit rate with and without the range detector

How it works: the target's page faults (tracepoint mm_filemap_fault) feed a predictor with
sequential, stride and range detectors. The range detector (Lustre LU-13669) groups faults
within --range of each other into clusters; on the next miss it prefetches a window of the last
cluster's span (at least --min-window) with fadvise(WILLNEED), starting at the fault when the
last cluster was read upwards (--centred: centred on it, as Lustre does). Hits prefetch nothing.

Exit codes: 0 success, 1 fatal error (no tracing rights, no such process, bad trace).";

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "simulate"])))]
pub struct AssistArgs {
    /// Processes to assist (all their threads, and children they start from now on)
    #[arg(short = 'p', long = "pid", value_name = "PID", num_args = 1..)]
    pub pid: Vec<u32>,
    /// Replay the faults of a trace (`record --faults`) through the predictor instead
    #[arg(long, value_name = "TRACE")]
    pub simulate: Option<PathBuf>,
    /// With --simulate: time from a fault to its prefetch being ready
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = parse_duration, requires = "simulate")]
    pub latency: Duration,
    /// Stop after DURATION even if the processes still run
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration, conflicts_with = "simulate")]
    pub for_: Option<Duration>,
    /// Ring buffer per CPU in KiB
    #[arg(long, value_name = "KIB", default_value_t = 4096)]
    pub buffer_kb: u64,
    #[command(flatten)]
    pub tuning: AssistTuning,
    /// One JSON document on stdout: the assist or simulation report (schema: docs/json.md)
    #[arg(short = 'J', long)]
    pub json: bool,
}

pub fn run(a: AssistArgs) -> Result<i32, String> {
    if let Some(path) = &a.simulate {
        let trace = super::trace_io::load_trace(path)?;
        let opts = SimulateOptions {
            config: a.tuning.config(trace.page_size as u64),
            trace,
            latency_ns: a.latency.as_nanos() as u64,
        };
        let rows = sim::compare(&opts).map_err(|e| format!("{}: {e}", path.display()))?;
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?
            );
            return Ok(0);
        }
        let mut tab = vec![vec![
            "predictor".to_string(),
            "faults".into(),
            "hit rate".into(),
            "late hits".into(),
            "misses".into(),
            "prefetches".into(),
            "prefetched".into(),
            "wasted".into(),
        ]];
        for r in &rows {
            tab.push(vec![
                r.label.clone(),
                r.accesses.to_string(),
                format!("{:.1}%", r.hit_rate * 100.0),
                r.late_hits.to_string(),
                r.misses.to_string(),
                r.windows.to_string(),
                bytes(r.prefetched_bytes),
                bytes(r.wasted_bytes),
            ]);
        }
        print!("{}", table(&tab));
        println!(
            "(faults of {} replayed against a simulated cache; prefetches ready {:?} after the fault)",
            path.display(),
            a.latency
        );
        return Ok(0);
    }
    let opts = WatchOptions {
        assist: a.tuning.options(a.buffer_kb),
        pids: a.pid,
        duration: a.for_,
    };
    let r = live::watch(&opts, &Signals).map_err(|e| format!("assist: {e}"))?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
        );
    } else {
        render::assist_summary(&r);
    }
    Ok(0)
}
