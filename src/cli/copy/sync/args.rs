//! `pagewise sync`'s command line: rsync's options with rsync's letters ([`SyncArgs`]), and what
//! `-v`, `-i`, `--info` and `--stats` ask to see ([`Verbosity`]).

use super::super::rules::{rsync_size, rule, rule_file, Rule};
use crate::cli::exit::CliError;
use clap::{ArgAction, Args};
use pagewise_core::copy::limits::parse_io_priority as io_priority;
use pagewise_core::copy::{self, RuleKind};
use pagewise_core::sys::IoPriority;
use std::ffi::OsString;
use std::path::PathBuf;

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
    /// Prune empty directory chains: a directory left with nothing to hold (after the
    /// filters) is not made
    #[arg(short = 'm', long)]
    pub prune_empty_dirs: bool,
    /// Transfer directories without recursing: a directory is made empty, a SRC/ gets its
    /// entries (one level)
    #[arg(short = 'd', long)]
    pub dirs: bool,
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
    /// Transform a symlink to a directory into the directory it points to
    #[arg(short = 'k', long)]
    pub copy_dirlinks: bool,
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
    /// Turn runs of zeros into holes (the source's holes are kept always)
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
    /// Stop after MINS minutes (exit 30; what is unfinished is removed, or kept with
    /// --partial)
    #[arg(
        long,
        value_name = "MINS",
        visible_alias = "time-limit",
        overrides_with = "stop_at"
    )]
    pub stop_after: Option<String>,
    /// Stop at a local time: [[[[YY]YY-]MM-]DD]T]HH:MM, YYYY-MM-DD, or :MM (exit 30)
    #[arg(long, value_name = "y-m-dTh:m", overrides_with = "stop_after")]
    pub stop_at: Option<String>,
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
    /// Preserve executability (without -p: an updated file's x bits follow the source's)
    #[arg(short = 'E', long)]
    pub executability: bool,
    /// Do what only root may (keep owners), failures reported; --no-super: not even as root
    #[arg(long = "super", overrides_with = "no_super")]
    pub super_user: bool,
    #[arg(long = "no-super", hide = true)]
    pub no_super: bool,
    /// The block size of rsync's delta transfer: taken for rsync compatibility (a local copy
    /// sends whole files)
    #[arg(short = 'B', long, hide = true, value_name = "SIZE")]
    pub block_size: Option<String>,
    /// Find a similar file as the basis of a missing one: taken for rsync compatibility (a
    /// local copy sends whole files, as rsync's does by default; no basis is read)
    #[arg(short = 'y', long, hide = true, action = ArgAction::Count)]
    pub fuzzy: u8,
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
    /// Put a partially transferred file into DIR, a subdirectory of its destination
    /// directory (implies --partial; RSYNC_PARTIAL_DIR with --partial): the next run
    /// resumes it from there; DIR is left out of the copy and of --delete, and removed
    /// when empty
    #[arg(long, value_name = "DIR")]
    pub partial_dir: Option<PathBuf>,
    /// Create temporary files in directory DIR (relative: to the destination directory); it
    /// must be on the destination's file system
    #[arg(short = 'T', long, value_name = "DIR")]
    pub temp_dir: Option<PathBuf>,
    /// Show progress during the transfer (the whole transfer's, on stderr)
    #[arg(long)]
    pub progress: bool,
    /// Don't map uid/gid values by user/group name (a local copy keeps the numbers anyway)
    #[arg(long)]
    pub numeric_ids: bool,
    /// Set the owner and group of every copy: USER:GROUP (names or numbers; implies -o -g)
    #[arg(long, value_name = "USER:GROUP", conflicts_with_all = ["usermap", "groupmap"])]
    pub chown: Option<String>,
    /// Owners by source owner: FROM:TO,... (FROM a name, wildcard, id or LOW-HIGH; TO a name
    /// or id); implies -o
    #[arg(long, value_name = "STRING")]
    pub usermap: Option<String>,
    /// Groups by source group, as --usermap; implies -g
    #[arg(long, value_name = "STRING")]
    pub groupmap: Option<String>,
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
    /// Same as --filter='dir-merge /.rsync-filter'; repeated: --filter='- .rsync-filter'
    #[arg(short = 'F', num_args = 0, default_missing_value = "dir-merge /.rsync-filter", action = clap::ArgAction::Append, value_parser = rule(RuleKind::Filter))]
    pub rsync_filter: Vec<Rule>,
    /// Auto-ignore files in the same way CVS does (rsync's list, ~/.cvsignore, $CVSIGNORE,
    /// and each directory's .cvsignore, after the other rules)
    #[arg(short = 'C', long)]
    pub cvs_exclude: bool,
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
    /// Follow symlinks owned by other users in the paths you name (the destination,
    /// --link-dest/--compare-dest/--copy-dest, --backup-dir, --files-from, --log-file): by
    /// default only root's and your own are followed, as rsync 3.5
    #[arg(long)]
    pub insecure_links: bool,
    /// Limit I/O bandwidth; KBytes per second, or with a unit (50M, 1.5G); 0 for no limit.
    /// `auto` (pagewise): back off when others need the disk (see pagewise copy --help)
    #[arg(long, value_name = "RATE|auto", value_parser = super::super::rules::bwlimit)]
    pub bwlimit: Option<super::super::rules::BwLimit>,
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
    #[arg(long, value_enum, default_value_t = super::super::CacheArg::Auto)]
    pub cache: super::super::CacheArg,
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

impl SyncArgs {
    /// --filter's rules and -F's: `dir-merge /.rsync-filter`, a second -F
    /// `- .rsync-filter`, each in its place on the command line.
    pub(super) fn filter_rules(&self) -> Vec<Rule> {
        let mut filter = self.filter.clone();
        for (i, r) in self.rsync_filter.iter().enumerate().take(2) {
            filter.push(match i {
                0 => r.clone(),
                _ => r.with_text("- .rsync-filter"),
            });
        }
        filter
    }
}

/// --usermap's or --groupmap's rules, refused with rsync's messages.
pub(super) fn id_map(
    spec: &Option<String>,
    groups: bool,
) -> Result<Vec<pagewise_core::copy::idmap::IdRule>, CliError> {
    let Some(spec) = spec else {
        return Ok(Vec::new());
    };
    pagewise_core::copy::idmap::parse_map(spec, groups).map_err(|e| match e {
        pagewise_core::Error::Invalid { message, .. } => CliError::Usage(message),
        e => e.into(),
    })
}

/// Applies `--info` FLAGS (rsync's names, with levels; `NONE`, `ALL`) to `v`.
pub(super) fn info(v: &mut Verbosity, flags: &str) -> Result<(), CliError> {
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
