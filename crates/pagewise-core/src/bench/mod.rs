//! `bench`: the cold-start experiment in one call. Each command's read set is learnt
//! (recorded until stable, see [`learn`]) or given as a trace; then the command is run in each
//! state — `hot`, `cold` (exactly its set evicted), `preloaded` (cold, then its set read in
//! disk order, the preload timed apart), `cold-all` on request — the runs of every command and
//! state interleaved round by round, each state checked against the kernel right before its
//! run (a state that did not hold is set up again, and that repeat reported); the statistics
//! are mean ± 95% CI, median, σ, min–max and outliers, with cold − hot and preloaded − hot.
//! At the end every file it touched is cached exactly as before.
//!
//! ```text
//! bench(&BenchOptions, &dyn Observer) -> Result<BenchReport, Error>
//! ```

//! Dependencies go one way (tests/structure.rs checks there is no cycle): `options`, `stats`
//! and `set` import nothing else of bench; `state` -> options; `learn` -> set, state;
//! `report` -> learn, options, stats; `runner` -> all of those; `mod` re-exports and calls
//! `runner`.

mod learn;
pub(crate) mod options;
mod report;
mod runner;
mod set;
mod state;
pub mod stats;

pub use learn::{record_cold, Learning, Restored};
pub use options::{BenchCommand, BenchError, BenchOptions, State};
pub use options::{DEFAULT_RECORDINGS, DEFAULT_RUNS, DEFAULT_STATES, MAX_RUNS, MAX_SETUPS};
pub use report::{BenchReport, CommandReport, Run, SetReport, StateDifference, StateReport};
pub use stats::{Difference, Stats};

use crate::verb::Observer;

/// Runs the experiment: learns each command's read set (or takes the trace given), runs every
/// command in every state `runs` times, interleaved, each state checked before its run, and
/// puts the page cache back as it was. Needs the page-cache tracepoints (root) to learn a set;
/// with traces given, only read access to their files and residency that can be known (the
/// caller's files, or root).
///
/// ```no_run
/// use pagewise_core::bench::{bench, BenchCommand, BenchOptions};
/// let opts = BenchOptions {
///     commands: vec![BenchCommand {
///         name: "python3 -c 'import json'".into(),
///         argv: vec!["python3".into(), "-c".into(), "import json".into()],
///         trace: None,
///     }],
///     runs: 20,
///     ..BenchOptions::default()
/// };
/// let r = bench(&opts, &()).unwrap();
/// for s in &r.commands[0].states {
///     let st = s.stats.as_ref().unwrap();
///     println!("{}: {:.1} ms ± {:.1}", s.state.name(), st.mean_s * 1e3, st.ci95_s.unwrap_or(0.0) * 1e3);
/// }
/// ```
pub fn bench(opts: &BenchOptions, observer: &dyn Observer) -> Result<BenchReport, crate::Error> {
    opts.validate()?;
    runner::run(opts, observer)
}
