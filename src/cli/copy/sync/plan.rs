//! rsync's command line taken apart ([`plan`]): the library's options, checked, and what the
//! CLI does around the copy — the destination to make first, how deletions are timed, how
//! entries are named and shown.

use super::super::itemize::{self, Names};
use super::super::rules::filters_of;
use super::args::{info, SyncArgs, Verbosity};
use crate::cli::exit::CliError;
use pagewise_core::copy::{
    self, AltDest, AltKind, Backup, CopyOptions, Dereference, Existing, Layout, Links, Preserve,
    RuleKind, Strategy, TempPlace,
};
use pagewise_core::sys;
use std::ffi::OsString;
use std::io::BufRead;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

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
        // Comments in either form, as rsync 3.5 (its files-from-depth test).
        if name.is_empty() || name[0] == b'#' || name[0] == b';' {
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
pub(super) enum DeleteWhen {
    None,
    /// During the transfer, directory by directory.
    During,
    /// All of them before anything is copied.
    Before,
    /// All of them after everything is copied (--delete-after, --delete-delay).
    After,
}

/// The command line taken apart: the library's options and what the CLI does around them.
pub(super) struct Plan {
    pub(super) opts: CopyOptions,
    pub(super) delete: DeleteWhen,
    /// The destination directory to make first (rsync makes the last component; --mkpath all).
    pub(super) make_dest: Option<(PathBuf, bool)>,
    pub(super) names: Names,
    pub(super) verbosity: Verbosity,
    pub(super) human: u8,
    pub(super) out_format: Option<Vec<itemize::Piece>>,
}

fn usage(msg: impl Into<String>) -> CliError {
    CliError::Usage(msg.into())
}

/// The destination and the sources (--files-from's names, directories without -r left
/// out as rsync leaves them), with whether the copy recurses and keeps relative paths.
fn paths(a: &SyncArgs) -> Result<(PathBuf, Vec<PathBuf>, bool, bool), CliError> {
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
    // A directory without -r or -d (and not listed in --files-from) is skipped, as rsync
    // says.
    if !recursive && !files_from && !a.dirs {
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
    Ok((dest, sources, recursive, relative))
}

/// When the deletions happen (--delete and its timings).
fn delete_when(a: &SyncArgs) -> Result<DeleteWhen, CliError> {
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
    Ok(delete)
}

/// Where files are written before their final names, and whether a stopped one is kept:
/// `--partial-dir` (or `RSYNC_PARTIAL_DIR` with `--partial`/`-P`, as rsync), `--temp-dir`,
/// and `--delay-updates`' `.~tmp~` (rsync's name for where finished files wait).
fn temp_place(a: &SyncArgs, dest_dir: &Path) -> Result<(TempPlace, bool), CliError> {
    let mut partial = a.partial || a.partial_progress;
    let from_env = || {
        std::env::var_os("RSYNC_PARTIAL_DIR")
            .filter(|d| partial && !d.is_empty() && !(a.inplace || a.append || a.append_verify))
            .map(PathBuf::from)
    };
    // rsync: an empty or `.` partial directory is none.
    let pdir = a
        .partial_dir
        .clone()
        .or_else(from_env)
        .filter(|d| !d.as_os_str().is_empty() && d.as_os_str() != ".");
    let mut place = TempPlace::Beside;
    if let Some(d) = &pdir {
        if a.inplace || a.append || a.append_verify {
            let what = if a.inplace { "inplace" } else { "append" };
            return Err(usage(format!("--{what} cannot be used with --partial-dir")));
        }
        let mut parts = d.components();
        let name = match (parts.next(), parts.next()) {
            (Some(std::path::Component::Normal(n)), None) => n.to_os_string(),
            _ => {
                return Err(usage(format!(
                    "--partial-dir {}: pagewise takes one name, a subdirectory of each \
                     destination directory (an absolute or nested one is not supported yet)",
                    d.display()
                )))
            }
        };
        place = TempPlace::Sub(name);
        partial = true;
    } else if a.delay_updates {
        place = TempPlace::Sub(".~tmp~".into());
    }
    if let Some(t) = &a.temp_dir {
        if place != TempPlace::Beside {
            return Err(usage(
                "--temp-dir with --partial-dir or --delay-updates: pagewise writes into that \
                 directory itself; give one of them",
            ));
        }
        let st = sys::stat_path(t, true)
            .map_err(|e| usage(format!("--temp-dir {}: stat failed: {e}", t.display())))?;
        // The destination directory, or the nearest one above it that exists.
        let dev = dest_dir
            .ancestors()
            .map(|d| match d.as_os_str().is_empty() {
                true => Path::new("."),
                false => d,
            })
            .find_map(|d| sys::stat_path(d, true).ok())
            .map(|s| s.dev);
        if !st.is_dir() || dev.is_some_and(|dev| dev != st.dev) {
            return Err(usage(format!(
                "--temp-dir {}: must be a directory on the destination's file system (pagewise \
                 links or renames finished files from there; it does not copy them across)",
                t.display()
            )));
        }
        place = TempPlace::Dir(t.clone());
    }
    Ok((place, partial))
}

/// --link-dest, --compare-dest, --copy-dest, and --backup's place and suffix, checked.
fn alt_and_backup(a: &SyncArgs) -> Result<(Vec<AltDest>, Option<Backup>), CliError> {
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
    Ok((alt_dests, backup))
}

/// What -v, -i, --info, --out-format and -q ask to see.
fn verbosity(a: &SyncArgs) -> Result<(Verbosity, Option<Vec<itemize::Piece>>), CliError> {
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
    Ok((v, out_format))
}

/// Whether the destination is to hold several entries, so that it is a directory: several
/// sources, `-R` (or --files-from), or a directory source.
pub(super) fn many_entries(sources: &[PathBuf], relative: bool) -> bool {
    sources.len() > 1
        || relative
        || sources
            .iter()
            .any(|s| std::fs::metadata(s).is_ok_and(|m| m.is_dir()))
}

/// The directory to make before the copy (with --mkpath: all of its path) and the
/// transfer's root, which names are relative to.
#[allow(clippy::type_complexity)]
fn dest_plan(
    a: &SyncArgs,
    dest: &Path,
    sources: &[PathBuf],
    relative: bool,
) -> (Option<(PathBuf, bool)>, PathBuf) {
    let dest = dest.to_path_buf();
    // rsync makes the destination directory when it is to hold more than one entry (or ends
    // in '/'); only its last component unless --mkpath.
    let dest_bytes = dest.as_os_str().as_bytes();
    let many = many_entries(sources, relative);
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
    (make_dest, dest_dir)
}

/// What is kept (-p -o -g -t -X -A, --chown), what becomes of symlinks, whether devices and
/// specials are made, and how an existing file is judged up to date.
fn kept(a: &SyncArgs) -> (Preserve, Links, bool, Existing) {
    let archive = a.archive;
    let on = |flag: bool, no: bool| (flag || archive) && !no;
    let preserve = Preserve {
        perms: on(a.perms, a.no_perms) || (a.acls && !a.no_acls),
        owner: on(a.owner, a.no_owner)
            || a.usermap.is_some()
            || a.chown.as_deref().is_some_and(|c| !c.starts_with(':')),
        group: on(a.group, a.no_group)
            || a.groupmap.is_some()
            || a.chown.as_deref().is_some_and(|c| c.contains(':')),
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
    (preserve, links, devices_specials, existing)
}

/// --chown's ids, --chmod's rules, and the filter rules (with rsync's `P *~` protecting the
/// backups kept beside their files from --delete).
#[allow(clippy::type_complexity)]
fn owners_modes_filters(
    a: &SyncArgs,
    backup: &Option<Backup>,
    delete: DeleteWhen,
) -> Result<
    (
        (Option<u32>, Option<u32>),
        Vec<copy::modes::ChmodRule>,
        copy::Filters,
    ),
    CliError,
> {
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
    let filter = a.filter_rules();
    let lists = [
        &a.exclude,
        &a.include,
        &a.exclude_from,
        &a.include_from,
        &filter,
    ];
    let mut f = filters_of(lists, a.delete_excluded)?;
    if a.cvs_exclude {
        f.add_cvs_exclude()?;
    }
    // rsync protects its own backups from --delete (a `P *~` rule) when they are kept beside
    // the originals.
    if let (Some(b), true) = (&backup, delete != DeleteWhen::None && !a.delete_excluded) {
        if b.dir.is_none() {
            let mut rule = b"P *".to_vec();
            rule.extend_from_slice(b.suffix.as_bytes());
            f.add(RuleKind::Filter, &rule)?;
        }
    }
    Ok((chown, chmod, f))
}

/// The library's options from rsync's command line, checked.
pub(super) fn plan(a: &SyncArgs) -> Result<Plan, CliError> {
    let (dest, sources, recursive, relative) = paths(a)?;
    let delete = delete_when(a)?;
    let (preserve, links, devices_specials, existing) = kept(a);
    let (alt_dests, backup) = alt_and_backup(a)?;
    let (chown, chmod, f) = owners_modes_filters(a, &backup, delete)?;
    let (v, out_format) = verbosity(a)?;
    let (make_dest, dest_dir) = dest_plan(a, &dest, &sources, relative);
    // One file to a name of its own (not into a directory).
    let renamed = (dest_dir != dest && sources.len() == 1 && !relative)
        .then(|| sources[0].file_name().map(|n| n.to_os_string()))
        .flatten();
    let (temp_place, partial) = temp_place(a, &dest_dir)?;
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
        usermap: super::args::id_map(&a.usermap, false)?,
        groupmap: super::args::id_map(&a.groupmap, true)?,
        numeric_ids: a.numeric_ids,
        layout,
        implied_dirs: !a.no_implied_dirs,
        omit_link_times: a.omit_link_times,
        executability: a.executability,
        sparse_zeros: a.sparse && !a.no_sparse,
        prune_empty_dirs: a.prune_empty_dirs,
        super_user: match (a.super_user, a.no_super) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
        copy_dirlinks: a.copy_dirlinks,
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
        bwlimit: super::super::rules::BwLimit::options(a.bwlimit).0,
        bwlimit_auto: super::super::rules::BwLimit::options(a.bwlimit).1,
        io_priority: a.ionice,
        partial,
        temp_place,
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
        names: match &renamed {
            Some(name) => Names::new(&dest_dir, a.eight_bit_output).renamed(&dest, name),
            None => Names::new(&dest_dir, a.eight_bit_output),
        },
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
pub(super) fn make_dest(
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
