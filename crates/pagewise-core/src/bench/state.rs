//! Putting a command's read set in the state a run needs, and checking it against the kernel:
//! `hot` (every page of the set cached), `cold` (none), `preloaded` (cold, then the set read in
//! disk order by the preloader `load --trace` is, timed apart), `cold-all` (the whole page
//! cache dropped: drop_caches, root, only on request).

use super::options::{BenchError, State};
use super::set::without_where;
use crate::replay::{replay_with, Order, Settings};
use crate::trace::pages::{ends, file_ranges, traced_cached, Ranges};
use crate::trace::{OpenFiles, Trace};
use crate::verb::{Observer, Tally};
use std::os::fd::AsFd;

/// Reads in flight of the preload (`load --trace`'s default depth).
const PRELOAD_DEPTH: usize = crate::load::DEFAULT_TRACE_DEPTH;
/// Longest request of the preload (`load --trace`'s).
const PRELOAD_REQUEST: u64 = 1 << 20;

/// A read set, opened: its files (each checked to be the recorded file), its byte ranges.
pub(crate) struct SetFiles {
    pub trace: Trace,
    files: OpenFiles,
    ranges: Ranges,
    /// Bytes of the ranges within the files' sizes now.
    pub bytes: u64,
    /// What was left out for being mapped by other processes.
    pub held: Held,
}

/// Files of a set that other processes map: their pages cannot be dropped while mapped, so
/// they are left out of the set (cached in every state, as in any real start of the command).
#[derive(Debug, Clone, Default)]
pub(crate) struct Held {
    pub files: u64,
    pub bytes: u64,
    /// The first of them, and how many processes map it.
    pub first: Option<(String, u64)>,
}

/// [`SetFiles::mapped_elsewhere`]'s answer: by file index, and what to report.
#[derive(Debug, Default)]
struct Mapped {
    which: Vec<bool>,
    files: u64,
    held: Held,
}

/// What the kernel showed of a set right before a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    pub cached: u64,
    pub bytes: u64,
}

impl SetFiles {
    /// Opens the set's files. Refused (before anything is done) when the residency of one of
    /// them cannot be known: a state could not be checked there, and "cold" would be a guess.
    pub fn open(command: &str, trace: Trace) -> Result<SetFiles, crate::Error> {
        let set = Self::open_all(command, trace)?;
        Ok(match set.without_mapped(command)? {
            Some(less) => less,
            None => set,
        })
    }

    /// [`SetFiles::open`] keeping the files other processes map.
    fn open_all(command: &str, trace: Trace) -> Result<SetFiles, crate::Error> {
        let files = OpenFiles::open(&trace, false);
        let ranges = file_ranges(&trace, 0, &ends(&trace, &files)?)?;
        let set = SetFiles {
            trace,
            files,
            ranges,
            bytes: 0,
            held: Held::default(),
        };
        let c = traced_cached(&set.files, &set.ranges);
        if c.unknown > 0 {
            return Err(BenchError::UnknownResidency {
                command: command.to_string(),
                files: c.unknown,
            }
            .into());
        }
        Ok(SetFiles {
            bytes: c.bytes,
            ..set
        })
    }

    /// This set less the files other processes map now (None when none is), what was left out
    /// before added to what is left out now. /proc is read once: the rest is reopened as it is.
    pub fn without_mapped(&self, command: &str) -> Result<Option<SetFiles>, crate::Error> {
        let m = self.mapped_elsewhere();
        if m.files == 0 {
            return Ok(None);
        }
        let (trace, bytes) = without_where(&self.trace, |i, _| m.which[i]);
        let mut set = SetFiles::open_all(command, trace)?;
        set.held = Held {
            files: self.held.files + m.files,
            bytes: self.held.bytes + bytes,
            first: self.held.first.clone().or(m.held.first),
        };
        Ok(Some(set))
    }

    /// Which files of the set a process maps now (/proc/*/maps; pagewise maps none of them).
    fn mapped_elsewhere(&self) -> Mapped {
        let n = self.trace.files.len();
        let mut ids = Vec::new();
        for f in 0..n as u32 {
            if let Some(fd) = self.files.get(f, false) {
                if let Ok(st) = crate::sys::fstat(fd.as_fd()) {
                    ids.push((f as usize, crate::sys::FileId::from_dev(st.dev, st.ino)));
                }
            }
        }
        let keys: Vec<_> = ids.iter().map(|(_, k)| *k).collect();
        let mappers = crate::evict::find_mappers(&keys);
        let mut m = Mapped {
            which: vec![false; n],
            ..Mapped::default()
        };
        for (i, k) in ids {
            let Some(procs) = mappers.get(&k).filter(|p| !p.is_empty()) else {
                continue;
            };
            m.which[i] = true;
            m.files += 1;
            if m.held.first.is_none() {
                m.held.first = Some((
                    self.trace.files[i].name().display().to_string(),
                    procs.len() as u64,
                ));
            }
        }
        m.held.files = m.files;
        m
    }

    /// Files of the set opened, and skipped (gone since the recording, or unreachable).
    pub fn files(&self) -> (u64, u64) {
        (self.files.opened(), self.files.missing)
    }

    /// What of the set is cached now.
    pub fn seen(&self) -> Seen {
        let c = traced_cached(&self.files, &self.ranges);
        Seen {
            cached: c.cached,
            bytes: c.bytes,
        }
    }

    /// Drops the set's pages (dirty ones written back first).
    pub fn make_cold(&self) {
        crate::evict::drop_ranges(&self.trace, &self.files, &self.ranges, &Tally::new(), &());
    }

    /// Reads the set in disk order, exactly its pages (the preloader); returns how long it took,
    /// seconds.
    pub fn preload(&self, observer: &dyn Observer) -> Result<f64, crate::Error> {
        let settings = Settings {
            order: Order::Disk,
            direct: false,
            merge_gap: 0,
            depth: Some(PRELOAD_DEPTH),
            max_request: PRELOAD_REQUEST,
        };
        let r = replay_with(&self.trace, &self.files, &settings, observer)?;
        Ok(r.outcome.elapsed_s)
    }

    /// Whether `seen` is what `state` promises: every page cached (hot, preloaded), none
    /// (cold, cold-all).
    pub fn holds(state: State, seen: Seen) -> bool {
        match state {
            State::Hot | State::Preloaded => seen.cached >= seen.bytes,
            State::Cold | State::ColdAll => seen.cached == 0,
        }
    }

    /// Puts the set in `state` (the preload's time when there is one). `cold-all` writes
    /// drop_caches after a sync: the whole machine's clean page cache goes, not only the set's.
    pub fn establish(
        &self,
        state: State,
        observer: &dyn Observer,
    ) -> Result<Option<f64>, crate::Error> {
        match state {
            State::Hot => self.preload(observer).map(|_| None),
            State::Cold => {
                self.make_cold();
                Ok(None)
            }
            State::Preloaded => {
                self.make_cold();
                self.preload(observer).map(Some)
            }
            State::ColdAll => {
                drop_all_caches()?;
                Ok(None)
            }
        }
    }
}

/// `sync; echo 1 > /proc/sys/vm/drop_caches`: every clean page of the page cache, of every
/// file, dropped (root). Only `bench --states cold-all` asks for it.
fn drop_all_caches() -> Result<(), crate::Error> {
    crate::sys::sync_all();
    std::fs::write("/proc/sys/vm/drop_caches", b"1").map_err(|e| crate::Error::Io {
        path: "/proc/sys/vm/drop_caches".into(),
        op: crate::error::Op::Write,
        source: e,
    })
}
