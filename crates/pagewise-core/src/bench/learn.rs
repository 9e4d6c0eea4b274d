//! Learning a command's read set, and leaving the page cache as it was.
//!
//! The tracepoints name only pages *added* to the cache: a command whose files are cached
//! records nothing of them. So the set is learnt as the issue's seed had to do by hand: the
//! command is recorded once as things are (the witness names every file it opened, cached or
//! not), those files are dropped whole, and it is recorded again, cold; then its set is
//! dropped and it is recorded once more, until a recording finds (almost) nothing new.
//!
//! What each of those files held before is taken first ([`Snapshot`]: the first recording's
//! state minus the pages it added, which were not cached before it) and put back at the end
//! ([`Snapshot::restore`]): exactly those pages cached again, the others dropped.

use super::options::BenchError;
use super::set::{merge, without, PageSet};
use super::state::SetFiles;
use crate::error::FileError;
use crate::residency::{cached_pages, cached_spans, resident_pages};
use crate::sys::{self, Advice, FileId};
use crate::trace::witness::open_checked;
use crate::trace::{record_seen, RecordOptions, Trace};
use crate::verb::Observer;
use serde::Serialize;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A recording that finds at most this share of new pages (per mille) ends the learning.
const STABLE_PER_MILLE: u64 = 10;

/// How the read set was had.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Learning {
    /// Recordings made (0: the set was given as a trace).
    pub recordings: u32,
    /// The last recording found at most 1% new pages (always true for a given trace).
    pub stable: bool,
    /// Files the first recording saw the command open (all of them dropped before the cold
    /// recordings, and restored at the end).
    pub files_seen: u64,
}

/// What a set of files held in the cache: per file, its cached byte spans.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    files: Vec<Held>,
}

#[derive(Debug)]
struct Held {
    path: Vec<u8>,
    key: FileId,
    /// Cached `(offset, length)` spans, sorted.
    spans: Vec<(u64, u64)>,
}

/// What [`Snapshot::restore`] left.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Restored {
    /// Files put back as they were.
    pub files: u64,
    /// Their cached bytes before the bench.
    pub cached_bytes_before: u64,
    /// Their cached bytes after it (equal when the cache was left as it was; reclaim may take
    /// a little meanwhile).
    pub cached_bytes_after: u64,
    /// Files that could not be put back (gone, or unreadable now).
    pub failed: u64,
}

impl Snapshot {
    /// What `files` (key and path) hold now, less the pages of `added` (pages a recording
    /// brought in, so not cached before it). A file that cannot be opened is left out.
    pub fn take(files: &[(FileId, Vec<u8>)], added: &PageSet) -> Snapshot {
        let page = sys::page_size();
        let mut out = Snapshot::default();
        for (key, path) in files {
            let Ok(fd) = open_checked(path, *key, None) else {
                continue;
            };
            let Ok(st) = sys::fstat(fd.as_fd()) else {
                continue;
            };
            let p = Path::new(std::ffi::OsStr::from_bytes(path));
            let Some(spans) = exact_spans(p, &fd, &st) else {
                continue; // residency unknown here: nothing to put back
            };
            let k = (key.0, key.1, key.2);
            let spans = added.subtract(k, &spans, page);
            out.files.push(Held {
                path: path.clone(),
                key: *key,
                spans,
            });
        }
        out
    }

    /// Bytes cached in the snapshot.
    fn bytes(&self) -> u64 {
        self.files
            .iter()
            .flat_map(|h| h.spans.iter().map(|s| s.1))
            .sum()
    }

    /// Puts every file back: all its pages dropped (written back first), then exactly its
    /// spans read again (readahead off), and measured.
    pub fn restore(&self) -> Restored {
        let mut r = Restored {
            cached_bytes_before: self.bytes(),
            ..Restored::default()
        };
        let mut buf = vec![0u8; 1 << 20];
        for h in &self.files {
            let Ok(fd) = open_checked(&h.path, h.key, None) else {
                r.failed += 1;
                continue;
            };
            drop_whole(&fd);
            let _ = sys::fadvise(fd.as_fd(), 0, 0, Advice::Random);
            for &(off, len) in &h.spans {
                let mut at = off;
                while at < off + len {
                    let n = ((off + len - at) as usize).min(buf.len());
                    match sys::pread(fd.as_fd(), &mut buf[..n], at) {
                        Ok(0) | Err(_) => break,
                        Ok(got) => at += got as u64,
                    }
                }
            }
            let _ = sys::fadvise(fd.as_fd(), 0, 0, Advice::Normal);
            r.files += 1;
            let size = sys::fstat(fd.as_fd()).map_or(0, |s| s.size);
            r.cached_bytes_after +=
                cached_pages(fd.as_fd(), 0, size).map_or(0, |p| p * sys::page_size());
        }
        r
    }
}

/// The cached pages of a file as exact `(offset, length)` runs: cachestat finds the parts
/// that hold some (a superset: parts are merged across small gaps), mincore through a mapping
/// says which pages of those are cached. None when either cannot tell (mincore would lie about
/// a file that is not the caller's).
fn exact_spans(p: &Path, fd: &OwnedFd, st: &sys::Stat) -> Option<Vec<(u64, u64)>> {
    let page = sys::page_size();
    let mut parts = Vec::new();
    let mut each = |off: u64, len: u64| -> Result<(), FileError> {
        parts.push((off, len));
        Ok(())
    };
    if !matches!(cached_spans(p, fd.as_fd(), 0, st.size, &mut each), Ok(true)) {
        return None;
    }
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (off, len) in parts {
        let truthful = || sys::mincore_is_truthful_fd(fd.as_fd(), st);
        let bits = resident_pages(p, fd.as_fd(), off, len, truthful).ok()??;
        for (i, cached) in bits.into_iter().enumerate() {
            if !cached {
                continue;
            }
            let at = off + i as u64 * page;
            match out.last_mut() {
                Some(last) if last.0 + last.1 == at => last.1 += page,
                _ => out.push((at, page)),
            }
        }
    }
    Some(out)
}

/// Writes back and drops every page of `fd`'s file.
fn drop_whole(fd: &OwnedFd) {
    let flags = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
    let _ = sys::sync_file_range(fd.as_fd(), 0, 0, flags);
    let _ = sys::fadvise(fd.as_fd(), 0, 0, Advice::DontNeed);
}

/// One recording of `command` (its output thrown away unless `show`); a failing command is an
/// error unless `ignore_failure`.
fn record_once(
    name: &str,
    command: &[OsString],
    show: bool,
    ignore_failure: bool,
    observer: &dyn Observer,
) -> Result<(Trace, std::sync::Arc<crate::trace::Witnessed>), crate::Error> {
    let opts = RecordOptions {
        command: command.to_vec(),
        quiet: !show,
        ..RecordOptions::default()
    };
    let (r, seen) = record_seen(&opts, observer).map_err(|e| match e {
        crate::Error::TracingUnavailable { reason, .. } => crate::Error::TracingUnavailable {
            reason,
            needed_by: Some("bench"),
            hint: " to learn the read set; or give it with --trace FILE (from `pagewise record \
                   --cold` where tracing is allowed)",
        },
        e => e,
    })?;
    if r.exit_code != 0 && !ignore_failure {
        return Err(BenchError::CommandFailed {
            command: name.to_string(),
            exit_code: r.exit_code,
            during: "its recording",
        }
        .into());
    }
    Ok((r.trace, seen))
}

/// What [`learn`] found: the set, how, and what to put back at the end.
pub(crate) struct Learned {
    pub trace: Trace,
    pub learning: Learning,
    pub before: Snapshot,
}

/// Learns `command`'s read set: recorded as things are, then cold (every file it opened
/// dropped whole), then with its set dropped until a recording adds at most 1% new pages or
/// `max_recordings` were made.
pub(crate) fn learn(
    name: &str,
    command: &[OsString],
    keep: &[PathBuf],
    max_recordings: u32,
    show: bool,
    ignore_failure: bool,
    observer: &dyn Observer,
) -> Result<Learned, crate::Error> {
    let (first, seen) = record_once(name, command, show, ignore_failure, observer)?;
    let (files, before) = snapshot_and_drop(&first, &seen, keep);
    let (mut set, _) = record_once(name, command, show, ignore_failure, observer)?;
    let mut recordings = 2;
    let mut stable = false;
    while recordings < max_recordings.max(2) && !observer.cancelled() {
        SetFiles::open(name, without(&set, keep).0)?.make_cold();
        let (next, _) = record_once(name, command, show, ignore_failure, observer)?;
        recordings += 1;
        let known = PageSet::of(&set);
        let new = PageSet::of(&next).pages_not_in(&known);
        merge(&mut set, &next);
        if new * 1000 <= known.pages() * STABLE_PER_MILLE {
            stable = true;
            break;
        }
    }
    set.command = first.command.clone();
    Ok(Learned {
        trace: set,
        learning: Learning {
            recordings,
            stable,
            files_seen: files.len() as u64,
        },
        before,
    })
}

/// Every file a recording saw (the witness's, and the trace's own with a path) but those under
/// `keep` (`--keep`: neither dropped nor put back); what they held before it (a [`Snapshot`]);
/// then each of them dropped whole.
fn snapshot_and_drop(
    first: &Trace,
    seen: &crate::trace::Witnessed,
    keep: &[PathBuf],
) -> (Vec<(FileId, Vec<u8>)>, Snapshot) {
    let mut files = seen.files();
    for f in &first.files {
        let key = FileId(f.dev_major, f.dev_minor, f.ino);
        if let (Some(p), false) = (&f.path_bytes, files.iter().any(|(k, _)| *k == key)) {
            files.push((key, p.clone()));
        }
    }
    files.retain(|(_, p)| {
        !keep
            .iter()
            .any(|k| Path::new(std::ffi::OsStr::from_bytes(p)).starts_with(k))
    });
    let before = Snapshot::take(&files, &PageSet::of(first));
    for (key, path) in &files {
        if let Ok(fd) = open_checked(path, *key, None) {
            drop_whole(&fd);
        }
    }
    (files, before)
}

/// `record --cold`: the command recorded as it starts cold. A first run (its output thrown
/// away, not recorded for the trace) finds every file it opens; those are dropped whole, and
/// the command is recorded again; then the files are put back as they were before the first
/// run. Needs the witness (it is what names files whose pages were all cached).
///
/// ```no_run
/// use pagewise_core::bench::record_cold;
/// use pagewise_core::trace::RecordOptions;
/// let opts = RecordOptions { command: vec!["python3".into(), "-c".into(), "import json".into()], ..Default::default() };
/// let r = record_cold(&opts, &()).unwrap();
/// println!("{} bytes read cold", r.trace.bytes());
/// ```
pub fn record_cold(
    opts: &RecordOptions,
    observer: &dyn Observer,
) -> Result<crate::trace::RecordReport, crate::Error> {
    if !opts.follow.witness {
        return Err(crate::Error::Invalid {
            what: "cold",
            message: "a cold recording learns the command's files from the witness: drop \
                      --no-witness"
                .into(),
        });
    }
    let quiet = RecordOptions {
        quiet: true,
        ..opts.clone()
    };
    let (first, seen) = record_seen(&quiet, observer)?;
    let (files, before) = snapshot_and_drop(&first.trace, &seen, &[]);
    let cold = record_seen(opts, observer);
    let restored = before.restore();
    let (mut r, _) = cold?;
    r.outcome.notices.push(format!(
        "recorded cold: a first run (its output not shown) found the {} files the command \
         opens; they were dropped from the cache before this recording, and put back as they \
         were afterwards ({} of {} bytes cached again)",
        files.len(),
        restored.cached_bytes_after,
        restored.cached_bytes_before
    ));
    Ok(r)
}

/// The snapshot of a given set's files (`--trace`): what they hold now.
pub(crate) fn snapshot_of(trace: &Trace) -> Snapshot {
    let files: Vec<(FileId, Vec<u8>)> = trace
        .files
        .iter()
        .filter_map(|f| {
            let p = f.path_bytes.clone()?;
            Some((FileId(f.dev_major, f.dev_minor, f.ino), p))
        })
        .collect();
    Snapshot::take(&files, &PageSet::default())
}
