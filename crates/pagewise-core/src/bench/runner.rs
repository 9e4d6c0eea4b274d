//! The runs of `bench`: each command's set opened, the rounds (every command in every state,
//! in a shuffled order), each state set up and checked before its run, the run timed, the
//! figures made, the cache put back.

use super::learn::{self, Learning, Restored, Snapshot};
use super::options::{BenchError, BenchOptions, State, MAX_RUNS, MAX_SETUPS};
use super::report::{BenchReport, CommandReport, Run, SetReport, StateDifference, StateReport};
use super::set::without;
use super::state::{Seen, SetFiles};
use super::stats::{difference, outliers, stats};
use crate::verb::{Observer, Tally};
use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::time::Instant;

/// A command ready to run: its set opened, what to put back.
struct Ready {
    set: SetFiles,
    learning: Learning,
    kept_out_bytes: u64,
    before: Snapshot,
    runs: Vec<Vec<Run>>,
    repeated: Vec<u64>,
}

/// [`super::bench`] after validation.
pub(super) fn run(
    opts: &BenchOptions,
    observer: &dyn Observer,
) -> Result<BenchReport, crate::Error> {
    let tally = Tally::new();
    let overhead = spawn_overhead();
    let mut ready: Vec<Ready> = Vec::new();
    let prepared = prepare_all(opts, observer, &mut ready);
    let measured = prepared.and_then(|()| rounds(opts, observer, &tally, &mut ready));
    // Put back in reverse: a later command's snapshot was taken after the earlier ones'
    // learning, so the earlier snapshot has the last word on files they share.
    let restored: Vec<Restored> = ready.iter().rev().map(|r| r.before.restore()).collect();
    let setup_s = measured?;
    let counted: usize = ready.iter().flat_map(|r| r.runs.iter().map(Vec::len)).sum();
    let commands = ready
        .into_iter()
        .zip(restored.into_iter().rev())
        .zip(&opts.commands)
        .map(|((r, restored), c)| command_report(&c.name, &opts.states, r, restored))
        .collect();
    Ok(BenchReport {
        commands,
        states: opts.states.clone(),
        runs: opts.runs as u64,
        warmup: opts.warmup as u64,
        seed: opts.seed,
        spawn_overhead_s: overhead,
        setup_s_per_run: setup_s / counted.max(1) as f64,
        outcome: tally.finish(Vec::new()),
    })
}

/// Learns (or takes) and opens every command's set; what was prepared is in `ready` even when
/// a later command fails, so that its cache is put back.
fn prepare_all(
    opts: &BenchOptions,
    observer: &dyn Observer,
    ready: &mut Vec<Ready>,
) -> Result<(), crate::Error> {
    for c in &opts.commands {
        let (trace, learning, before) = match &c.trace {
            Some(t) => (
                t.clone(),
                Learning {
                    recordings: 0,
                    stable: true,
                    files_seen: 0,
                },
                learn::snapshot_of(t),
            ),
            None => {
                let l = learn::learn(
                    &c.name,
                    &c.argv,
                    &opts.keep,
                    opts.recordings,
                    opts.show_output,
                    opts.ignore_failure,
                    observer,
                )?;
                (l.trace, l.learning, l.before)
            }
        };
        let (trace, kept_out_bytes) = without(&trace, &opts.keep);
        let opened = SetFiles::open(&c.name, trace);
        let set = match opened {
            Ok(s) => s,
            Err(e) => {
                before.restore();
                return Err(e);
            }
        };
        let empty = set.bytes == 0;
        ready.push(Ready {
            learning,
            kept_out_bytes,
            set,
            before,
            runs: vec![Vec::new(); opts.states.len()],
            repeated: vec![0; opts.states.len()],
        });
        if empty {
            return Err(BenchError::EmptySet(c.name.clone()).into());
        }
    }
    Ok(())
}

/// A small xorshift: the order of a round's runs, reproducible from the seed.
fn shuffle<T>(v: &mut [T], seed: &mut u64) {
    for i in (1..v.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        v.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

/// The rounds: warm-up, `runs`, then more while a command and state has run less than
/// `min_time_s` in all. Returns the seconds spent setting up states.
fn rounds(
    opts: &BenchOptions,
    observer: &dyn Observer,
    tally: &Tally,
    ready: &mut [Ready],
) -> Result<f64, crate::Error> {
    let pairs: Vec<(usize, usize)> = (0..ready.len())
        .flat_map(|c| (0..opts.states.len()).map(move |s| (c, s)))
        .collect();
    observer.planned(((opts.runs + opts.warmup) * pairs.len()) as u64, 0);
    let mut seed = opts.seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut setup_s = 0.0;
    let mut round = 0usize;
    loop {
        let counted = round.saturating_sub(opts.warmup);
        let short = |r: &[Ready]| {
            pairs.iter().any(|&(c, s)| {
                let runs = &r[c].runs[s];
                runs.iter().map(|x| x.time_s).sum::<f64>() < opts.min_time_s
                    && runs.len() < MAX_RUNS
            })
        };
        if counted >= opts.runs && !short(ready) {
            break;
        }
        let mut order = pairs.clone();
        shuffle(&mut order, &mut seed);
        for (c, s) in order {
            if tally.stop_requested(observer) {
                return Ok(setup_s);
            }
            let state = opts.states[s];
            let r = &mut ready[c];
            let name = &opts.commands[c].name;
            hook("prepare", opts.prepare.as_deref())?;
            let t = Instant::now();
            let (preload, seen, setups) = match set_up(name, &r.set, state, observer) {
                Err(e) => {
                    // A file of the set may have come to be mapped by another process since
                    // the set was opened (its pages then stay): left out from now on, said.
                    let Some(less) = r.set.without_mapped(name)? else {
                        return Err(e);
                    };
                    tally.notice(format!(
                        "{name}: {} more file(s) of its read set came to be mapped by other \
                         processes during the bench: left out from round {} on (each run's \
                         set_bytes says what its state was checked on)",
                        less.held.files - r.set.held.files,
                        counted + 1
                    ));
                    r.set = less;
                    set_up(name, &r.set, state, observer)?
                }
                ok => ok?,
            };
            setup_s += t.elapsed().as_secs_f64();
            let (time_s, exit_code) = timed(&opts.commands[c].argv, opts.show_output)?;
            // Ctrl-C reaches the command too (the terminal's process group): a run it ended
            // is not counted, and the figures so far are the report.
            if tally.stop_requested(observer) {
                return Ok(setup_s);
            }
            if exit_code != 0 && !opts.ignore_failure {
                return Err(BenchError::CommandFailed {
                    command: name.clone(),
                    exit_code,
                    during: "a timed run",
                }
                .into());
            }
            hook("conclude", opts.conclude.as_deref())?;
            r.repeated[s] += u64::from(setups - 1);
            observer.progress(1, 0);
            if round >= opts.warmup {
                r.runs[s].push(Run {
                    round: (counted + 1) as u64,
                    time_s,
                    preload_s: preload,
                    cached_bytes_before: seen.cached,
                    set_bytes: seen.bytes,
                    exit_code,
                    setups,
                    outlier: false,
                });
            }
        }
        round += 1;
    }
    Ok(setup_s)
}

/// What [`set_up`] needs of a read set: to be put in a state, and what the kernel shows of it.
trait Settable {
    fn establish(&self, state: State, observer: &dyn Observer)
        -> Result<Option<f64>, crate::Error>;
    fn seen(&self) -> Seen;
}

impl Settable for SetFiles {
    fn establish(
        &self,
        state: State,
        observer: &dyn Observer,
    ) -> Result<Option<f64>, crate::Error> {
        SetFiles::establish(self, state, observer)
    }
    fn seen(&self) -> Seen {
        SetFiles::seen(self)
    }
}

/// Sets `state` up until the kernel shows it (at most [`MAX_SETUPS`] times).
fn set_up(
    name: &str,
    set: &dyn Settable,
    state: State,
    observer: &dyn Observer,
) -> Result<(Option<f64>, Seen, u32), crate::Error> {
    // Hot and already so (the usual case between hot runs): nothing is read, only checked, so
    // the run meets the machine as a back-to-back run would (a 16 MiB re-read before each hot
    // run cost the next run 1-3% here: CPU caches).
    if state == State::Hot {
        let seen = set.seen();
        if SetFiles::holds(state, seen) {
            return Ok((None, seen, 1));
        }
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let preload = set.establish(state, observer)?;
        let seen = set.seen();
        if SetFiles::holds(state, seen) {
            return Ok((preload, seen, tries));
        }
        if tries >= MAX_SETUPS {
            return Err(BenchError::StateNotReached {
                command: name.to_string(),
                state: state.name(),
                tries,
                cached: seen.cached,
                bytes: seen.bytes,
            }
            .into());
        }
    }
}

/// Runs `argv` once: its wall time from the spawn to the reaped exit, and its exit code.
fn timed(argv: &[OsString], show: bool) -> Result<(f64, i32), crate::Error> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).stdin(Stdio::null());
    if !show {
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
    }
    let t = Instant::now();
    let mut child = cmd.spawn().map_err(|e| crate::Error::Spawn {
        program: argv[0].clone().into(),
        source: e,
    })?;
    let status = child.wait().map_err(crate::Error::Wait)?;
    Ok((t.elapsed().as_secs_f64(), crate::trace::exit_code(status)))
}

/// Runs a `--prepare` / `--conclude` shell command; it must succeed.
fn hook(which: &'static str, command: Option<&str>) -> Result<(), crate::Error> {
    let Some(command) = command else {
        return Ok(());
    };
    let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), command.into()];
    let (_, exit_code) = timed(&argv, true)?;
    if exit_code != 0 {
        return Err(BenchError::HookFailed {
            which,
            command: command.to_string(),
            exit_code,
        }
        .into());
    }
    Ok(())
}

/// What starting and reaping a program costs here: the median of 10 runs of `true`; 0 when
/// `true` cannot be run.
fn spawn_overhead() -> f64 {
    let mut t: Vec<f64> = (0..10)
        .filter_map(|_| timed(&["true".into()], false).ok().map(|r| r.0))
        .collect();
    t.sort_by(f64::total_cmp);
    t.get(t.len() / 2).copied().unwrap_or(0.0)
}

/// A set as it stood at the end (files left out along the way counted).
fn set_report(set: &SetFiles, learning: Learning, kept_out_bytes: u64) -> SetReport {
    let (files, files_missing) = set.files();
    SetReport {
        files,
        files_missing,
        bytes: set.bytes,
        kept_out_bytes,
        mapped_out_files: set.held.files,
        mapped_out_bytes: set.held.bytes,
        mapped_out_example: set.held.first.as_ref().map(|f| f.0.clone()),
        mapped_out_example_processes: set.held.first.as_ref().map(|f| f.1),
        learning,
    }
}

/// The report of one command: statistics per state, outliers flagged, differences to `hot`.
fn command_report(name: &str, states: &[State], r: Ready, restored: Restored) -> CommandReport {
    let mut out: Vec<StateReport> = Vec::new();
    for (i, (mut runs, repeated)) in r.runs.into_iter().zip(r.repeated).enumerate() {
        let times: Vec<f64> = runs.iter().map(|x| x.time_s).collect();
        for (run, o) in runs.iter_mut().zip(outliers(&times)) {
            run.outlier = o;
        }
        let pre: Vec<f64> = runs.iter().filter_map(|x| x.preload_s).collect();
        let with: Vec<f64> = runs
            .iter()
            .filter_map(|x| x.preload_s.map(|p| p + x.time_s))
            .collect();
        out.push(StateReport {
            state: states[i],
            stats: stats(&times),
            preload: stats(&pre),
            with_preload: stats(&with),
            repeated_setups: repeated,
            runs,
        });
    }
    let times = |s: &StateReport| s.runs.iter().map(|x| x.time_s).collect::<Vec<f64>>();
    let hot = out.iter().find(|s| s.state == State::Hot).map(times);
    let differences = out
        .iter()
        .filter(|s| s.state != State::Hot)
        .filter_map(|s| {
            let d = difference(&times(s), hot.as_deref()?)?;
            Some(StateDifference {
                state: s.state,
                minus: State::Hot,
                difference: d,
            })
        })
        .collect();
    CommandReport {
        name: name.to_string(),
        set: set_report(&r.set, r.learning, r.kept_out_bytes),
        states: out,
        differences,
        restored,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A set of 100 bytes whose cached bytes, check after check, are `seen` (the last one
    /// repeated).
    struct Fake {
        seen: Vec<u64>,
        calls: AtomicU32,
    }

    impl Settable for Fake {
        fn establish(&self, _: State, _: &dyn Observer) -> Result<Option<f64>, crate::Error> {
            Ok(None)
        }
        fn seen(&self) -> Seen {
            let i = self.calls.fetch_add(1, Ordering::Relaxed) as usize;
            Seen {
                cached: self.seen[i.min(self.seen.len() - 1)],
                bytes: 100,
            }
        }
    }

    fn fake(seen: &[u64]) -> Fake {
        Fake {
            seen: seen.to_vec(),
            calls: AtomicU32::new(0),
        }
    }

    #[test]
    fn a_state_is_set_up_again_until_the_kernel_shows_it() {
        let (_, seen, setups) = set_up("x", &fake(&[7, 3, 0]), State::Cold, &()).unwrap();
        assert_eq!((seen.cached, setups), (0, 3));
        let (_, _, setups) = set_up("x", &fake(&[100]), State::Hot, &()).unwrap();
        assert_eq!(setups, 1);
        // Hot but not yet: checked, set up, checked again.
        let (_, seen, setups) = set_up("x", &fake(&[60, 100]), State::Hot, &()).unwrap();
        assert_eq!((seen.cached, setups), (100, 1));
    }

    #[test]
    fn a_state_that_never_holds_is_an_error_naming_it() {
        let e = set_up("app", &fake(&[40]), State::Cold, &()).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("app: the cold state did not hold after 5 set-ups (40 of 100 bytes"),
            "{m}"
        );
        let e = set_up("app", &fake(&[99]), State::Preloaded, &()).unwrap_err();
        assert!(
            e.to_string().contains("preloaded state did not hold"),
            "{e}"
        );
    }

    #[test]
    fn rounds_are_shuffled_reproducibly() {
        let mut a: Vec<u32> = (0..12).collect();
        let mut b = a.clone();
        let (mut s1, mut s2) = (42u64, 42u64);
        shuffle(&mut a, &mut s1);
        shuffle(&mut b, &mut s2);
        assert_eq!(a, b, "the same seed, the same order");
        assert_ne!(a, (0..12).collect::<Vec<_>>(), "shuffled");
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..12).collect::<Vec<_>>(), "a permutation");
    }
}
