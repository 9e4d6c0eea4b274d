//! [`Dropping`]: `run` for the calling process itself. Between [`Dropping::start`] and
//! [`Dropping::finish`], the pages the calling thread — and the threads and processes it
//! starts meanwhile — bring into the page cache are followed by the same tracepoint, footprint
//! and drop-behind as `run`, and dropped again at the end (or whenever more than `max_cache`
//! of them are outstanding). What the Python binding's `with pagewise.dropping():` is.

use super::options::DroppingOptions;
use super::report::DropFigures;
use super::session::{Session, Whom};
use crate::verb::{Observer, Outcome};
use serde::Serialize;

/// What a [`Dropping`] did to the page cache, in bytes (the [`DropFigures`] of `RunReport`).
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DroppingReport {
    /// Bytes brought into the cache meanwhile (the kernel's events for the followed threads
    /// and processes).
    pub added_bytes: u64,
    /// What the drops did: dropped, left and how it was measured.
    #[serde(flatten)]
    pub figures: DropFigures,
    /// Errors, notices (fallbacks taken), the time between start and finish, and
    /// `interrupted` when the observer was cancelled by the time of the finish.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Follows the calling thread's page-cache additions until [`Dropping::finish`] drops them.
/// Dropped without `finish`, it finishes all the same (the report is lost).
///
/// Perf events follow the thread that called [`Dropping::start`] and what it starts later
/// (threads and processes); threads that were already running are not followed. Needs the
/// page-cache tracepoints, as `run` does ([`crate::Error::TracingUnavailable`] otherwise).
///
/// ```
/// use pagewise_core::run::{Dropping, DroppingOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let f = dir.path().join("f");
/// std::fs::write(&f, vec![1u8; 4 << 20]).unwrap();
/// pagewise_core::evict::evict(&pagewise_core::evict::EvictOptions::new(vec![f.clone()]), &()).unwrap();
/// let d = Dropping::start(&DroppingOptions::default()).unwrap(); // root here
/// let data = std::fs::read(&f).unwrap(); // brings 4 MiB into the cache
/// let report = d.finish(&());
/// assert_eq!(data.len(), 4 << 20);
/// assert!(report.added_bytes >= 4 << 20);
/// assert!(report.figures.left_bytes < report.added_bytes); // and dropped them again
/// ```
pub struct Dropping {
    session: Option<Session>,
}

impl Dropping {
    /// Starts following the calling thread (and what it starts from now on).
    pub fn start(opts: &DroppingOptions) -> Result<Dropping, crate::Error> {
        let session = Session::start(opts, None, Whom::Caller, None)?;
        if let Err(e) = session.follower.arm() {
            session.finish();
            return Err(crate::Error::Tracefs(e));
        }
        Ok(Dropping {
            session: Some(session),
        })
    }

    /// Stops following and drops what was brought in since [`Dropping::start`] (dirty pages
    /// are written back first, unless `keep_written`); the observer is asked once whether it
    /// was cancelled, to set `interrupted`.
    pub fn finish(mut self, observer: &dyn Observer) -> DroppingReport {
        let ended = self
            .session
            .take()
            .expect("a Dropping finishes once")
            .finish();
        ended.tally.stop_requested(observer);
        DroppingReport {
            added_bytes: ended.added_bytes,
            figures: DropFigures::new(&ended.counts, ended.files, ended.lost),
            outcome: ended.tally.finish(Vec::new()),
        }
    }
}

impl Drop for Dropping {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            s.finish();
        }
    }
}
