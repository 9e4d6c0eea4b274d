//! `pagewise copy`: render the library's CopyReport.

mod itemize;
mod log;
mod order;
mod rules;
pub mod sync;

use super::args::{at_least_one, parse_size_arg};
use super::exit::{CliError, ExitCode};
use super::output::Output;
use super::progress::{ProgressLine, Show};
use super::render::{self, bytes};
use clap::{Args, ValueEnum};
use log::CopyLog;
use pagewise_core::copy::limits::parse_io_priority as io_priority;
use pagewise_core::copy::{
    self, Action, CopyItem, CopyOptions, CopyReport, Dereference, EntryKind, Existing, RuleKind,
    Strategy,
};
use pagewise_core::sys::IoPriority;
use pagewise_core::{sys, Error, FileResult, Progress, Watch};
use rules::{filters, info_flags, rsync_size, rule, rule_file, Rule};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

/// The `pagewise copy --help` epilogue: examples, notes and exit codes.
pub const EXAMPLES: &str = "\
Examples:
  pagewise copy big.img /backup/                  one file into a directory
  pagewise copy -p /srv/data /mnt/new/data        a tree, keeping mode/owner/times/xattrs
  pagewise copy -aT /srv/data /mnt/new/data       cp -a; the same place when run again
  pagewise copy -auT /srv/data /mnt/new/data      finish an interrupted copy: only what differs
  pagewise copy -aT --checksum /srv/data /mnt/x   compare content, not size and time (rsync -c)
  pagewise copy -auT --delete --dry-run SRC DST   list what would be created, updated, deleted
  pagewise copy -aT --json-lines SRC DST > log    one JSON line per entry, then the summary
  pagewise copy -a /srv/data/. /mnt/new/data      the contents of data into an existing dir
  pagewise copy --verify --fsync db/ /backup/db   durable, and re-read from disk to compare
  pagewise copy --cache drop-behind a b           force a strategy

For rsync's command line and meanings (-a = -rlptgoD, SRC/ copies the contents, --link-dest,
-i codes, --stats): pagewise sync, on the same engine.

Strategies (--cache): auto picks direct (O_DIRECT, many I/Os in flight) for files of 1 MiB
and more, and dontcache (RWF_DONTCACHE) for smaller ones, where the filesystem has each, else
drop-behind; on a file of 1 GiB or more it measures direct and dontcache and takes the faster
(-v says what it measured); buffered leaves both files cached, like cp.

Exit codes: 0 success, 1 fatal error, 2 some files failed, 130 interrupted (no partial file is
left under a final name).";

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum CacheArg {
    Auto,
    Dontcache,
    Direct,
    DropBehind,
    Buffered,
}

/// `--chunk`'s default as clap shows it: `copy::DEFAULT_CHUNK` (checked by a test).
const DEFAULT_CHUNK_ARG: &str = "4M";

#[derive(Args, Debug)]
pub struct CopyArgs {
    /// Sources, then the destination (a directory when there are several sources)
    #[arg(value_name = "SOURCE... DEST")]
    pub paths: Vec<PathBuf>,
    /// How the page cache is kept clean
    #[arg(long, value_enum, default_value_t = CacheArg::Auto)]
    pub cache: CacheArg,
    /// Keep mode, owner (when root), timestamps, extended attributes and ACLs
    #[arg(short = 'p', long)]
    pub preserve: bool,
    /// Archive, as cp -a: recursive, -p, special files recreated, symlinks not followed (-P)
    #[arg(short = 'a', long)]
    pub archive: bool,
    /// Treat DEST as the copy itself, never as a directory to copy into: running the same
    /// command again lands in the same place (also: SRC/. copies SRC's contents into DEST)
    #[arg(short = 'T', long)]
    pub no_target_directory: bool,
    /// Copy only what is missing or differs, never over a newer file (cp -u): a file whose
    /// size or modification time differs (rsync's quick check) and whose destination is not
    /// newer than its source, a symlink whose text differs; finishes an interrupted copy -a
    #[arg(short = 'u', long, conflicts_with = "no_clobber")]
    pub update: bool,
    /// Never replace an existing destination file, symlink or special file (cp -n; long
    /// form only here: -n is --dry-run, as in rsync and `pagewise evict`)
    #[arg(long)]
    pub no_clobber: bool,
    /// Copy a file only when its content differs (rsync -c): files of the same size are
    /// compared byte for byte, both read without caching them; implies -u for the rest
    #[arg(short = 'c', long, conflicts_with = "no_clobber")]
    pub checksum: bool,
    /// Change nothing: list what would be created, updated and deleted, then the counts
    /// (-n as in rsync; cp's -n is --no-clobber here)
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// List every change on stdout as it is made: ACTION KIND PATH (rsync -i)
    #[arg(short = 'i', long)]
    pub itemize_changes: bool,
    /// Remove from destination directories what their source directories no longer have
    /// (rsync --delete)
    #[arg(long)]
    pub delete: bool,
    /// Also delete destination entries the filter rules exclude (rsync --delete-excluded;
    /// implies --delete)
    #[arg(long)]
    pub delete_excluded: bool,
    /// Leave out what matches PATTERN (rsync's rules: `*.o`, `/top-only`, `dir/`, `a/**`,
    /// `dir/***`); rules apply in the order given, the first match deciding
    #[arg(long, value_name = "PATTERN", allow_hyphen_values = true, value_parser = rule(RuleKind::Exclude))]
    pub exclude: Vec<Rule>,
    /// Keep what matches PATTERN even if a later --exclude matches it (rsync --include)
    #[arg(long, value_name = "PATTERN", allow_hyphen_values = true, value_parser = rule(RuleKind::Include))]
    pub include: Vec<Rule>,
    /// Read exclude patterns from FILE, one per line (`#`/`;` comments; `-` is stdin)
    #[arg(long, value_name = "FILE", value_parser = rule_file(RuleKind::Exclude))]
    pub exclude_from: Vec<Rule>,
    /// Read include patterns from FILE, one per line
    #[arg(long, value_name = "FILE", value_parser = rule_file(RuleKind::Include))]
    pub include_from: Vec<Rule>,
    /// An rsync filter rule: `- PATTERN`, `+ PATTERN`, `P`/`R`/`H`/`S PATTERN`, `merge FILE`,
    /// `!` (clear); modifiers `!`, `s`, `r` (see rsync(1) FILTER RULES)
    #[arg(short = 'f', long, value_name = "RULE", allow_hyphen_values = true, value_parser = rule(RuleKind::Filter))]
    pub filter: Vec<Rule>,
    /// Do not cross file system boundaries: a mount point is copied as an empty directory
    /// (rsync -x)
    #[arg(short = 'x', long)]
    pub one_file_system: bool,
    /// Leave out regular files larger than SIZE (rsync --max-size: 100K, 1.5G, 10MB, 1G-1)
    #[arg(long, value_name = "SIZE", value_parser = rsync_size)]
    pub max_size: Option<u64>,
    /// Leave out regular files smaller than SIZE (rsync --min-size)
    #[arg(long, value_name = "SIZE", value_parser = rsync_size)]
    pub min_size: Option<u64>,
    /// Follow every symlink in the sources, inside trees too (cp -L)
    #[arg(short = 'L', long, overrides_with_all = ["dereference_command_line", "no_dereference"])]
    pub dereference: bool,
    /// Follow symlinks named as sources only (cp -H)
    #[arg(short = 'H', overrides_with_all = ["dereference", "no_dereference"])]
    pub dereference_command_line: bool,
    /// Never follow symlinks: copy them as symlinks (cp -P; the default)
    #[arg(short = 'P', long, overrides_with_all = ["dereference", "dereference_command_line"])]
    pub no_dereference: bool,
    /// cp -r/-R: taken; directories are always copied with what they hold
    #[arg(short = 'r', long, visible_short_alias = 'R')]
    pub recursive: bool,
    /// Do not fallocate destinations before writing
    #[arg(long)]
    pub no_preallocate: bool,
    /// Write each file under a hidden temporary name, renamed into place when complete
    /// (default: an unnamed O_TMPFILE file, linked into place, where the filesystem has it)
    #[arg(long)]
    pub named_temp: bool,
    /// Keep a file stopped mid-copy (Ctrl-C, a read or write error) under its hidden temporary
    /// name, with a checkpoint of what is on disk: the next run resumes it instead of starting
    /// over (rsync --partial). Implies --named-temp; a copy under named temporaries killed
    /// outright (SIGKILL, power cut) is resumed too
    #[arg(long)]
    pub partial: bool,
    /// fsync each file before it is linked (or renamed) into place, and the directories at the end
    #[arg(long)]
    pub fsync: bool,
    /// Re-read every copied file from disk (not cache) and compare checksums with the source
    #[arg(long)]
    pub verify: bool,
    /// Files copied in parallel
    #[arg(short = 'j', long, value_name = "N", default_value_t = copy::DEFAULT_THREADS, value_parser = at_least_one)]
    pub threads: usize,
    /// I/Os in flight within one large file
    #[arg(long, value_name = "N", default_value_t = copy::DEFAULT_DEPTH, value_parser = at_least_one)]
    pub depth: usize,
    /// Bytes per I/O
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_CHUNK_ARG, value_parser = parse_size_arg)]
    pub chunk: u64,
    /// Say which strategy each kind of file used
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Move at most RATE per second, all files together (rsync --bwlimit: a number in KiB, or
    /// with a unit: 50M, 1.5G; 0 for no limit). `auto`: back off when others need the disk —
    /// the rate follows the read latency others see on the same devices (halved above 1.3x
    /// what it was before the copy, else raised by 16 MiB/s every 100 ms)
    #[arg(long, value_name = "RATE|auto", value_parser = rules::bwlimit)]
    pub bwlimit: Option<rules::BwLimit>,
    /// The copy's I/O priority (ionice): idle (only when the disk is otherwise idle) or
    /// best-effort[:0-7] (0 first, 7 last; every process has 4). Only the bfq and mq-deadline
    /// I/O schedulers serve priorities; with none or kyber a notice says the device ignores it
    #[arg(long, value_name = "CLASS", value_parser = io_priority)]
    pub ionice: Option<IoPriority>,
    /// Print nothing but errors (rsync -q): no summary, no notes
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Show the progress of the whole copy on stderr even when it is not a terminal (then one
    /// line per second, for logs; rsync --info=progress2). On a terminal it is shown anyway
    #[arg(long)]
    pub progress: bool,
    /// rsync's --info flags: `progress2` is --progress (the only one taken; others are refused
    /// by name)
    #[arg(long, value_name = "FLAGS", value_parser = info_flags)]
    pub info: Option<bool>,
    /// Append a line per change to FILE: `TIME [PID] CODE PATH` (UTC time, rsync's itemize
    /// code), then the summary (rsync --log-file)
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// One JSON document on stdout (schema: docs/json.md)
    #[arg(short = 'J', long, conflicts_with = "json_lines")]
    pub json: bool,
    /// One JSON line per entry on stdout as it is done (created, updated, skipped, deleted,
    /// failed), then one per error and a summary line
    #[arg(long)]
    pub json_lines: bool,
}

impl From<CacheArg> for Strategy {
    fn from(c: CacheArg) -> Strategy {
        match c {
            CacheArg::Auto => Strategy::Auto,
            CacheArg::Dontcache => Strategy::Dontcache,
            CacheArg::Direct => Strategy::Direct,
            CacheArg::DropBehind => Strategy::DropBehind,
            CacheArg::Buffered => Strategy::Buffered,
        }
    }
}

/// The counts a summary names only when there are some: special files, entries left as
/// they were, temporaries of earlier runs removed.
fn extras(report: &CopyReport) -> String {
    let mut s = String::new();
    let r = report;
    if r.specials > 0 {
        s += &format!(", {} special files", r.specials);
    }
    if r.metadata_updated > 0 {
        let n = r.metadata_updated;
        s += &format!(", metadata brought over for {n} up-to-date files");
    }
    if r.resumed_files > 0 {
        let (n, kept) = (r.resumed_files, render::bytes(r.resumed_bytes));
        s += &format!(", {n} resumed from partial copies of earlier runs ({kept} kept)");
    }
    if r.stale_temporaries_removed > 0 {
        let n = r.stale_temporaries_removed;
        s += &format!(", {n} stale temporaries of earlier runs removed");
    }
    s
}

/// `pagewise copy`.
pub fn run(a: CopyArgs) -> Result<ExitCode, CliError> {
    let opts = options(&a)?;
    let log = CopyLog::start(a.log_file.as_deref(), "copy", &a.paths)?;
    let progress = Arc::new(Progress::default());
    let out = Output::of(a.json, a.json_lines);
    let show = match (
        !out.is_text() || a.quiet,
        a.progress || a.info == Some(true),
    ) {
        (true, _) => Show::Off,
        (false, true) => Show::Always,
        (false, false) => Show::Terminal,
    };
    let bar = ProgressLine::start_as("copy", progress.clone(), show);
    let list = a.itemize_changes || a.dry_run;
    let on_file = |r: FileResult| {
        let FileResult::Copy(item) = r else { return };
        if let Some(log) = &log {
            log.item(&item);
        }
        out.item("entry", &item, |item| {
            if list && item.action != Action::Skipped {
                let _ = write_item(&mut std::io::stdout().lock(), item);
            }
        });
    };
    // SIGINT/SIGTERM set this flag instead of killing pagewise: the copy stops between chunks
    // and removes what it had not finished.
    let observer = Watch {
        progress: Some(&progress),
        on_file: Some(on_file),
        cancel: Some(sys::interrupt_flag()),
    };
    let report = copy::copy(&opts, &observer)?;
    bar.finish();
    // 128 + the signal that stopped it: 130 for SIGINT, 143 for SIGTERM.
    let code = ExitCode::from_cancellable(&report.outcome, sys::last_signal());
    let view = View {
        verbose: a.verbose,
        verify: a.verify,
    };
    let mut summary = Vec::new();
    let _ = write_summary(&mut summary, &report, &view);
    if let Some(log) = &log {
        // Each failure was logged as its entry (`*failed`) when it happened.
        for line in String::from_utf8_lossy(&summary).lines() {
            log.line(line);
        }
    }
    out.report(&report, &report.outcome.errors, |r| {
        let o = &r.outcome;
        let notices: &[String] = if a.quiet { &[] } else { &o.notices };
        render::report_problems("copy", &o.errors, o.error_count, notices);
        if !a.quiet {
            let _ = std::io::stderr().write_all(&summary);
        }
    });
    Ok(log_kept(log.as_ref(), code))
}

/// `code`, or 2 when the log could not be written to its end (said on stderr): a promise
/// not kept.
fn log_kept(log: Option<&CopyLog>, code: ExitCode) -> ExitCode {
    match log.and_then(CopyLog::failure) {
        Some(msg) => {
            eprintln!("{msg}");
            match code {
                ExitCode::Success => ExitCode::SomeFailed,
                c => c,
            }
        }
        None => code,
    }
}

/// `host:path` (rsync's remote syntax, a colon before any slash) names a remote place.
fn remote(p: &std::path::Path) -> bool {
    let b = p.as_os_str().as_bytes();
    let colon = b.iter().position(|&c| c == b':');
    let slash = b.iter().position(|&c| c == b'/');
    matches!((colon, slash), (Some(c), s) if c > 0 && s.is_none_or(|s| c < s)) && !p.exists()
}

/// The library's options from the command line, validated (with the flags' names).
fn options(a: &CopyArgs) -> Result<CopyOptions, CliError> {
    let (dest, sources) = match a.paths.split_last() {
        Some((dest, sources)) if !sources.is_empty() => (dest, sources),
        _ => {
            return Err(CliError::Usage(
                "copy needs a source and a destination: pagewise copy [OPTIONS] SOURCE... DEST"
                    .into(),
            ))
        }
    };
    if let Some(p) = a.paths.iter().find(|p| remote(p)) {
        return Err(CliError::Usage(format!(
            "{}: remote destinations are not supported: mount it (NFS, sshfs) or use rsync over ssh for the transfer",
            p.display()
        )));
    }
    let opts = CopyOptions {
        filters: filters(a)?,
        one_file_system: a.one_file_system,
        max_size: a.max_size,
        min_size: a.min_size,
        bwlimit: rules::BwLimit::options(a.bwlimit).0,
        bwlimit_auto: rules::BwLimit::options(a.bwlimit).1,
        io_priority: a.ionice,
        sources: sources.to_vec(),
        dest: dest.clone(),
        strategy: a.cache.into(),
        preserve: match a.preserve || a.archive {
            true => copy::Preserve::ALL,
            false => copy::Preserve::NONE,
        },
        // The library's rules; the parser has already kept one of -L/-H/-P (the last) and
        // refused --no-clobber with -u or -c.
        dereference: Dereference::checked_flags(
            a.dereference,
            a.dereference_command_line,
            a.no_dereference,
        )?,
        no_target_directory: a.no_target_directory,
        delete: a.delete || a.delete_excluded,
        dry_run: a.dry_run,
        items: a.json_lines
            || a.log_file.is_some()
            || ((a.itemize_changes || a.dry_run) && !a.json),
        existing: Existing::checked_flags(a.checksum, a.update, a.no_clobber)?,
        skip_newer: a.update,
        preallocate: !a.no_preallocate,
        named_temp: a.named_temp,
        partial: a.partial,
        fsync: a.fsync,
        verify: a.verify,
        threads: a.threads,
        depth: a.depth,
        chunk: usize::try_from(a.chunk).unwrap_or(usize::MAX),
        ..Default::default()
    };
    opts.validate().map_err(|e| match e {
        // The library names the option, the CLI its flag: "--chunk must be a multiple of 4 KiB".
        Error::Invalid {
            what: what @ ("chunk" | "threads" | "depth"),
            message,
        } => CliError::Usage(format!("--{what} {message}")),
        e => e.into(),
    })?;
    Ok(opts)
}

/// What the summary shows besides the report.
struct View {
    /// `-v`: files per strategy, not only the strategies' names.
    verbose: bool,
    /// `--verify`: the files verified and the mismatches.
    verify: bool,
}

/// One entry of `-i` / `--dry-run`: `ACTION  KIND  PATH`, the path escaped.
fn write_item(w: &mut dyn Write, item: &CopyItem) -> std::io::Result<()> {
    let action = match item.action {
        Action::Created => "created",
        Action::Updated => "updated",
        Action::Skipped => "skipped",
        Action::Deleted => "deleted",
        Action::Failed => "failed",
        Action::Metadata => "metadata",
        Action::Ignored => "ignored",
        Action::BackedUp => "backup",
    };
    let kind = match item.kind {
        Some(EntryKind::File) => "file",
        Some(EntryKind::Dir) => "dir",
        Some(EntryKind::Symlink) => "symlink",
        Some(EntryKind::Hardlink) => "hardlink",
        Some(EntryKind::Special) => "special",
        Some(EntryKind::Device) => "device",
        None => "-",
    };
    writeln!(w, "{action:<8} {kind:<8} {}", render::path_text(&item.path))
}

/// Writes the summary: what was copied, how fast, by which strategies, and what the copy left
/// in the page cache; then the entries created, updated, left, deleted and failed (what a dry
/// run would do, saying nothing was changed).
fn write_summary(w: &mut dyn Write, report: &CopyReport, view: &View) -> std::io::Result<()> {
    let o = &report.outcome;
    if report.dry_run {
        return writeln!(
            w,
            "dry run, nothing changed: would create {}, update {}, delete {}{}; {} up to date; {} failed",
            report.created,
            report.updated,
            report.deleted,
            if report.metadata_updated > 0 {
                format!(", bring metadata over for {}", report.metadata_updated)
            } else {
                String::new()
            },
            report.skipped,
            o.error_count
        );
    }
    let r = &report.residue;
    let strategies = report
        .strategies
        .iter()
        .map(|(k, v)| {
            if view.verbose {
                format!("{}: {v} files", k.name())
            } else {
                k.name().to_string()
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
    writeln!(
        w,
        "copied {} files ({}), {} dirs, {} symlinks, {} hard links{} in {:.2} s, {}/s via {}; cache left: source +{} ({}), destination {} ({:.1}%){}",
        report.files,
        bytes(report.bytes),
        report.dirs,
        report.symlinks,
        report.hardlinks,
        extras(report),
        o.elapsed_s,
        bytes(report.rate_bytes_per_s as u64),
        if strategies.is_empty() { "-".into() } else { strategies },
        render::partial_bytes(r.source_added_bytes, report.files, r.source_unknown_files),
        if r.source_unknown_files > 0 && r.source_unknown_files >= report.files {
            // No figure the kernel did not give: the share of an unknown is unknown too.
            "unknown: cachestat refused and mincore cannot tell; read and dropped as if nothing was cached before".to_string()
        } else {
            format!("{:.1}%", pct(r.source_added_bytes, r.source_bytes))
        },
        bytes(r.dest_cached_bytes),
        pct(r.dest_cached_bytes, r.dest_bytes),
        if view.verify {
            format!("; verified {} files from disk, {} mismatches", report.verified_files, report.verify_mismatches)
        } else {
            String::new()
        }
    )?;
    writeln!(
        w,
        "entries: {} created, {} updated, {} left as they were, {} deleted, {} failed",
        report.created, report.updated, report.skipped, report.deleted, o.error_count
    )?;
    for c in report.auto_choices.iter().filter(|_| view.verbose) {
        let rate = |(s, r): (&Strategy, &f64)| format!("{} {}/s", s.name(), bytes(*r as u64));
        let rates: Vec<_> = c.rates_bytes_per_s.iter().map(rate).collect();
        writeln!(
            w,
            "auto: {} each way from device {} to {}: {}; the rest by {}",
            bytes(c.measured_bytes),
            c.source_device,
            c.dest_device,
            rates.join(", "),
            c.chosen.name()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The summary line, rendered from hand-made reports: no kernel involved.
    use super::*;
    use pagewise_core::copy::Residue;
    use pagewise_core::Outcome;

    #[test]
    fn the_chunk_default_is_the_library_s() {
        let chunk = parse_size_arg(DEFAULT_CHUNK_ARG).unwrap();
        assert_eq!(chunk, copy::DEFAULT_CHUNK as u64);
    }

    fn report() -> CopyReport {
        CopyReport {
            files: 10,
            dirs: 3,
            symlinks: 2,
            hardlinks: 1,
            bytes: 40 << 20,
            data_bytes: 40 << 20,
            rate_bytes_per_s: (80 << 20) as f64,
            strategies: [(Strategy::Direct, 4), (Strategy::DropBehind, 6)].into(),
            residue: Residue {
                source_added_bytes: 1 << 20,
                source_bytes: 40 << 20,
                dest_cached_bytes: 512 << 10,
                dest_bytes: 40 << 20,
                ..Residue::default()
            },
            verified_files: 10,
            created: 14,
            updated: 2,
            outcome: Outcome {
                elapsed_s: 0.5,
                ..Outcome::default()
            },
            ..CopyReport::default()
        }
    }

    fn summary(r: &CopyReport, verbose: bool, verify: bool) -> String {
        let mut out = Vec::new();
        write_summary(&mut out, r, &View { verbose, verify }).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn summary_names_the_strategies() {
        assert_eq!(
            summary(&report(), false, false),
            "copied 10 files (40.0 MiB), 3 dirs, 2 symlinks, 1 hard links in 0.50 s, 80.0 MiB/s \
             via direct, drop-behind; cache left: source +1.0 MiB (2.5%), destination 512 KiB \
             (1.2%)\nentries: 14 created, 2 updated, 0 left as they were, 0 deleted, 0 failed\n"
        );
    }

    #[test]
    fn verbose_counts_files_per_strategy_and_verify_says_what_was_checked() {
        assert_eq!(
            summary(&report(), true, true),
            "copied 10 files (40.0 MiB), 3 dirs, 2 symlinks, 1 hard links in 0.50 s, 80.0 MiB/s \
             via direct: 4 files, drop-behind: 6 files; cache left: source +1.0 MiB (2.5%), \
             destination 512 KiB (1.2%); verified 10 files from disk, 0 mismatches\nentries: 14 \
             created, 2 updated, 0 left as they were, 0 deleted, 0 failed\n"
        );
    }

    #[test]
    fn dry_run_says_what_would_change_and_items_are_escaped() {
        let r = CopyReport {
            created: 3,
            updated: 1,
            deleted: 2,
            skipped: 7,
            dry_run: true,
            ..CopyReport::default()
        };
        assert_eq!(
            summary(&r, false, false),
            "dry run, nothing changed: would create 3, update 1, delete 2; 7 up to date; 0 failed\n"
        );
        let item = CopyItem {
            path: PathBuf::from("/d/new\nline"),
            kind: Some(EntryKind::Symlink),
            action: Action::Created,
            bytes: 0,
            error: None,
            changes: Default::default(),
            target: None,
        };
        let mut out = Vec::new();
        write_item(&mut out, &item).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "created  symlink  /d/new\\x0aline\n"
        );
    }

    #[test]
    fn nothing_copied_and_unknown_source_residency() {
        let mut r = CopyReport::default();
        r.residue.source_unknown_files = 0;
        assert_eq!(
            summary(&r, false, false),
            "copied 0 files (0 B), 0 dirs, 0 symlinks, 0 hard links in 0.00 s, 0 B/s via -; cache \
             left: source +0 B (0.0%), destination 0 B (0.0%)\nentries: 0 created, 0 updated, 0 \
             left as they were, 0 deleted, 0 failed\n"
        );
        let mut r = report();
        r.residue.source_unknown_files = 10;
        assert!(summary(&r, false, false).contains(
            "cache left: source +unknown (unknown: cachestat refused and mincore cannot tell; \
             read and dropped as if nothing was cached before), destination"
        ));
        let mut r = report();
        r.residue.source_unknown_files = 2;
        assert_eq!(
            summary(&r, false, false),
            "copied 10 files (40.0 MiB), 3 dirs, 2 symlinks, 1 hard links in 0.50 s, 80.0 MiB/s \
             via direct, drop-behind; cache left: source +>=1.0 MiB (2.5%), destination 512 KiB \
             (1.2%)\nentries: 14 created, 2 updated, 0 left as they were, 0 deleted, 0 failed\n"
        );
    }
}
