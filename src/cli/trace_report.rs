//! What the trace-driven verbs say besides their report: the traced files skipped, "nothing to
//! do" and why (`replay`, `evict --trace`, `load --trace`), and the report `evict --trace` and
//! `load --trace` share ([`TraceCacheReport`]: its summary, its exit code).

use super::exit::{CliError, ExitCode};
use super::output::Output;
use super::render::{self, bytes, path_text};
use pagewise_core::trace::{SkippedFile, TraceCacheReport};
use std::io::Write;
use std::path::Path;

/// Why a trace-driven verb had nothing to act on, from what it found: the trace had no
/// pages, none of its files could be opened, or every traced page lies past its file's end.
pub fn nothing_to_do_reason(empty_trace: bool, files_opened: u64, files_total: usize) -> String {
    if empty_trace {
        "the trace has no pages: nothing was read from disk while it was recorded (the \
         files were cached then; evict them first to record a cold start)"
            .into()
    } else if files_opened == 0 {
        format!(
            "none of its {files_total} traced file(s) could be opened (each is listed with the \
             reason)"
        )
    } else {
        "every traced page lies past the end of its file now (the files shrank since the \
         recording)"
            .into()
    }
}

/// Says on stderr that `verb` had nothing to act on in the trace at `path`, and why; the exit
/// code for it ([`ExitCode::NothingToDo`]).
pub fn nothing_to_do(verb: &str, path: &Path, reason: &str) -> ExitCode {
    eprintln!(
        "pagewise {verb}: nothing to do: {}: {reason}",
        path_text(path)
    );
    ExitCode::NothingToDo
}

/// Notes the traced files that were skipped, each with its reason (on stderr).
pub fn skipped_note(verb: &str, count: u64, skipped: &[SkippedFile]) {
    let _ = write_skipped(&mut std::io::stderr().lock(), verb, count, skipped);
}

/// Writes the note on skipped traced files: how many, then each listed one with its reason.
/// Nothing when none were.
pub fn write_skipped(
    w: &mut dyn Write,
    verb: &str,
    count: u64,
    skipped: &[SkippedFile],
) -> std::io::Result<()> {
    if count == 0 {
        return Ok(());
    }
    writeln!(w, "pagewise {verb}: note: {count} traced file(s) skipped:")?;
    for s in skipped {
        writeln!(w, "pagewise {verb}:   {}: {}", path_text(&s.path), s.reason)?;
    }
    if count > skipped.len() as u64 {
        writeln!(
            w,
            "pagewise {verb}:   ... and {} more",
            count - skipped.len() as u64
        )?;
    }
    Ok(())
}

/// Renders the report of `evict --trace` / `load --trace`: JSON (one document, also under
/// `--json-lines`), or the problems and notes
/// on stderr and the summary on stdout. `shape`: whether the trace had no events, and its
/// files. The exit code: some files failed (2), else nothing to act on (3), else 0.
pub fn cache_verb(
    verb: &str,
    path: &Path,
    out: Output,
    (empty_trace, files_total): (bool, usize),
    r: Result<TraceCacheReport, pagewise_core::Error>,
) -> Result<ExitCode, CliError> {
    let r = r.map_err(|e| CliError::about(path_text(path), e))?;
    let o = &r.outcome;
    // Said last, after the files skipped that explain it.
    let finish = || match ExitCode::from_outcome(o) {
        ExitCode::Success if r.ranges == 0 && !o.interrupted => {
            let reason = nothing_to_do_reason(empty_trace, r.files, files_total);
            nothing_to_do(verb, path, &reason)
        }
        code => code,
    };
    out.document(&r, |r| {
        render::report_problems(verb, &o.errors, o.error_count, &[]);
        skipped_note(verb, r.files_missing, &r.skipped);
        let _ = write_cache_summary(&mut std::io::stdout().lock(), r);
        if let Some(why) = r.unknown_reason {
            eprintln!(
                "pagewise {verb}: note: {} of {} files: residency unknown (figures marked >= leave them out): {why}",
                r.unknown_files, r.files
            );
        }
    });
    Ok(finish())
}

/// Writes the summary line of `evict --trace` / `load --trace`: ranges, files, bytes traced,
/// cached before and after.
pub fn write_cache_summary(w: &mut dyn Write, r: &TraceCacheReport) -> std::io::Result<()> {
    writeln!(
        w,
        "{} traced ranges in {} files ({} skipped): {} traced, cached {} before, {} after{}, {:.3} s",
        r.ranges,
        r.files,
        r.files_missing,
        bytes(r.bytes),
        render::partial_bytes(r.cached_bytes_before, r.files, r.unknown_files),
        render::partial_bytes(r.cached_bytes_after, r.files, r.unknown_files),
        if r.dry_run { " (dry run: nothing dropped)" } else { "" },
        r.outcome.elapsed_s
    )
}

#[cfg(test)]
mod tests {
    //! The trace-driven reports, rendered from hand-made ones: no kernel involved.
    use super::*;
    use pagewise_core::trace::SkipReason;
    use pagewise_core::Outcome;

    fn text(f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> String {
        let mut out = Vec::new();
        f(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn report(dry_run: bool, unknown_files: u64) -> TraceCacheReport {
        TraceCacheReport {
            dry_run,
            files: 3,
            files_missing: 1,
            ranges: 7,
            bytes: 3 << 20,
            cached_bytes_before: 2 << 20,
            cached_bytes_after: 4096,
            unknown_files,
            outcome: Outcome {
                elapsed_s: 0.0125,
                ..Outcome::default()
            },
            ..TraceCacheReport::default()
        }
    }

    #[test]
    fn cache_summary_after_evict() {
        assert_eq!(
            text(|w| write_cache_summary(w, &report(false, 0))),
            "7 traced ranges in 3 files (1 skipped): 3.0 MiB traced, cached 2.0 MiB before, \
             4.0 KiB after, 0.013 s\n"
        );
    }

    #[test]
    fn cache_summary_dry_run_with_unknown_files() {
        assert_eq!(
            text(|w| write_cache_summary(w, &report(true, 1))),
            "7 traced ranges in 3 files (1 skipped): 3.0 MiB traced, cached >=2.0 MiB before, \
             >=4.0 KiB after (dry run: nothing dropped), 0.013 s\n"
        );
    }

    #[test]
    fn skipped_files_are_listed_with_their_reason_and_the_rest_counted() {
        let skipped = vec![
            SkippedFile {
                path: "<0:5 inode 9>".into(),
                reason: SkipReason::NotMounted {
                    dev_major: 0,
                    dev_minor: 5,
                },
            },
            SkippedFile {
                path: "/data/gone\tx".into(),
                reason: SkipReason::Gone,
            },
        ];
        assert_eq!(
            text(|w| write_skipped(w, "replay", 5, &skipped)),
            "pagewise replay: note: 5 traced file(s) skipped:\n\
             pagewise replay:   <0:5 inode 9>: recorded without a path: device 0:5 is not mounted anywhere (an internal filesystem: pipes, sockets, memfd or anonymous shared memory), so there is no file to read\n\
             pagewise replay:   /data/gone\\x09x: gone: deleted since it was recorded\n\
             pagewise replay:   ... and 3 more\n"
        );
        assert_eq!(text(|w| write_skipped(w, "replay", 0, &[])), "");
    }
}
