//! What `bench` reports: per command its read set, its states' runs and statistics, the
//! differences to `hot`, the cache put back.

use super::learn::{Learning, Restored};
use super::options::State;
use super::stats::{Difference, Stats};
use crate::verb::Outcome;
use serde::Serialize;

/// What [`bench`] reports.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BenchReport {
    /// Per command: its read set, its states' runs and statistics, the differences.
    pub commands: Vec<CommandReport>,
    /// The states, in the order asked.
    pub states: Vec<State>,
    /// Runs counted per command and state asked for (`min_time_s` may add some).
    pub runs: u64,
    /// Warm-up rounds run and not counted.
    pub warmup: u64,
    /// Seed of the order of the runs.
    pub seed: u64,
    /// What starting and waiting for a program costs here (the median of 10 runs of `true`
    /// through the same path), s: part of every run's time, not subtracted.
    pub spawn_overhead_s: f64,
    /// What pagewise spent around the runs (setting up and checking states, preloads
    /// included), s per run on average: outside the timed runs.
    pub setup_s_per_run: f64,
    /// Elapsed time (learning included), `interrupted` when cancelled.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// A command's read set as benched.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SetReport {
    /// Files of the set opened.
    pub files: u64,
    /// Files of the set gone or unreachable since it was recorded (left out).
    pub files_missing: u64,
    /// Bytes of the set (what `cold` evicts and `hot` loads).
    pub bytes: u64,
    /// Bytes left out of it by `keep`.
    pub kept_out_bytes: u64,
    /// Files of it that other processes map, left out: their pages cannot be dropped while
    /// mapped (a shared library, say), so they are cached in every state — as in any real
    /// start of the command on this machine.
    pub mapped_out_files: u64,
    /// Bytes of those files' pages in the set.
    pub mapped_out_bytes: u64,
    /// The first of them (a path), when there are some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapped_out_example: Option<String>,
    /// How many processes map that one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapped_out_example_processes: Option<u64>,
    /// How it was had.
    pub learning: Learning,
}

/// One counted run.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Run {
    /// Its round (from 1; warm-up rounds are not counted).
    pub round: u64,
    /// Wall time from the start of the program to its exit, s.
    pub time_s: f64,
    /// The preload before it (`preloaded`), s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preload_s: Option<f64>,
    /// Bytes of the set cached right before the run (what the kernel showed).
    pub cached_bytes_before: u64,
    /// Bytes of the set then.
    pub set_bytes: u64,
    /// Its exit code (128 + signal).
    pub exit_code: i32,
    /// Set-ups the state took (1 when it held at once).
    pub setups: u32,
    /// Its modified Z-score is above 3.5.
    pub outlier: bool,
}

/// One state of a command.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StateReport {
    /// The state.
    pub state: State,
    /// The runs' times; null when none was counted (interrupted).
    pub stats: Option<Stats>,
    /// The preloads' times (`preloaded`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preload: Option<Stats>,
    /// Preload plus run (`preloaded`): what a start that preloads first costs in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub with_preload: Option<Stats>,
    /// Set-ups repeated because the kernel did not show the state (reclaim, another reader):
    /// those runs were not started until it held.
    pub repeated_setups: u64,
    /// Every counted run, in the order run.
    pub runs: Vec<Run>,
}

/// A state's mean less another's.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StateDifference {
    /// The state.
    pub state: State,
    /// Less this one (`hot`).
    pub minus: State,
    /// The difference, Welch's interval.
    #[serde(flatten)]
    pub difference: Difference,
}

/// One command's results.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CommandReport {
    /// The command as given.
    pub name: String,
    /// Its read set.
    pub set: SetReport,
    /// Its states, in the order asked.
    pub states: Vec<StateReport>,
    /// Each other state's mean less `hot`'s (when `hot` was run).
    pub differences: Vec<StateDifference>,
    /// The files its learning and its runs touched, put back as they were.
    pub restored: Restored,
}
