//! What `bench` is asked: the commands, the states, the runs; the errors it stops with. Imports
//! nothing else of `bench`.

use crate::trace::Trace;
use serde::Serialize;
use std::ffi::OsString;
use std::path::PathBuf;

/// A state a command runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Every page of the read set cached (loaded and checked).
    Hot,
    /// Exactly the read set evicted (and checked: 0 bytes of it cached); the rest of the
    /// cache as it is — a "selectively cold" start.
    Cold,
    /// Cold, then the read set loaded in disk order (`load --trace`); the preload is timed
    /// apart.
    Preloaded,
    /// The whole page cache dropped (`drop_caches`, root): only when asked for.
    ColdAll,
}

impl State {
    /// Its name: `hot`, `cold`, `preloaded`, `cold-all`.
    pub fn name(self) -> &'static str {
        match self {
            State::Hot => "hot",
            State::Cold => "cold",
            State::Preloaded => "preloaded",
            State::ColdAll => "cold-all",
        }
    }
}

/// The states run when none are named: hot, cold, preloaded.
pub const DEFAULT_STATES: [State; 3] = [State::Hot, State::Cold, State::Preloaded];
/// Runs per command and state by default.
pub const DEFAULT_RUNS: usize = 10;
/// Most runs per command and state (`runs`, or what `min_time_s` adds).
pub const MAX_RUNS: usize = 10_000;
/// Recordings at most to learn a read set by default.
pub const DEFAULT_RECORDINGS: u32 = 4;
/// Times a state is set up again at most when the kernel does not show it before a run.
pub const MAX_SETUPS: u32 = 5;

/// One command to time.
#[derive(Debug, Clone, Default)]
pub struct BenchCommand {
    /// How it is shown (the CLI: the string given, or the arguments joined).
    pub name: String,
    /// The program and its arguments (a shell string comes as `sh -c STRING`).
    pub argv: Vec<OsString>,
    /// Its read set, when given (`--trace`); else learnt by recording.
    pub trace: Option<Trace>,
}

/// Options of [`bench`].
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The commands, at least one. Default: none, which `validate` refuses.
    pub commands: Vec<BenchCommand>,
    /// The states, each run in turn. Default: [`DEFAULT_STATES`].
    pub states: Vec<State>,
    /// Runs counted per command and state. Default: [`DEFAULT_RUNS`].
    pub runs: usize,
    /// Rounds run first and not counted. Default: 0.
    pub warmup: usize,
    /// More rounds until every command and state has run at least this long in all, seconds
    /// (at most [`MAX_RUNS`] runs). Default: 0.
    pub min_time_s: f64,
    /// Paths left out of the read set (neither evicted, loaded nor checked, nor dropped while
    /// the set is learnt): a file, or every file under a directory (the command's own output,
    /// the system's libraries). Default: none.
    pub keep: Vec<PathBuf>,
    /// A shell command run before each run (before its state is set up). Default: none.
    pub prepare: Option<String>,
    /// A shell command run after each run (hyperfine's `--conclude`). Default: none.
    pub conclude: Option<String>,
    /// Recordings at most to learn a read set. Default: [`DEFAULT_RECORDINGS`].
    pub recordings: u32,
    /// Seed of the order of the runs in a round (shuffled). Default: 0.
    pub seed: u64,
    /// A command that exits non-zero is not an error. Default: false.
    pub ignore_failure: bool,
    /// The commands' output goes to pagewise's own (else it is thrown away). Default: false.
    pub show_output: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            commands: Vec::new(),
            states: DEFAULT_STATES.to_vec(),
            runs: DEFAULT_RUNS,
            warmup: 0,
            min_time_s: 0.0,
            keep: Vec::new(),
            prepare: None,
            conclude: None,
            recordings: DEFAULT_RECORDINGS,
            seed: 0,
            ignore_failure: false,
            show_output: false,
        }
    }
}

impl BenchOptions {
    /// Checks the options: a command, each with a program; a state, none twice; runs between
    /// 1 and [`MAX_RUNS`] (warm-up rounds included); at least two recordings; `cold-all` only as
    /// root; given traces consistent.
    pub fn validate(&self) -> Result<(), crate::Error> {
        let invalid = |what, message: String| Err(crate::Error::Invalid { what, message });
        if self.commands.is_empty() || self.commands.iter().any(|c| c.argv.is_empty()) {
            return invalid("commands", "nothing to run".into());
        }
        if self.states.is_empty() {
            return invalid("states", "none".into());
        }
        let mut seen = self.states.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != self.states.len() {
            return invalid("states", "a state named twice".into());
        }
        if self.runs == 0 || self.runs.saturating_add(self.warmup) > MAX_RUNS {
            return invalid(
                "runs",
                format!(
                    "{} (+{} warm-up): between 1 and {MAX_RUNS}",
                    self.runs, self.warmup
                ),
            );
        }
        if !(self.min_time_s.is_finite() && self.min_time_s >= 0.0) {
            return invalid(
                "min_time_s",
                format!("{}: a number of seconds", self.min_time_s),
            );
        }
        if self.recordings < 2 {
            return invalid(
                "recordings",
                format!(
                    "{}: at least 2 (one as things are, one cold)",
                    self.recordings
                ),
            );
        }
        if self.states.contains(&State::ColdAll) && crate::sys::euid() != 0 {
            return invalid(
                "states",
                "cold-all writes /proc/sys/vm/drop_caches: root only".into(),
            );
        }
        for c in &self.commands {
            if let Some(t) = &c.trace {
                t.check()?;
            }
        }
        Ok(())
    }
}

/// Why `bench` stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The read set's residency cannot be known for some of its files (cachestat refused: not
    /// the caller's, not writable): no state could be checked there.
    #[error(
        "{command}: what is cached of {files} file(s) of its read set cannot be known (not \
         yours, not writable): no state could be checked; leave them out with --keep, or run as \
         their owner or root"
    )]
    UnknownResidency {
        /// The command.
        command: String,
        /// Files whose residency is unknown.
        files: u64,
    },
    /// A state could not be set up: the kernel did not show it after [`MAX_SETUPS`] tries.
    #[error(
        "{command}: the {state} state did not hold after {tries} set-ups ({cached} of {bytes} \
         bytes of its read set cached): something else is reading or reclaiming those pages"
    )]
    StateNotReached {
        /// The command.
        command: String,
        /// The state.
        state: &'static str,
        /// Tries.
        tries: u32,
        /// Cached bytes of the set at the last check.
        cached: u64,
        /// Bytes of the set.
        bytes: u64,
    },
    /// The command exited non-zero (and failures were not to be ignored).
    #[error("{command}: exited {exit_code} during {during} (ignore with --ignore-failure)")]
    CommandFailed {
        /// The command.
        command: String,
        /// Its exit code (128 + signal).
        exit_code: i32,
        /// When: "its recording", "run 3 (cold)".
        during: &'static str,
    },
    /// `--prepare` or `--conclude` failed.
    #[error("--{which} '{command}' exited {exit_code}")]
    HookFailed {
        /// `prepare` or `conclude`.
        which: &'static str,
        /// The shell command.
        command: String,
        /// Its exit code.
        exit_code: i32,
    },
    /// The read set is empty: the command read nothing that reached the page cache.
    #[error(
        "{0}: its read set is empty (it read nothing from files, or only what it wrote); \
         nothing to make hot or cold"
    )]
    EmptySet(String),
}
