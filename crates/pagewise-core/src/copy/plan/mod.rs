//! The planner: cp's rules over the sources. It refuses sources that must not be copied (the
//! same file, a directory into itself, a FIFO or device), walks the rest, creates directories
//! and symlinks itself, and feeds regular files to the workers through a bounded channel,
//! interleaved across directories and in batches of small neighbours.
//!
//! Directories are planned in parallel: each is one job on a shared LIFO stack (depth first
//! keeps it small), taken by one of a few planner threads, which read it with getdents64 and
//! stat its entries relative to its descriptor (fstatat: no path resolution per entry). A
//! destination directory that existed is read once too, and only names it holds are stat'ed:
//! an up-to-date 100k-file tree is checked with one fstatat per entry and side.
//!
//! Here: the planner threads and the top-level entries. One thread's state (and the hand-out
//! of files to the workers) in `planner`; the units of planning and what the threads share in
//! `jobs`; the walk of one directory in `dir`; the decision for each entry in `entries`; stale
//! and partial temporaries in `partial`; the top-level targets and cp's refusals in `targets`.

mod dir;
mod entries;
mod jobs;
mod listing;
mod partial;
mod planner;
mod targets;

pub(super) use targets::nesting_notice;
pub use targets::plan_targets;
pub(super) use targets::rsync_targets;

use super::choices::Layout;
use super::commit::Temps;
use super::filter::Side;
use super::options::Dereference;
use super::state::Ctx;
use super::tasks::{FileTask, Planned};
use crate::error::{FileError, Op};
use crate::sys;
use crossbeam_channel::Sender;
use entries::entry;
use jobs::{DirJob, Entry, Shared};
use planner::Planner;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use targets::refuse_source;

/// Plans every target `(source, destination)`: the top level on this thread, directories on
/// planner threads; files are sent to the workers through `tx` (dropping the last sender ends
/// the workers' loops). Returns when everything is planned.
pub(super) fn plan(
    ctx: &Ctx<'_>,
    temps: &Temps,
    targets: &[(PathBuf, PathBuf)],
    tx: Sender<Vec<FileTask>>,
) -> Planned {
    let merged = merged_roots(ctx, targets);
    let shared = Shared {
        ways_to_roots: match ctx.opts.layout {
            Layout::Cp => Default::default(),
            _ => ways_to_roots(&ctx.opts.dest, targets),
        },
        ..Default::default()
    };
    let mut top = Planner::new(ctx, temps, &shared, tx.clone());
    let mut implied = std::collections::HashSet::new();
    for ((src, dst), also) in targets.iter().zip(merged) {
        let Some(also) = also else {
            continue;
        };
        if ctx.opts.layout == Layout::RsyncRelative {
            implied_dirs(&mut top, src, dst, &mut implied);
        }
        if let Some(job) = root(&mut top, src, dst, also) {
            shared.jobs.push_all(vec![job]);
        }
    }
    top.flush();
    let threads = planner_threads(ctx.opts.threads);
    let mut parts = vec![top.into_parts()];
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (shared, tx) = (&shared, tx.clone());
                s.spawn(move || {
                    let mut p = Planner::new(ctx, temps, shared, tx);
                    run_jobs(&mut p);
                    p.into_parts()
                })
            })
            .collect();
        drop(tx);
        for h in handles {
            // A planner that panicked: its part of the plan is missing, so the copy must not
            // go on as if the plan were whole.
            match h.join() {
                Ok(part) => parts.push(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    let mut out = Planned {
        dirs: Vec::new(),
        deferred_links: Vec::new(),
    };
    for (dirs, links) in parts {
        out.dirs.extend(dirs);
        out.deferred_links.extend(links);
    }
    // Deepest first: a directory's times are set after everything inside it.
    out.dirs.sort_by_key(|d| std::cmp::Reverse(d.depth));
    out
}

/// Planner threads: directories are planned in parallel up to the cores (2 here: an
/// up-to-date 100k-file tree checked in about half the time of one thread), never more than
/// the copy's own threads.
fn planner_threads(copy_threads: usize) -> usize {
    crate::walk::default_threads()
        .clamp(1, 4)
        .min(copy_threads.max(1))
}

/// [`Shared::ways_to_roots`]: for each directory between the destination `dest` and a
/// target's destination, the names that lead down to it.
fn ways_to_roots(
    dest: &std::path::Path,
    targets: &[(PathBuf, PathBuf)],
) -> std::collections::HashMap<PathBuf, std::collections::HashSet<std::ffi::OsString>> {
    let mut ways: std::collections::HashMap<_, std::collections::HashSet<_>> = Default::default();
    for (_, dst) in targets {
        let mut at = dst.as_path();
        while let (Some(up), Some(name)) = (at.parent(), at.file_name()) {
            if !up.starts_with(dest) {
                break;
            }
            if !ways
                .entry(up.to_path_buf())
                .or_default()
                .insert(name.to_os_string())
            {
                break; // the rest of the way up is known already
            }
            at = up;
        }
    }
    ways
}

/// rsync's merge of sources into one destination (`SRC1/ SRC2/ DEST/`, or `-R` paths that
/// meet): for each target, the later targets' directories with the same destination merged
/// into it (Some(list)), or None for a target merged into an earlier one. cp's layout
/// merges nothing.
fn merged_roots(ctx: &Ctx<'_>, targets: &[(PathBuf, PathBuf)]) -> Vec<Option<Vec<PathBuf>>> {
    let mut out: Vec<Option<Vec<PathBuf>>> = vec![Some(Vec::new()); targets.len()];
    if ctx.opts.layout == Layout::Cp || targets.len() < 2 {
        return out;
    }
    let follow = ctx.opts.dereference != Dereference::Never;
    let is_dir = |s: &std::path::Path| sys::stat_path(s, follow).is_ok_and(|st| st.is_dir());
    let mut first: std::collections::HashMap<&PathBuf, usize> = Default::default();
    for (i, (src, dst)) in targets.iter().enumerate() {
        if !is_dir(src) {
            continue;
        }
        match first.get(dst) {
            Some(&j) => {
                if let Some(also) = &mut out[j] {
                    also.push(src.clone());
                }
                out[i] = None;
            }
            None => {
                first.insert(dst, i);
            }
        }
    }
    out
}

/// Plans a source named by the caller, `src` to `dst` (with the sources merged into it,
/// `also`), unless it must not be copied (reported); a directory comes back as a job to
/// queue.
fn root(
    p: &mut Planner<'_>,
    src: &std::path::Path,
    dst: &std::path::Path,
    also: Vec<PathBuf>,
) -> Option<DirJob> {
    let follow_roots = p.ctx.opts.dereference != Dereference::Never;
    let st = match sys::stat_path(src, follow_roots) {
        Ok(st) => st,
        Err(e) => {
            let op = if follow_roots { Op::Stat } else { Op::Lstat };
            p.ctx.fail(FileError::io(src, op, &e));
            return None;
        }
    };
    // rsync recreates a device or FIFO named as a source (with -D); cp's rules refuse it.
    let node_taken = p.ctx.opts.layout != Layout::Cp
        && !(st.is_dir() || st.is_file() || st.is_symlink())
        && (p.ctx.opts.devices || p.ctx.opts.specials);
    if let Some(why) = refuse_source(src, dst, &st).filter(|_| !node_taken) {
        p.ctx.fail(FileError::other(src, Op::Copy, why));
        return None;
    }
    // The destination as named (a symlink is replaced, not followed), except a directory
    // to enter, which may be reached through one.
    let dst_st = sys::stat_path(dst, false).ok().map(|d| {
        if d.is_symlink() && st.is_dir() {
            sys::stat_path(dst, true).unwrap_or(d)
        } else {
            d
        }
    });
    // rsync's name for the root: none when its contents go to the destination itself
    // (`-T`, `SRC/.`), else its own name, which the rules see.
    let opts = p.ctx.opts;
    let rel = match src.file_name() {
        Some(name) if !(opts.filters.is_empty() || st.is_dir() && dst == opts.dest) => {
            name.as_bytes().to_vec()
        }
        _ => Vec::new(),
    };
    if !rel.is_empty() && p.ctx.excluded(&rel, st.is_dir(), Side::Sender) {
        return None;
    }
    let root = Entry {
        src: src.to_path_buf(),
        dst: dst.to_path_buf(),
        fs: st.dev,
        st,
        dst_st,
        depth: 0,
        rel,
        // rsync without -r (--files-from, -d): a directory is made, not entered — unless
        // named with a trailing `/` (or `/.`): then its entries are (one level).
        contents: opts.recursive || {
            let b = src.as_os_str().as_bytes();
            b.ends_with(b"/") || b.ends_with(b"/.")
        },
        followed: false,
        also,
    };
    let partial_dir = match root.st.is_file() {
        true => p.partials.beside(p.ctx, p.temps, &root.dst),
        false => None,
    };
    let job = entry(p, root, None);
    if let Some(dir) = partial_dir {
        p.partials.drop_all(p.ctx, std::os::fd::AsFd::as_fd(&*dir));
    }
    job
}

/// rsync's -R: makes the directories on the way from the destination to `dst` (the copy of
/// `src`) that are not made yet (`done`), each from its source directory, not entered; their
/// modes and times are set at the end with the others'.
fn implied_dirs(
    p: &mut Planner<'_>,
    src: &std::path::Path,
    dst: &std::path::Path,
    done: &mut std::collections::HashSet<PathBuf>,
) {
    let dest = &p.ctx.opts.dest;
    let Ok(rel) = dst.strip_prefix(dest) else {
        return;
    };
    let parts: Vec<_> = rel.components().collect();
    // The source's base: `src` less the kept part.
    let mut base = src.to_path_buf();
    for _ in 0..parts.len() {
        base.pop();
    }
    let (mut s, mut d) = (base, dest.clone());
    // `./PATH` sends `.` itself too (rsync): the destination takes its attributes; so does a
    // `./` just before the kept part (`BASE/././PATH`, --files-from's `./PATH`), not
    // `BASE/./PATH`.
    let b = src.as_os_str().as_bytes();
    let dot = match b.windows(3).rposition(|w| w == b"/./") {
        Some(i) => &b[..i] == b"." || b[..i].ends_with(b"/."),
        None => b.starts_with(b"./"),
    };
    let mut steps: Vec<Option<&std::path::Component<'_>>> = Vec::new();
    if dot && !parts.is_empty() {
        steps.push(None);
    }
    steps.extend(parts.iter().take(parts.len().saturating_sub(1)).map(Some));
    for c in steps {
        if let Some(c) = c {
            s.push(c);
            d.push(c);
        }
        if !done.insert(d.clone()) {
            continue;
        }
        if !p.ctx.opts.implied_dirs {
            // --no-implied-dirs: made plainly where missing, nothing else.
            if c.is_some() && !p.ctx.opts.dry_run {
                let made = p.ctx.dest.parent(&d).and_then(|(dir, name)| {
                    match sys::mkdir_at(std::os::fd::AsFd::as_fd(&*dir), name, 0o777) {
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                        r => r,
                    }
                });
                if let Err(e) = made {
                    p.ctx.fail(FileError::io(&d, Op::Mkdir, &e));
                }
            }
            continue;
        }
        let st = match sys::stat_path(&s, true) {
            Ok(st) if st.is_dir() => st,
            Ok(_) => continue,
            Err(e) => {
                p.ctx.fail(FileError::io(&s, Op::Stat, &e));
                continue;
            }
        };
        let entry = Entry {
            src: s.clone(),
            dst: d.clone(),
            fs: st.dev,
            st,
            dst_st: sys::stat_path(&d, false).ok(),
            depth: 0,
            rel: Vec::new(),
            contents: false,
            // A symlink on the way to a directory is that directory (stat followed it above):
            // rsync sends an implied directory as what it resolves to
            // (`-aR src/link/sub/file` with `link -> real` makes `src/link/` a directory).
            followed: true,
            also: Vec::new(),
        };
        dir::dir(p, DirJob { entry, up: None });
    }
}

/// Plans directories from the shared stack until none is left and none is being planned
/// (another thread's directory may still add some), or the copy is stopped.
fn run_jobs(p: &mut Planner<'_>) {
    let shared = p.shared;
    // Done however the job ends (see `Taken`): a panic in it unwinds through the guard,
    // the other planners finish, and `plan` hands the panic on.
    while let Some((job, _taken)) = shared.jobs.take(p) {
        dir::dir(p, job);
    }
}
