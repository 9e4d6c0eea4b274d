//! `pagewise sync`: rsync's command line and meanings for local paths, on copy's engine.
//!
//! The flags are rsync's letters with rsync's meanings (`-a` is `-rlptgoD`, `-h` is
//! --human-readable, `-P` is --partial --progress, `-H` keeps hard links), the trailing-slash
//! rule is rsync's, `-i` prints rsync's itemize codes and `--stats` rsync's layout. An rsync
//! flag pagewise does not have is refused by name, never taken for another.

mod args;
mod plan;
mod stop;
mod trust;

pub use args::{SyncArgs, Verbosity};

use super::itemize::{self, Stats};
use super::log::CopyLog;
use crate::cli::exit::{CliError, ExitCode};
use crate::cli::output::Output;
use crate::cli::progress::{ProgressLine, Show};
use pagewise_core::copy::{self, CopyOptions, Layout};
use pagewise_core::{sys, FileResult, Progress, Watch};
use plan::{make_dest, plan, DeleteWhen, Plan};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

/// The `pagewise sync --help` epilogue.
pub const EXAMPLES: &str = "\
Examples:
  pagewise sync -a /srv/data/ /mnt/backup/data    the contents of data into backup/data
  pagewise sync -a /srv/data /mnt/backup/         data itself into backup (backup/data)
  pagewise sync -aHAXS --delete src/ dst/         a mirror: hard links, ACLs, xattrs, holes
  pagewise sync -ai --stats src/ dst/             rsync's itemized changes and statistics
  pagewise sync -a --link-dest=../2026-11-27 /srv/ /backup/2026-11-28/
                                                  a snapshot: unchanged files hard-linked
  pagewise sync -a --backup --backup-dir=/backup/old src/ dst/
  pagewise sync -a --files-from=list.txt / /mnt/backup/   the listed paths, -R implied
  pagewise sync -a --bwlimit=200M --ionice idle big/ /mnt/x/  gentle beside a database

This is rsync's command line for local paths: the trailing-slash rule (`SRC/` copies the
contents, `SRC` the directory itself), -a = -rlptgoD, -h human-readable numbers (--help is the
help), -P = --partial --progress, -H hard links, -i rsync's itemize codes. A remote host:path
is refused. `pagewise copy` keeps cp's meanings (-a = cp -a, -T, SRC/.).

The data moves as `pagewise copy` moves it: several files and I/Os in flight, and the page
cache left as it was (--cache). Whole files always (-W); holes are kept whether or not -S is
given. Without -p an existing file keeps its mode; without -t a file is copied on every run.

Exit codes are rsync's: 0 success, 1 syntax or usage error, 11 error in file I/O (nothing
could start), 20 interrupted (SIGINT, SIGTERM), 23 partial transfer: some files failed, 25
--max-delete stopped deletions, 30 --stop-after or --stop-at reached.";

/// rsync's exit codes.
mod code {
    pub const SYNTAX: i32 = 1;
    pub const FILE_IO: i32 = 11;
    pub const SIGNAL: i32 = 20;
    pub const PARTIAL: i32 = 23;
    pub const DEL_LIMIT: i32 = 25;
    pub const TIMEOUT: i32 = 30;
}

/// `-VV`: rsync's capabilities document, for what pagewise sync does with local paths.
const CAPABILITIES: &str = r#"{
  "program": "pagewise sync",
  "version": "VERSION",
  "capabilities": {
    "symlinks": true, "symtimes": true, "hardlinks": true, "hardlink_specials": true,
    "hardlink_symlinks": true, "atimes": false, "batchfiles": false, "inplace": true,
    "append": true, "ACLs": true, "xattrs": true, "iconv": false, "prealloc": true,
    "stop_at": true, "crtimes": false
  }
}"#;

/// `pagewise sync`.
pub fn run(a: SyncArgs) -> Result<ExitCode, CliError> {
    match a.version {
        0 => {}
        1 => {
            println!(
                "pagewise sync {} (rsync's command line for local paths)",
                env!("CARGO_PKG_VERSION")
            );
            return Ok(ExitCode::Success);
        }
        _ => {
            println!(
                "{}",
                CAPABILITIES.replace("VERSION", env!("CARGO_PKG_VERSION"))
            );
            return Ok(ExitCode::Success);
        }
    }
    let deadline = match stop::deadline(&a.stop_at, &a.stop_after) {
        Ok(d) => d,
        Err(m) => {
            eprintln!("pagewise sync: {m}");
            return Ok(ExitCode::Status(code::SYNTAX));
        }
    };
    let (a, plan) = match trust::operator_paths(a).and_then(|a| plan(&a).map(|p| (a, p))) {
        Ok(ap) => ap,
        Err(CliError::Usage(m)) => {
            eprintln!("pagewise sync: {m}");
            return Ok(ExitCode::Status(code::SYNTAX));
        }
        Err(e) => return Err(e),
    };
    let Plan {
        opts,
        delete,
        make_dest: mk,
        names,
        verbosity: v,
        human,
        out_format,
    } = plan;
    let out = Output::of(a.json, a.json_lines);
    if let Some((dest, all)) = &mk {
        let say = out.is_text() && v.names > 0;
        // Every source's contents go into DEST: the copy makes it.
        let last_by_engine = opts.layout == Layout::Rsync
            && opts.sources.iter().all(|s| {
                let b = s.as_os_str().as_bytes();
                b.ends_with(b"/") || b.ends_with(b"/.") || b == b"."
            });
        if let Err(e) = make_dest(dest, *all, opts.dry_run, say, last_by_engine) {
            eprintln!("pagewise sync: {e}");
            return Ok(ExitCode::Status(code::FILE_IO));
        }
    }
    let log = CopyLog::start(a.log_file.as_deref(), "sync", &a.paths)?;
    if v.names > 0 && v.stats > 0 && out.is_text() && a.verbose > 0 {
        println!("sending incremental file list");
    }
    let progress = Arc::new(Progress::default());
    let show = match (!out.is_text() || a.quiet, v.progress) {
        (true, _) => Show::Off,
        (false, true) => Show::Always,
        (false, false) => Show::Off,
    };
    let bar = ProgressLine::start_as("sync", progress.clone(), show);
    let stats = Mutex::new(Stats::default());
    let time_kept = opts.preserve.times;
    // A pass that only deletes reports its deletions and failures, not the entries it left.
    let deleting_only = std::sync::atomic::AtomicBool::new(false);
    // Into a pipe or a file the lines come in rsync's order, at the end; on a terminal as
    // the entries are done.
    use std::io::IsTerminal;
    let order = (!std::io::stdout().is_terminal())
        .then(|| Mutex::new(super::order::Order::new(names.root())));
    let set_after = std::sync::atomic::AtomicBool::new(false);
    let on_file = |r: FileResult| {
        let FileResult::Copy(item) = r else {
            return;
        };
        let only_deletions = deleting_only.load(std::sync::atomic::Ordering::Relaxed);
        if only_deletions && !matches!(item.action, copy::Action::Deleted | copy::Action::Failed) {
            return;
        }
        stats.lock().unwrap().add(&item, &names);
        if let Some(log) = &log {
            log.item_named(&item, &names, time_kept);
        }
        out.item("entry", &item, |item| {
            let line = match &out_format {
                Some(f) => itemize::format_line(f, item, &names, time_kept),
                None => itemize::line(item, &names, &v, time_kept),
            };
            if let Some(line) = line {
                match &order {
                    Some(o) => o.lock().unwrap().add(item, line, set_after.load(Relaxed)),
                    None => {
                        let _ = std::io::stdout().lock().write_all(line.as_bytes());
                    }
                }
            }
        });
    };
    let observer = Watch {
        progress: Some(&progress),
        on_file: Some(on_file),
        cancel: Some(sys::interrupt_flag()),
    };
    let started = std::time::Instant::now();
    if let Some(d) = deadline {
        stop::watch(d);
    }
    let (main, others) = passes(&opts, delete, &observer, &deleting_only, &set_after)?;
    bar.finish();
    print_ordered(order);
    let elapsed = started.elapsed().as_secs_f64();
    let report = merge(main.unwrap_or_default(), others);
    let stats = stats.into_inner().unwrap();
    let view = (v.stats, human, elapsed, a.quiet);
    say_report(out, &report, &stats, view, log.as_ref());
    Ok(exit_code(&report, log.as_ref()))
}

/// The lines kept for rsync's order, now in it.
fn print_ordered(order: Option<Mutex<super::order::Order>>) {
    if let Some(o) = order {
        let mut w = std::io::stdout().lock();
        for line in o.into_inner().unwrap().into_lines() {
            let _ = w.write_all(line.as_bytes());
        }
    }
}

/// The --stats block (also into the log), the problems and notices, and --max-delete's
/// message; `view`: the stats level, the numbers' form, the elapsed time, -q.
fn say_report(
    out: Output,
    report: &copy::CopyReport,
    stats: &Stats,
    (level, human, elapsed, quiet): (u8, u8, f64, bool),
    log: Option<&CopyLog>,
) {
    let mut text = Vec::new();
    if level > 0 {
        let _ = itemize::write_stats(&mut text, stats, report, level > 1, human, elapsed);
    }
    if let Some(log) = log {
        for line in String::from_utf8_lossy(&text)
            .lines()
            .filter(|l| !l.is_empty())
        {
            log.line(line);
        }
    }
    out.report(report, &report.outcome.errors, |r| {
        let o = &r.outcome;
        let notices: &[String] = if quiet { &[] } else { &o.notices };
        crate::cli::render::report_problems("sync", &o.errors, o.error_count, notices);
        let _ = std::io::stdout().write_all(&text);
        if r.deletes_skipped > 0 {
            eprintln!(
                "Deletions stopped due to --max-delete limit ({} skipped)",
                r.deletes_skipped
            );
        }
    });
}

/// rsync's exit code for the run, and 23 when the log could not be written to its end.
fn exit_code(report: &copy::CopyReport, log: Option<&CopyLog>) -> ExitCode {
    let code = if report.outcome.interrupted && stop::reached() {
        eprintln!("stopping at requested limit");
        ExitCode::Status(code::TIMEOUT)
    } else if report.outcome.interrupted {
        ExitCode::Status(code::SIGNAL)
    } else if report.outcome.error_count > 0 {
        ExitCode::Status(code::PARTIAL)
    } else if report.deletes_skipped > 0 {
        ExitCode::Status(code::DEL_LIMIT)
    } else {
        ExitCode::Success
    };
    match log.and_then(CopyLog::failure) {
        Some(msg) => {
            eprintln!("{msg}");
            match code {
                ExitCode::Success => ExitCode::Status(code::PARTIAL),
                c => c,
            }
        }
        None => code,
    }
}

/// The copy, with the passes that only delete before or after it (--delete-before,
/// --delete-after, --delete-delay): the copy's report (None when stopped before it) and
/// theirs. `deleting_only` and `set_after` tell the observer which pass reports.
fn passes(
    opts: &CopyOptions,
    delete: DeleteWhen,
    observer: &dyn pagewise_core::Observer,
    deleting_only: &AtomicBool,
    set_after: &AtomicBool,
) -> Result<(Option<copy::CopyReport>, Vec<copy::CopyReport>), CliError> {
    // Deletions before or after the transfer: a pass that only deletes (nothing is created
    // or updated), before or after the pass that copies.
    let delete_pass = |o: &CopyOptions| CopyOptions {
        delete: true,
        delete_only: true,
        ..o.clone()
    };
    let set_only = |on| deleting_only.store(on, Relaxed);
    let mut others = Vec::new();
    if delete == DeleteWhen::Before {
        set_only(true);
        // The copy after it sets the directories' times (and reports them changed).
        let before = CopyOptions {
            omit_dir_times: true,
            ..delete_pass(opts)
        };
        others.push(copy::copy(&before, observer)?);
        set_only(false);
    }
    let interrupted = |r: &Vec<copy::CopyReport>| r.iter().any(|r| r.outcome.interrupted);
    let mut main = None;
    if !interrupted(&others) {
        main = Some(copy::copy(opts, observer)?);
    }
    let main_stopped = main.as_ref().is_some_and(|m| m.outcome.interrupted);
    if delete == DeleteWhen::After && !main_stopped {
        set_only(true);
        set_after.store(true, Relaxed);
        others.push(copy::copy(&delete_pass(opts), observer)?);
    }
    Ok((main, others))
}

/// The copy's report with the deletions (and problems) of the passes that only delete
/// (--delete-before, --delete-after).
fn merge(main: copy::CopyReport, deleting: Vec<copy::CopyReport>) -> copy::CopyReport {
    let mut r = main;
    for n in deleting {
        r.deleted += n.deleted;
        r.deletes_skipped += n.deletes_skipped;
        let (o, m) = (&mut r.outcome, n.outcome);
        o.errors.extend(m.errors);
        o.error_count += m.error_count;
        for x in m.notices {
            if !o.notices.contains(&x) {
                o.notices.push(x);
            }
        }
        o.interrupted |= m.interrupted;
        o.elapsed_s += m.elapsed_s;
    }
    r
}
