//! `pagewise assist`: live prefetching for running processes, or the predictor on a trace.

use super::render::{bytes, table};
use super::{AssistArgs, AssistTuning};
use pagewise_core::assist::live::{self, AssistOptions, AssistReport};
use pagewise_core::assist::{sim, Config};

/// Predictor options from the command line.
pub fn config(t: &AssistTuning, page: u64) -> Config {
    let mut c = Config::for_page_size(page);
    c.range_pages = (t.range / page).max(1);
    c.min_window = (t.min_window / page).max(1);
    c.max_window = (t.max_window / page).max(c.min_window);
    c.forward = !t.centred;
    c.range = !t.no_range;
    c.sequential = !t.no_sequential;
    c.stride = !t.no_stride;
    c
}

pub fn options(t: &AssistTuning, buffer_kb: u64) -> AssistOptions {
    AssistOptions {
        config: config(t, pagewise_core::sys::page_size()),
        buffer_kb,
        ..Default::default()
    }
}

/// The live report, on stderr.
pub fn print_live(r: &AssistReport) {
    eprintln!(
        "pagewise assist: {} faults ({} misses, {} on prefetched pages); {} prefetches ({} range, {} sequential, {} stride) of {}, ~{} wasted; fault-to-prefetch latency p50 {} us, p90 {} us, p99 {} us; {} files{}{}",
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
        r.files,
        if r.files_unreachable > 0 {
            format!(" ({} unreachable)", r.files_unreachable)
        } else {
            String::new()
        },
        if r.lost_events > 0 {
            format!("; WARNING: {} events lost (raise --buffer-kb)", r.lost_events)
        } else {
            String::new()
        },
    );
}

pub fn run(a: AssistArgs) -> Result<i32, String> {
    if let Some(path) = &a.simulate {
        let t = super::record::load_trace(path)?;
        let cfg = config(&a.tuning, t.page_size as u64);
        let rows = sim::compare(&t, &cfg, a.latency.as_nanos() as u64)
            .map_err(|e| format!("{}: {e}", path.display()))?;
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
    let opts = options(&a.tuning, a.buffer_kb);
    let r = live::watch(&a.pid, &opts, a.for_).map_err(|e| format!("assist: {e}"))?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
        );
    } else {
        print_live(&r);
    }
    Ok(0)
}
