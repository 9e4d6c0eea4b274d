//! `pagewise sync`: rsync's command line and meanings for local paths, on copy's engine.
//!
//! The flags are rsync's letters with rsync's meanings (`-a` is `-rlptgoD`, `-h` is
//! --human-readable, `-P` is --partial --progress, `-H` keeps hard links), the trailing-slash
//! rule is rsync's, `-i` prints rsync's itemize codes and `--stats` rsync's layout. An rsync
//! flag pagewise does not have is refused by name, never taken for another.

use super::itemize::{self, Names, Stats};
use super::log::CopyLog;
use super::rules::{filters_of, rsync_size, rule, rule_file, Rule};
use crate::cli::exit::{CliError, ExitCode};
use crate::cli::output::Output;
use crate::cli::progress::{ProgressLine, Show};
use clap::{ArgAction, Args};
use pagewise_core::copy::limits::parse_io_priority as io_priority;
use pagewise_core::copy::{
    self, AltDest, AltKind, Backup, CopyOptions, Dereference, Existing, Layout, Links, Preserve,
    RuleKind, Strategy,
};
use pagewise_core::sys::IoPriority;
use pagewise_core::{sys, FileResult, Progress, Watch};
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
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
--max-delete stopped deletions.";

#[derive(Args, Debug)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct SyncArgs {
    /// Sources, then the destination (SRC/ copies the contents of SRC, SRC the directory)
    #[arg(value_name = "SRC... DEST")]
    pub paths: Vec<PathBuf>,
    /// Print help (-h is --human-readable, as in rsync)
    #[arg(long, action = ArgAction::Help)]
    pub help: Option<bool>,
    /// Print the version; -VV: what this sync can keep, as rsync -VV's JSON
    #[arg(short = 'V', long, action = ArgAction::Count)]
    pub version: u8,
    /// Archive mode: -rlptgoD (no -A, -X, -H)
    #[arg(short = 'a', long)]
    pub archive: bool,
    /// Recurse into directories
    #[arg(short = 'r', long, overrides_with = "no_recursive")]
    pub recursive: bool,
    #[arg(long = "no-recursive", visible_alias = "no-r", hide = true)]
    pub no_recursive: bool,
    /// Use relative path names: SRC/./PATH goes to DEST/PATH
    #[arg(short = 'R', long)]
    pub relative: bool,
    /// Don't send implied directories with -R: the missing ones are made plainly
    #[arg(long)]
    pub no_implied_dirs: bool,
    /// Copy symlinks as symlinks
    #[arg(short = 'l', long, overrides_with = "no_links")]
    pub links: bool,
    #[arg(long = "no-links", visible_alias = "no-l", hide = true)]
    pub no_links: bool,
    /// Transform symlinks into the files and directories they point to
    #[arg(short = 'L', long)]
    pub copy_links: bool,
    /// Ignore symlinks that point outside the copied tree
    #[arg(long)]
    pub safe_links: bool,
    /// Copy what symlinks pointing outside the copied tree point to (the others as symlinks)
    #[arg(long)]
    pub copy_unsafe_links: bool,
    /// Put all updated files into place at the end of the run
    #[arg(long)]
    pub delay_updates: bool,
    /// Preserve hard links
    #[arg(short = 'H', long, overrides_with = "no_hard_links")]
    pub hard_links: bool,
    #[arg(long = "no-hard-links", visible_alias = "no-H", hide = true)]
    pub no_hard_links: bool,
    /// Preserve permissions
    #[arg(short = 'p', long, overrides_with = "no_perms")]
    pub perms: bool,
    #[arg(long = "no-perms", visible_alias = "no-p", hide = true)]
    pub no_perms: bool,
    /// Preserve ACLs (implies -p)
    #[arg(short = 'A', long, overrides_with = "no_acls")]
    pub acls: bool,
    #[arg(long = "no-acls", visible_alias = "no-A", hide = true)]
    pub no_acls: bool,
    /// Preserve extended attributes
    #[arg(short = 'X', long, overrides_with = "no_xattrs")]
    pub xattrs: bool,
    #[arg(long = "no-xattrs", visible_alias = "no-X", hide = true)]
    pub no_xattrs: bool,
    /// Preserve the owner (as root)
    #[arg(short = 'o', long, overrides_with = "no_owner")]
    pub owner: bool,
    #[arg(long = "no-owner", visible_alias = "no-o", hide = true)]
    pub no_owner: bool,
    /// Preserve the group
    #[arg(short = 'g', long, overrides_with = "no_group")]
    pub group: bool,
    #[arg(long = "no-group", visible_alias = "no-g", hide = true)]
    pub no_group: bool,
    /// Same as --devices --specials
    #[arg(short = 'D')]
    pub devices_specials: bool,
    #[arg(long = "no-D", hide = true)]
    pub no_devices_specials: bool,
    /// Preserve device files (as root)
    #[arg(long)]
    pub devices: bool,
    /// Preserve special files (FIFOs, sockets)
    #[arg(long)]
    pub specials: bool,
    /// Preserve modification times
    #[arg(short = 't', long, overrides_with = "no_times")]
    pub times: bool,
    #[arg(long = "no-times", visible_alias = "no-t", hide = true)]
    pub no_times: bool,
    /// Omit directories from --times
    #[arg(short = 'O', long)]
    pub omit_dir_times: bool,
    /// Receiver attempts super-user activities (taken as root always does)
    #[arg(long)]
    pub super_: bool,
    /// Keep holes in sparse files (always done: holes are never written)
    #[arg(short = 'S', long)]
    pub sparse: bool,
    /// Copy files whole (always: there is no delta transfer between local paths)
    #[arg(short = 'W', long)]
    pub whole_file: bool,
    /// Taken for rsync compatibility: local copies are always whole
    #[arg(long, hide = true)]
    pub no_whole_file: bool,
    /// Allocate destination files before writing them (the default for large files)
    #[arg(long)]
    pub preallocate: bool,
    /// Perform a trial run with no changes made
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Don't cross filesystem boundaries
    #[arg(short = 'x', long)]
    pub one_file_system: bool,
    /// Skip files that are newer on the receiver
    #[arg(short = 'u', long)]
    pub update: bool,
    /// Skip creating new files on the receiver
    #[arg(long, visible_alias = "ignore-non-existing")]
    pub existing: bool,
    /// Skip updating files that exist on the receiver
    #[arg(long)]
    pub ignore_existing: bool,
    /// Sender removes synchronized files (non-directories)
    #[arg(long)]
    pub remove_source_files: bool,
    /// Skip files that match in size and modification time (the default); -c compares content
    #[arg(short = 'c', long)]
    pub checksum: bool,
    /// Skip files that match in size
    #[arg(long)]
    pub size_only: bool,
    /// Don't skip files that match size and time
    #[arg(short = 'I', long)]
    pub ignore_times: bool,
    /// Compare modification times with reduced accuracy: within NUM seconds (0, the
    /// default: whole seconds; -1: to the nanosecond)
    #[arg(
        long,
        value_name = "NUM",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    pub modify_window: i64,
    /// Delete extraneous files from destination directories (during the transfer)
    #[arg(long, visible_alias = "del")]
    pub delete: bool,
    /// Receiver deletes before the transfer
    #[arg(long)]
    pub delete_before: bool,
    /// Receiver deletes during the transfer
    #[arg(long)]
    pub delete_during: bool,
    /// Find deletions during, delete after
    #[arg(long)]
    pub delete_delay: bool,
    /// Receiver deletes after the transfer
    #[arg(long)]
    pub delete_after: bool,
    /// Also delete excluded files from destination directories
    #[arg(long)]
    pub delete_excluded: bool,
    /// Don't delete more than NUM files (exit 25 when reached)
    #[arg(long, value_name = "NUM")]
    pub max_delete: Option<u64>,
    /// Don't transfer any file larger than SIZE
    #[arg(long, value_name = "SIZE", value_parser = rsync_size)]
    pub max_size: Option<u64>,
    /// Don't transfer any file smaller than SIZE
    #[arg(long, value_name = "SIZE", value_parser = rsync_size)]
    pub min_size: Option<u64>,
    /// Make backups of what is replaced or deleted (see --suffix and --backup-dir)
    #[arg(short = 'b', long)]
    pub backup: bool,
    /// Make backups into the hierarchy based in DIR (implies -b)
    #[arg(long, value_name = "DIR")]
    pub backup_dir: Option<PathBuf>,
    /// Backup suffix (default ~ without --backup-dir)
    #[arg(long, value_name = "SUFFIX", allow_hyphen_values = true)]
    pub suffix: Option<OsString>,
    /// Compare received files relative to DIR (unchanged ones are left out)
    #[arg(long, value_name = "DIR")]
    pub compare_dest: Vec<PathBuf>,
    /// ... and include copies of unchanged files
    #[arg(long, value_name = "DIR")]
    pub copy_dest: Vec<PathBuf>,
    /// Hardlink to files in DIR when unchanged
    #[arg(long, value_name = "DIR")]
    pub link_dest: Vec<PathBuf>,
    /// Update destination files in place (they keep their inode; a reader may see one half
    /// written)
    #[arg(long)]
    pub inplace: bool,
    /// Append data onto shorter files (the rest is taken to be the same)
    #[arg(long)]
    pub append: bool,
    /// --append, checking the data already there first (else the whole file is written)
    #[arg(long)]
    pub append_verify: bool,
    /// Force deletion of directories in the way of files, even if not empty
    #[arg(long)]
    pub force: bool,
    /// Omit symlinks from --times
    #[arg(short = 'J', long)]
    pub omit_link_times: bool,
    /// Compress file data: taken for rsync compatibility (a local copy has no wire to
    /// compress)
    #[arg(short = 'z', long, hide = true)]
    pub compress: bool,
    #[arg(long, hide = true, value_name = "NUM")]
    pub compress_level: Option<String>,
    /// The remote shell: taken for rsync compatibility (remote paths are refused)
    #[arg(short = 'e', long, hide = true, value_name = "COMMAND")]
    pub rsh: Option<String>,
    /// rsync's incremental recursion: taken (pagewise walks trees in parallel either way)
    #[arg(long = "no-inc-recursive", visible_alias = "no-i-r", hide = true)]
    pub no_inc_recursive: bool,
    #[arg(long = "no-sparse", hide = true)]
    pub no_sparse: bool,
    /// Keep partially transferred files (resumed by the next run)
    #[arg(long)]
    pub partial: bool,
    /// Same as --partial --progress
    #[arg(short = 'P')]
    pub partial_progress: bool,
    /// Show progress during the transfer (the whole transfer's, on stderr)
    #[arg(long)]
    pub progress: bool,
    /// Don't map uid/gid values by user/group name (a local copy keeps the numbers anyway)
    #[arg(long)]
    pub numeric_ids: bool,
    /// Set the owner and group of every copy: USER:GROUP (names or numbers; implies -o -g)
    #[arg(long, value_name = "USER:GROUP")]
    pub chown: Option<String>,
    /// Affect file and/or directory permissions: [D|F]who[+-=]perms or octal, comma-separated
    #[arg(long, value_name = "CHMOD")]
    pub chmod: Vec<String>,
    /// Create the destination's missing path components
    #[arg(long)]
    pub mkpath: bool,
    /// Read the list of source files from FILE (- for stdin): -R implied, -r not (unless given)
    #[arg(long, value_name = "FILE")]
    pub files_from: Option<PathBuf>,
    /// All *-from/filter files are delimited by 0s
    #[arg(short = '0', long)]
    pub from0: bool,
    /// Exclude files matching PATTERN
    #[arg(long, value_name = "PATTERN", allow_hyphen_values = true, value_parser = rule(RuleKind::Exclude))]
    pub exclude: Vec<Rule>,
    /// Read exclude patterns from FILE
    #[arg(long, value_name = "FILE", value_parser = rule_file(RuleKind::Exclude))]
    pub exclude_from: Vec<Rule>,
    /// Don't exclude files matching PATTERN
    #[arg(long, value_name = "PATTERN", allow_hyphen_values = true, value_parser = rule(RuleKind::Include))]
    pub include: Vec<Rule>,
    /// Read include patterns from FILE
    #[arg(long, value_name = "FILE", value_parser = rule_file(RuleKind::Include))]
    pub include_from: Vec<Rule>,
    /// Add a file-filtering RULE
    #[arg(short = 'f', long, value_name = "RULE", allow_hyphen_values = true, value_parser = rule(RuleKind::Filter))]
    pub filter: Vec<Rule>,
    /// Increase verbosity
    #[arg(short = 'v', long, action = ArgAction::Count)]
    pub verbose: u8,
    /// Suppress non-error messages
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Output a change-summary for all updates (-ii: unchanged entries too)
    #[arg(short = 'i', long, action = ArgAction::Count)]
    pub itemize_changes: u8,
    /// Output updates using the specified FORMAT (%n %i %L %l %f %b %o %t %p %%)
    #[arg(long, value_name = "FORMAT")]
    pub out_format: Option<String>,
    /// Give some file-transfer stats
    #[arg(long)]
    pub stats: bool,
    /// Output numbers in a human-readable format (-hh: powers of 1024)
    #[arg(short = 'h', long, action = ArgAction::Count)]
    pub human_readable: u8,
    /// Numbers without separators
    #[arg(long = "no-human-readable", visible_alias = "no-h")]
    pub no_human_readable: bool,
    /// Leave high-bit characters unescaped in output
    #[arg(short = '8', long = "8-bit-output")]
    pub eight_bit_output: bool,
    /// Fine-grained informational verbosity: progress2, stats, name, del, backup, skip
    /// (levels and NONE/ALL taken)
    #[arg(long, value_name = "FLAGS")]
    pub info: Vec<String>,
    /// rsync's debug flags: taken and ignored (pagewise has no such debug output)
    #[arg(long, value_name = "FLAGS", hide = true)]
    pub debug: Vec<String>,
    /// Log what we're doing to the specified FILE
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Limit I/O bandwidth; KBytes per second, or with a unit (50M, 1.5G); 0 for no limit.
    /// `auto` (pagewise): back off when others need the disk (see pagewise copy --help)
    #[arg(long, value_name = "RATE|auto", value_parser = super::rules::bwlimit)]
    pub bwlimit: Option<super::rules::BwLimit>,
    /// The copy's I/O priority (pagewise; ionice): idle or best-effort[:0-7]. Only the bfq
    /// and mq-deadline I/O schedulers serve priorities; with none or kyber a notice says so
    #[arg(long, value_name = "CLASS", value_parser = io_priority)]
    pub ionice: Option<IoPriority>,
    /// The program to run on a remote host: taken and ignored for local paths, as rsync does
    #[arg(long, value_name = "PROGRAM", hide = true)]
    pub rsync_path: Option<String>,
    /// Taken for rsync compatibility (arguments are never split by a remote shell here)
    #[arg(short = 's', long, visible_alias = "secluded-args", hide = true)]
    pub protect_args: bool,
    /// Taken for rsync compatibility (arguments are never split by a remote shell here)
    #[arg(long, hide = true)]
    pub old_args: bool,
    /// How the page cache is kept clean (pagewise): auto, dontcache, direct, drop-behind,
    /// buffered
    #[arg(long, value_enum, default_value_t = super::CacheArg::Auto)]
    pub cache: super::CacheArg,
    /// Files copied in parallel (pagewise)
    #[arg(short = 'j', long = "threads", value_name = "N", default_value_t = copy::DEFAULT_THREADS, value_parser = crate::cli::args::at_least_one)]
    pub threads: usize,
    /// fsync each file before it is put in place, and the directories at the end (pagewise)
    #[arg(long)]
    pub fsync: bool,
    /// Re-read every copied file from disk and compare with the source (pagewise)
    #[arg(long)]
    pub verify: bool,
    /// One JSON document on stdout (pagewise; schema: docs/json.md, as copy's; -J is rsync's
    /// --omit-link-times here)
    #[arg(long, conflicts_with = "json_lines")]
    pub json: bool,
    /// One JSON line per entry, then a summary line (pagewise)
    #[arg(long)]
    pub json_lines: bool,
}

/// rsync's exit codes.
mod code {
    pub const SYNTAX: i32 = 1;
    pub const FILE_IO: i32 = 11;
    pub const SIGNAL: i32 = 20;
    pub const PARTIAL: i32 = 23;
    pub const DEL_LIMIT: i32 = 25;
}

/// What `-v`, `-i`, `--info` and `--stats` ask to see.
#[derive(Debug, Clone, Copy, Default)]
pub struct Verbosity {
    /// Names of changed entries (`-v`, `--info=name`): 1 changed, 2 unchanged too.
    pub names: u8,
    /// Itemize codes in front of the names.
    pub itemize: bool,
    /// Deletions (`deleting NAME`).
    pub del: bool,
    /// The closing two lines (`-v`, `--info=stats1`); 2: the whole --stats block.
    pub stats: u8,
    /// Backups made (`--info=backup`).
    pub backup: bool,
    /// Files left as newer (`--info=skip`).
    pub skip: bool,
    /// The progress line.
    pub progress: bool,
    /// Unsafe symlinks left out (`-v`, `--info=symsafe`).
    pub symsafe: bool,
}

/// Applies `--info` FLAGS (rsync's names, with levels; `NONE`, `ALL`) to `v`.
fn info(v: &mut Verbosity, flags: &str) -> Result<(), CliError> {
    for f in flags.split(',').filter(|f| !f.is_empty()) {
        let lower = f.to_ascii_lowercase();
        let (name, level) = match lower.find(|c: char| c.is_ascii_digit()) {
            Some(i) => (&lower[..i], lower[i..].parse::<u8>().unwrap_or(1)),
            None => (lower.as_str(), 1),
        };
        match name {
            "none" => *v = Verbosity::default(),
            "all" => {
                v.names = v.names.max(1);
                v.del = true;
                v.stats = v.stats.max(1);
                v.backup = true;
                v.skip = true;
            }
            "name" => v.names = level,
            "del" => v.del = level > 0,
            "stats" => v.stats = level,
            "backup" => v.backup = level > 0,
            "skip" => v.skip = level > 0,
            "progress" => v.progress = level > 0,
            "symsafe" => v.symsafe = level > 0,
            "flist" | "copy" | "misc" | "mount" | "nonreg" | "remove" => {}
            other => {
                return Err(CliError::Usage(format!(
                    "--info: unknown flag '{other}' (rsync's: backup, copy, del, flist, misc, mount, name, nonreg, progress, remove, skip, stats, symsafe; NONE, ALL)"
                )))
            }
        }
    }
    Ok(())
}

/// `host:path` (rsync's remote syntax, a colon before any slash) or `rsync://`.
fn remote(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    if b.starts_with(b"rsync://") {
        return true;
    }
    let colon = b.iter().position(|&c| c == b':');
    let slash = b.iter().position(|&c| c == b'/');
    matches!((colon, slash), (Some(c), s) if c > 0 && s.is_none_or(|s| c < s)) && !p.exists()
}

/// A user or group for --chown: a number, or a name looked up in the system's database.
fn id_of(s: &str, group: bool) -> Result<u32, CliError> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let found = match group {
        true => sys::group_id(s),
        false => sys::user_id(s),
    };
    found.ok_or_else(|| {
        CliError::Usage(format!(
            "--chown: unknown {} '{s}'",
            if group { "group" } else { "user" }
        ))
    })
}

/// The paths --files-from lists (lines, or NUL-separated with -0; `#` and `;` lines are
/// comments as rsync's, and empty lines skipped), each `BASE/./PATH`. At most 16 MiB per
/// name and 100 million names.
fn read_files_from(file: &Path, base: &Path, from0: bool) -> Result<Vec<PathBuf>, CliError> {
    const MAX_NAME: usize = 16 << 20;
    const MAX_NAMES: usize = 100_000_000;
    let fail = |what: &str, e: std::io::Error| {
        CliError::Usage(format!(
            "--files-from {}: {what} failed: {e}",
            file.display()
        ))
    };
    let mut reader: Box<dyn BufRead> = if file == Path::new("-") {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        let f = std::fs::File::open(file).map_err(|e| fail("open", e))?;
        Box::new(std::io::BufReader::new(f))
    };
    let sep = if from0 { 0 } else { b'\n' };
    let mut out = Vec::new();
    loop {
        let mut name = Vec::new();
        let n = std::io::Read::take(&mut reader, MAX_NAME as u64 + 1)
            .read_until(sep, &mut name)
            .map_err(|e| fail("read", e))?;
        if n == 0 {
            break;
        }
        if name.last() == Some(&sep) {
            name.pop();
        } else if name.len() > MAX_NAME {
            return Err(CliError::Usage(format!(
                "--files-from {}: a name longer than 16 MiB",
                file.display()
            )));
        }
        if !from0 && name.last() == Some(&b'\r') {
            name.pop();
        }
        if name.is_empty() || (!from0 && (name[0] == b'#' || name[0] == b';')) {
            continue;
        }
        if out.len() >= MAX_NAMES {
            return Err(CliError::Usage(format!(
                "--files-from {}: more than 100 million names",
                file.display()
            )));
        }
        let rel = name.strip_prefix(b"/").unwrap_or(&name).to_vec();
        let mut p = base.as_os_str().as_bytes().to_vec();
        if !p.ends_with(b"/") {
            p.push(b'/');
        }
        p.extend_from_slice(b"./");
        p.extend_from_slice(&rel);
        out.push(PathBuf::from(OsString::from_vec(p)));
    }
    Ok(out)
}

/// How the deletions are timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeleteWhen {
    None,
    /// During the transfer, directory by directory.
    During,
    /// All of them before anything is copied.
    Before,
    /// All of them after everything is copied (--delete-after, --delete-delay).
    After,
}

/// The command line taken apart: the library's options and what the CLI does around them.
struct Plan {
    opts: CopyOptions,
    delete: DeleteWhen,
    /// The destination directory to make first (rsync makes the last component; --mkpath all).
    make_dest: Option<(PathBuf, bool)>,
    names: Names,
    verbosity: Verbosity,
    human: u8,
    out_format: Option<Vec<itemize::Piece>>,
}

fn usage(msg: impl Into<String>) -> CliError {
    CliError::Usage(msg.into())
}

/// The library's options from rsync's command line, checked.
fn plan(a: &SyncArgs) -> Result<Plan, CliError> {
    let (dest, sources) = match a.paths.split_last() {
        Some((dest, sources)) if !sources.is_empty() => (dest.clone(), sources.to_vec()),
        _ => {
            return Err(usage(
                "sync needs a source and a destination: pagewise sync [OPTIONS] SRC... DEST",
            ))
        }
    };
    if let Some(p) = a.paths.iter().find(|p| remote(p)) {
        return Err(usage(format!(
            "{}: remote paths are not supported by pagewise sync: mount it (NFS, sshfs) or use rsync over ssh for the transfer",
            p.display()
        )));
    }
    let archive = a.archive;
    let on = |flag: bool, no: bool| (flag || archive) && !no;
    let files_from = a.files_from.is_some();
    // rsync: --files-from turns off -a's -r (an explicit -r stays).
    let recursive = (a.recursive || (archive && !files_from)) && !a.no_recursive;
    let relative = a.relative || files_from;
    let mut sources = sources;
    if let Some(list) = &a.files_from {
        if sources.len() != 1 {
            return Err(usage(
                "--files-from takes one source directory (the base of the listed names)",
            ));
        }
        sources = read_files_from(list, &sources[0], a.from0)?;
        if sources.is_empty() {
            return Err(usage(format!(
                "--files-from {}: no names in it",
                list.display()
            )));
        }
    }
    // A directory without -r (and not listed in --files-from) is skipped, as rsync says.
    if !recursive && !files_from {
        sources.retain(|s| {
            let dir = std::fs::metadata(s).is_ok_and(|m| m.is_dir());
            if dir && !a.quiet {
                eprintln!("skipping directory {}", s.display());
            }
            !dir
        });
        if sources.is_empty() {
            return Err(usage(
                "nothing to copy: every source is a directory and -r (or -a) is not given",
            ));
        }
    }
    let delete = match (
        a.delete || a.delete_excluded,
        a.delete_before,
        a.delete_after || a.delete_delay,
        a.delete_during,
    ) {
        (_, true, true, _) | (_, true, _, true) | (_, _, true, true) => {
            return Err(usage("you may not pass more than one --delete-WHEN option"))
        }
        (_, true, _, _) => DeleteWhen::Before,
        (_, _, true, _) => DeleteWhen::After,
        (_, _, _, true) | (true, _, _, _) => DeleteWhen::During,
        _ => DeleteWhen::None,
    };
    if a.delete_excluded && delete == DeleteWhen::None {
        unreachable!("--delete-excluded is a delete");
    }
    let preserve = Preserve {
        perms: on(a.perms, a.no_perms) || (a.acls && !a.no_acls),
        owner: on(a.owner, a.no_owner) || a.chown.as_deref().is_some_and(|c| !c.starts_with(':')),
        group: on(a.group, a.no_group) || a.chown.as_deref().is_some_and(|c| c.contains(':')),
        times: on(a.times, a.no_times),
        xattrs: a.xattrs && !a.no_xattrs,
        acls: a.acls && !a.no_acls,
    };
    let links = if !on(a.links, a.no_links) && !a.copy_links {
        Links::Skip
    } else if a.copy_unsafe_links {
        Links::FollowUnsafe
    } else if a.safe_links {
        Links::SkipUnsafe
    } else {
        Links::Copy
    };
    let devices_specials = on(a.devices_specials, a.no_devices_specials);
    let existing = if a.checksum {
        Existing::Checksum
    } else if a.ignore_existing {
        Existing::Keep
    } else if a.ignore_times {
        Existing::ReplaceFiles
    } else if a.size_only {
        Existing::SizeOnly
    } else {
        Existing::QuickCheck
    };
    let mut alt_dests = Vec::new();
    for (dirs, kind) in [
        (&a.compare_dest, AltKind::Compare),
        (&a.copy_dest, AltKind::Copy),
        (&a.link_dest, AltKind::Link),
    ] {
        alt_dests.extend(dirs.iter().map(|d| AltDest {
            dir: d.clone(),
            kind,
        }));
    }
    if alt_dests.len() > 20 {
        return Err(usage(
            "--link-dest, --copy-dest, --compare-dest: at most 20 directories, as rsync",
        ));
    }
    let backup = (a.backup || a.backup_dir.is_some()).then(|| Backup {
        dir: a.backup_dir.clone(),
        suffix: a.suffix.clone().unwrap_or_else(|| match a.backup_dir {
            Some(_) => OsString::new(),
            None => OsString::from("~"),
        }),
    });
    if let Some(b) = &backup {
        if b.suffix.as_bytes().contains(&b'/') {
            return Err(usage(format!(
                "--suffix cannot contain slashes: {}",
                b.suffix.to_string_lossy()
            )));
        }
        if b.dir.is_none() && b.suffix.is_empty() {
            return Err(usage(
                "--suffix cannot be empty without --backup-dir (the backup would replace the file)",
            ));
        }
    }
    let chown = match &a.chown {
        None => (None, None),
        Some(spec) => {
            let (u, g) = match spec.split_once(':') {
                Some((u, g)) => (u, g),
                None => (spec.as_str(), ""),
            };
            let uid = (!u.is_empty()).then(|| id_of(u, false)).transpose()?;
            let gid = (!g.is_empty()).then(|| id_of(g, true)).transpose()?;
            (uid, gid)
        }
    };
    let mut chmod = Vec::new();
    for c in &a.chmod {
        chmod.extend(copy::modes::parse_chmod(c)?);
    }
    let mut f = filters_of(
        [
            &a.exclude,
            &a.include,
            &a.exclude_from,
            &a.include_from,
            &a.filter,
        ],
        a.delete_excluded,
    )?;
    // rsync protects its own backups from --delete (a `P *~` rule) when they are kept beside
    // the originals.
    if let (Some(b), true) = (&backup, delete != DeleteWhen::None && !a.delete_excluded) {
        if b.dir.is_none() {
            let mut rule = b"P *".to_vec();
            rule.extend_from_slice(b.suffix.as_bytes());
            f.add(RuleKind::Filter, &rule)?;
        }
    }
    let mut v = Verbosity {
        names: a
            .verbose
            .min(2)
            .max(u8::from(a.itemize_changes > 0))
            .max(a.itemize_changes.min(2)),
        itemize: a.itemize_changes > 0,
        del: a.verbose > 0 || a.itemize_changes > 0,
        stats: if a.stats { 2 } else { u8::from(a.verbose > 0) },
        backup: a.verbose > 1,
        skip: a.verbose > 1,
        progress: a.progress || a.partial_progress,
        symsafe: a.verbose > 0,
    };
    if a.itemize_changes == 0 && a.verbose < 2 {
        v.names = v.names.min(1);
    }
    for i in &a.info {
        info(&mut v, i)?;
    }
    let out_format = a
        .out_format
        .as_deref()
        .map(itemize::parse_format)
        .transpose()?;
    if out_format.is_some() {
        v.names = v.names.max(1);
    }
    if a.quiet {
        v = Verbosity {
            progress: false,
            ..Verbosity::default()
        };
    }
    // rsync makes the destination directory when it is to hold more than one entry (or ends
    // in '/'); only its last component unless --mkpath.
    let dest_bytes = dest.as_os_str().as_bytes();
    let many = sources.len() > 1
        || relative
        || sources
            .iter()
            .any(|s| std::fs::metadata(s).is_ok_and(|m| m.is_dir()));
    let make_dest =
        (!dest.exists() && (many || dest_bytes.ends_with(b"/"))).then(|| (dest.clone(), a.mkpath));
    // --mkpath for a file copied to a new name: its directories.
    let make_dest = make_dest.or_else(|| {
        (a.mkpath && !dest.exists())
            .then(|| {
                dest.parent()
                    .filter(|p| !p.as_os_str().is_empty() && !p.exists())
            })
            .flatten()
            .map(|p| (p.to_path_buf(), true))
    });
    let dest_dir = match &make_dest {
        Some((d, _)) if *d == dest => dest.clone(),
        _ if dest.is_dir() => dest.clone(),
        _ => dest.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    let layout = if relative {
        Layout::RsyncRelative
    } else {
        Layout::Rsync
    };
    let opts = CopyOptions {
        sources,
        dest: dest.clone(),
        strategy: Strategy::from(a.cache),
        preserve,
        hard_links: a.hard_links && !a.no_hard_links,
        links,
        devices: devices_specials || a.devices,
        specials: devices_specials || a.specials,
        modify_window: a.modify_window,
        only_existing: a.existing,
        alt_dests,
        backup,
        max_delete: a.max_delete,
        remove_source_files: a.remove_source_files,
        chmod,
        chown,
        layout,
        implied_dirs: !a.no_implied_dirs,
        omit_link_times: a.omit_link_times,
        delay_updates: a.delay_updates,
        force: a.force || delete != DeleteWhen::None,
        inplace: if a.append_verify {
            copy::InPlace::AppendVerify
        } else if a.append {
            copy::InPlace::Append
        } else if a.inplace {
            copy::InPlace::Whole
        } else {
            copy::InPlace::No
        },
        recursive,
        skip_newer: a.update,
        // rsync: --backup without --backup-dir implies -O.
        omit_dir_times: a.omit_dir_times || (a.backup && a.backup_dir.is_none()),
        dereference: if a.copy_links {
            Dereference::Always
        } else {
            Dereference::Never
        },
        existing,
        delete: delete == DeleteWhen::During,
        dry_run: a.dry_run,
        items: true,
        filters: f,
        one_file_system: a.one_file_system,
        max_size: a.max_size,
        min_size: a.min_size,
        bwlimit: super::rules::BwLimit::options(a.bwlimit).0,
        bwlimit_auto: super::rules::BwLimit::options(a.bwlimit).1,
        io_priority: a.ionice,
        partial: a.partial || a.partial_progress,
        fsync: a.fsync,
        verify: a.verify,
        threads: a.threads,
        ..Default::default()
    };
    opts.validate()?;
    Ok(Plan {
        opts,
        delete,
        make_dest,
        names: Names::new(&dest_dir, a.eight_bit_output),
        verbosity: v,
        human: if a.no_human_readable {
            0
        } else {
            1 + a.human_readable
        },
        out_format,
    })
}

/// Makes the destination directory (its last component, or all with --mkpath), saying so
/// as rsync does.
fn make_dest(
    dest: &Path,
    all: bool,
    dry_run: bool,
    say: bool,
    last_by_engine: bool,
) -> Result<(), CliError> {
    if !dry_run {
        let parent = dest.parent().filter(|p| !p.as_os_str().is_empty());
        let r = match (all, last_by_engine) {
            (true, false) => std::fs::create_dir_all(dest),
            (false, false) => std::fs::create_dir(dest),
            // The copy makes DEST itself (and reports it as rsync does, `cd+++++++++ ./`,
            // or against an alternate destination's counterpart); here its parents.
            (true, true) => parent.map_or(Ok(()), std::fs::create_dir_all),
            (false, true) => match parent.is_none_or(Path::is_dir) {
                true => Ok(()),
                false => Err(std::io::Error::from_raw_os_error(libc::ENOENT)),
            },
        };
        if let Err(e) = r {
            return Err(CliError::file(dest.display().to_string(), "mkdir", e));
        }
    }
    if say {
        // As rsync names it: without a trailing slash.
        let b = dest.as_os_str().as_bytes();
        let trimmed = match b.len() > 1 {
            true => b.strip_suffix(b"/").unwrap_or(b),
            false => b,
        };
        println!("created directory {}", itemize::escaped(trimmed, false));
    }
    Ok(())
}

/// `-VV`: rsync's capabilities document, for what pagewise sync does with local paths.
const CAPABILITIES: &str = r#"{
  "program": "pagewise sync",
  "version": "VERSION",
  "capabilities": {
    "symlinks": true, "symtimes": true, "hardlinks": true, "hardlink_specials": true,
    "hardlink_symlinks": true, "atimes": false, "batchfiles": false, "inplace": true,
    "append": true, "ACLs": true, "xattrs": true, "iconv": false, "prealloc": true,
    "stop_at": false, "crtimes": false
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
    let plan = match plan(&a) {
        Ok(p) => p,
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
    let log = a.log_file.as_deref().map(CopyLog::open).transpose()?;
    if let Some(log) = &log {
        let paths: Vec<String> = a
            .paths
            .iter()
            .map(|p| itemize::escaped(p.as_os_str().as_bytes(), false))
            .collect();
        log.line(&format!("pagewise sync {}", paths.join(" ")));
    }
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
    use std::sync::atomic::Ordering::Relaxed;
    let order =
        (!std::io::stdout().is_terminal()).then(|| Mutex::new(itemize::Order::new(names.root())));
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
    // Deletions before or after the transfer: a pass that only deletes (nothing is created
    // or updated), before or after the pass that copies.
    let delete_pass = |o: &CopyOptions| CopyOptions {
        delete: true,
        delete_only: true,
        ..o.clone()
    };
    let set_only = |on| deleting_only.store(on, std::sync::atomic::Ordering::Relaxed);
    let mut others = Vec::new();
    if delete == DeleteWhen::Before {
        set_only(true);
        // The copy after it sets the directories' times (and reports them changed).
        let before = CopyOptions {
            omit_dir_times: true,
            ..delete_pass(&opts)
        };
        others.push(copy::copy(&before, &observer)?);
        set_only(false);
    }
    let interrupted = |r: &Vec<copy::CopyReport>| r.iter().any(|r| r.outcome.interrupted);
    let mut main = None;
    if !interrupted(&others) {
        main = Some(copy::copy(&opts, &observer)?);
    }
    let main_stopped = main.as_ref().is_some_and(|m| m.outcome.interrupted);
    if delete == DeleteWhen::After && !main_stopped {
        set_only(true);
        set_after.store(true, Relaxed);
        others.push(copy::copy(&delete_pass(&opts), &observer)?);
    }
    bar.finish();
    if let Some(o) = order {
        let mut w = std::io::stdout().lock();
        for line in o.into_inner().unwrap().into_lines() {
            let _ = w.write_all(line.as_bytes());
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let report = merge(main.unwrap_or_default(), others);
    let stats = stats.into_inner().unwrap();
    let mut text = Vec::new();
    if v.stats > 0 {
        let _ = itemize::write_stats(&mut text, &stats, &report, v.stats > 1, human, elapsed);
    }
    if let Some(log) = &log {
        for line in String::from_utf8_lossy(&text)
            .lines()
            .filter(|l| !l.is_empty())
        {
            log.line(line);
        }
    }
    out.report(&report, &report.outcome.errors, |r| {
        let o = &r.outcome;
        let notices: &[String] = if a.quiet { &[] } else { &o.notices };
        crate::cli::render::report_problems("sync", &o.errors, o.error_count, notices);
        let _ = std::io::stdout().write_all(&text);
        if r.deletes_skipped > 0 {
            eprintln!(
                "Deletions stopped due to --max-delete limit ({} skipped)",
                r.deletes_skipped
            );
        }
    });
    let code = if report.outcome.interrupted {
        ExitCode::Status(code::SIGNAL)
    } else if report.outcome.error_count > 0 {
        ExitCode::Status(code::PARTIAL)
    } else if report.deletes_skipped > 0 {
        ExitCode::Status(code::DEL_LIMIT)
    } else {
        ExitCode::Success
    };
    Ok(match log.as_ref().and_then(CopyLog::failure) {
        Some(msg) => {
            eprintln!("{msg}");
            match code {
                ExitCode::Success => ExitCode::Status(code::PARTIAL),
                c => c,
            }
        }
        None => code,
    })
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
