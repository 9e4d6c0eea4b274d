//! What `run` and [`Dropping`](super::Dropping) are asked to do: [`RunOptions`] and the
//! drop-behind part both share, [`DroppingOptions`].

use crate::assist::Prefetch;
use crate::residency::Method;
use crate::trace::{command, FollowOptions};
use std::ffi::OsString;

/// `run`'s drop-behind limit: [`DroppingOptions::max_cache`] of [`RunOptions::default`] (the
/// CLI's `--max-cache` default), 64 MiB.
pub const DEFAULT_MAX_CACHE: u64 = 64 << 20;

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The command and its arguments (`command[0]` is the program, looked up in `PATH`).
    /// Default: empty, which [`RunOptions::validate`] refuses.
    pub command: Vec<OsString>,
    /// How the command's pages are followed, measured and dropped: `max_cache` (default
    /// here: `Some(`[`DEFAULT_MAX_CACHE`]`)`), `keep_written`, `follow`, `method`.
    pub dropping: DroppingOptions,
    /// Also prefetch for the command (`run --assist`); its prefetches are dropped like its own
    /// pages, and its events come through `dropping.follow`. Default: None.
    pub assist: Option<Prefetch>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            command: Vec::new(),
            dropping: DroppingOptions {
                max_cache: Some(DEFAULT_MAX_CACHE),
                ..DroppingOptions::default()
            },
            assist: None,
        }
    }
}

impl RunOptions {
    /// Checks the options: there must be a command.
    pub fn validate(&self) -> Result<(), crate::Error> {
        if self.command.is_empty() {
            return Err(command::no_command());
        }
        Ok(())
    }
}

/// Options of [`Dropping::start`], and the drop-behind part of [`RunOptions`] (its
/// `dropping`): how pages are followed, measured and dropped.
#[derive(Debug, Clone, Default)]
pub struct DroppingOptions {
    /// Drop the pages whenever more than this many bytes of them are outstanding (None: no
    /// limit, only at the end). Default: None (`run`'s default:
    /// `Some(`[`DEFAULT_MAX_CACHE`]`)`).
    pub max_cache: Option<u64>,
    /// Leave the pages of files written meanwhile alone. Default: false.
    pub keep_written: bool,
    /// The ring buffer per CPU and how the events are followed.
    /// Default: [`FollowOptions::default`].
    pub follow: FollowOptions,
    /// How the pages are measured before and after each drop: [`Method::Auto`] uses
    /// cachestat(2) where the kernel has it (probed at run time) and mmap+mincore(2) where it
    /// does not (Linux < 6.5); [`Method::Mincore`] forces the latter. Default:
    /// [`Method::Auto`].
    pub method: Method,
}
