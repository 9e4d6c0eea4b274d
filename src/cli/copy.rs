//! `pagewise copy`: render the library's CopyReport.

use super::progress::ProgressLine;
use super::render::{self, bytes};
use super::{CacheArg, CopyArgs};
use pagewise_core::copy::{self, CopyOptions, Strategy};
use pagewise_core::Progress;
use std::sync::Arc;

pub fn run(a: CopyArgs) -> Result<i32, String> {
    let (dest, sources) = a
        .paths
        .split_last()
        .ok_or("need a source and a destination")?;
    if a.chunk < 4096 || !a.chunk.is_multiple_of(4096) {
        return Err("--chunk must be a multiple of 4 KiB".into());
    }
    let opts = CopyOptions {
        strategy: match a.cache {
            CacheArg::Auto => Strategy::Auto,
            CacheArg::Dontcache => Strategy::Dontcache,
            CacheArg::Direct => Strategy::Direct,
            CacheArg::DropBehind => Strategy::DropBehind,
            CacheArg::Buffered => Strategy::Buffered,
        },
        preserve: a.preserve,
        preallocate: !a.no_preallocate,
        named_temp: a.named_temp,
        fsync: a.fsync,
        verify: a.verify,
        threads: a.threads.max(1),
        depth: a.depth.max(1),
        chunk: a.chunk as usize,
        ..Default::default()
    };
    let progress = Arc::new(Progress::default());
    let bar = ProgressLine::start("copy", progress.clone(), !a.json);
    let report = copy::copy(sources, dest, &opts, &progress).map_err(|e| e.to_string())?;
    bar.finish();
    let code = if report.interrupted {
        // 128 + the signal that stopped it: 130 for SIGINT, 143 for SIGTERM.
        pagewise_core::sys::last_signal().map_or(super::exit::INTERRUPTED, |s| 128 + s)
    } else {
        render::exit_code(report.error_count)
    };
    if a.json {
        render::print_json(&report);
        return Ok(code);
    }
    render::report_problems("copy", &report.errors, report.error_count, &report.notices);
    let r = &report.residue;
    let strategies = report
        .strategies
        .iter()
        .map(|(k, v)| {
            if a.verbose {
                format!("{k}: {v} files")
            } else {
                k.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let pct = |x: u64, of: u64| {
        if of == 0 {
            0.0
        } else {
            x as f64 * 100.0 / of as f64
        }
    };
    eprintln!(
        "copied {} files ({}), {} dirs, {} symlinks, {} hard links in {:.2} s, {}/s via {}; cache left: source +{} ({:.1}%), destination {} ({:.1}%){}",
        report.files,
        bytes(report.bytes),
        report.dirs,
        report.symlinks,
        report.hardlinks,
        report.elapsed_s,
        bytes(report.rate_bytes_per_s as u64),
        if strategies.is_empty() { "-".into() } else { strategies },
        render::partial_bytes(r.source_added_bytes, report.files, r.source_unknown_files),
        pct(r.source_added_bytes, r.source_bytes),
        bytes(r.dest_cached_bytes),
        pct(r.dest_cached_bytes, r.dest_bytes),
        if a.verify {
            format!("; verified {} files from disk, {} mismatches", report.verified_files, report.verify_mismatches)
        } else {
            String::new()
        }
    );
    Ok(code)
}
