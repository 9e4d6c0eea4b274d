//! `pagewise bench`: hot, selectively cold and preloaded starts of commands, interleaved,
//! each state checked against the kernel before its run; mean ± 95% CI and the rest, as a
//! table, JSON, Markdown, CSV and an SVG picture (`bench_plot`).

use super::bench_plot;
use super::exit::{command_error, CliError, ExitCode};
use super::output::Output;
use super::render::{self, bytes};
use super::trace_file::load_trace;
use clap::{Args, ValueEnum};
use pagewise_core::bench::{self, BenchCommand, BenchOptions, BenchReport, CommandReport, State};
use pagewise_core::Observer;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `pagewise bench --help` epilogue: examples, notes and exit codes.
pub const EXAMPLES: &str = "\
Examples:
  pagewise bench -- python3 -c 'import numpy, email, json, decimal'
  pagewise bench --runs 30 --plot start.svg 'python3 -c \"import json\"' 'node -e 0'
  pagewise bench --trace app.trace --states cold,preloaded -- ./app --version
  pagewise bench --keep /var/lib/app/out --export-markdown start.md -- ./app

Each command's read set is learnt first: recorded as things are, then cold (every file it
opened dropped), then with its set dropped until a recording finds under 1% new pages (root:
the page-cache tracepoints); or given with --trace (from `pagewise record --cold`). Then every
command runs in every state, the order shuffled each round: hot (its set loaded), cold (exactly
its set evicted), preloaded (cold, then its set read in disk order: the preload is timed apart),
cold-all (drop_caches: root, only when named). Before each run the kernel is asked what of the
set is cached (cachestat); a state that did not hold is set up again (counted as REPEATED).
Afterwards every file touched is cached exactly as before. A string is run with sh -c (as
hyperfine does); after '--', the program and its arguments as they are. The commands' output
is thrown away (--show-output keeps it).
Exit codes: 0 success; 1 a command failed (without -i), a state could not be set up, or the read
set could not be learnt; 130 interrupted (the figures so far are shown).";

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateArg {
    /// Every page of the read set cached
    Hot,
    /// Exactly the read set evicted
    Cold,
    /// Cold, then the read set loaded in disk order (timed apart)
    Preloaded,
    /// The whole page cache dropped with drop_caches (root)
    ColdAll,
}

impl From<StateArg> for State {
    fn from(s: StateArg) -> State {
        match s {
            StateArg::Hot => State::Hot,
            StateArg::Cold => State::Cold,
            StateArg::Preloaded => State::Preloaded,
            StateArg::ColdAll => State::ColdAll,
        }
    }
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Commands to time, each a shell string run with sh -c (as hyperfine takes them)
    #[arg(value_name = "COMMAND")]
    pub commands: Vec<String>,
    /// A command to time as a program and its arguments, not through a shell
    #[arg(last = true, value_name = "PROGRAM")]
    pub exec: Vec<std::ffi::OsString>,
    /// The states to run, in order
    #[arg(short = 's', long, value_enum, value_delimiter = ',',
          default_values_t = [StateArg::Hot, StateArg::Cold, StateArg::Preloaded])]
    pub states: Vec<StateArg>,
    /// Runs counted per command and state
    #[arg(short = 'r', long, default_value_t = bench::DEFAULT_RUNS)]
    pub runs: usize,
    /// Rounds run first and not counted
    #[arg(short = 'w', long, value_name = "NUM", default_value_t = 0)]
    pub warmup: usize,
    /// More rounds until each command and state has run at least SECONDS in all
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub min_time: f64,
    /// The read set of a command, recorded earlier (`pagewise record --cold`): one per command,
    /// in their order; the set is then not learnt
    #[arg(long, value_name = "FILE")]
    pub trace: Vec<PathBuf>,
    /// Leave files under PATH out of the read set, and alone while it is learnt (the
    /// command's own output, the system's libraries)
    #[arg(long, value_name = "PATH")]
    pub keep: Vec<PathBuf>,
    /// Run CMD (sh -c) before each timed run, before its state is set up
    #[arg(short = 'p', long, value_name = "CMD")]
    pub prepare: Option<String>,
    /// Run CMD (sh -c) after each timed run (hyperfine's --conclude)
    #[arg(long, value_name = "CMD")]
    pub conclude: Option<String>,
    /// Recordings at most to learn a read set
    #[arg(long, value_name = "N", default_value_t = bench::DEFAULT_RECORDINGS)]
    pub recordings: u32,
    /// Seed of the order of the runs in each round
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A command exiting non-zero is not an error
    #[arg(short = 'i', long)]
    pub ignore_failure: bool,
    /// Show the commands' output instead of throwing it away
    #[arg(long)]
    pub show_output: bool,
    /// One JSON document on stdout (schema: docs/json.md, `bench`)
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Also write the JSON document to FILE
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// Also write a Markdown table to FILE
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
    /// Also write one CSV row per command and state to FILE
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,
    /// Draw the runs as an SVG picture: per command and state a box of its run times, the
    /// mean and its 95% interval marked
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// Counts runs for the status line on a terminal; cancelled by SIGINT/SIGTERM.
struct Status {
    total: AtomicU64,
    done: AtomicU64,
    tty: bool,
}

impl Observer for Status {
    fn planned(&self, files: u64, _bytes: u64) {
        self.total.fetch_add(files, Ordering::Relaxed);
    }
    fn progress(&self, files: u64, _bytes: u64) {
        if files == 0 {
            return;
        }
        let done = self.done.fetch_add(files, Ordering::Relaxed) + files;
        if self.tty {
            let total = self.total.load(Ordering::Relaxed);
            eprint!("\rpagewise bench: run {done} of {total}\x1b[K");
        }
    }
    fn cancelled(&self) -> bool {
        pagewise_core::sys::interrupt_flag().load(Ordering::SeqCst)
    }
}

/// The commands as the library takes them: strings through `sh -c`, then the one after `--`.
fn commands(a: &BenchArgs) -> Result<Vec<BenchCommand>, CliError> {
    let mut v: Vec<BenchCommand> = a
        .commands
        .iter()
        .map(|s| BenchCommand {
            name: s.clone(),
            argv: vec!["sh".into(), "-c".into(), s.into()],
            trace: None,
        })
        .collect();
    if !a.exec.is_empty() {
        let name = a
            .exec
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        v.push(BenchCommand {
            name,
            argv: a.exec.clone(),
            trace: None,
        });
    }
    if v.is_empty() {
        return Err(CliError::Usage(
            "bench: no command: give one as a string, or after '--'".into(),
        ));
    }
    if !a.trace.is_empty() && a.trace.len() != v.len() {
        return Err(CliError::Usage(format!(
            "bench: {} --trace for {} commands: one per command, in their order",
            a.trace.len(),
            v.len()
        )));
    }
    for (c, t) in v.iter_mut().zip(&a.trace) {
        c.trace = Some(load_trace(t)?);
    }
    Ok(v)
}

/// `pagewise bench`.
pub fn run(a: BenchArgs) -> Result<ExitCode, CliError> {
    let opts = BenchOptions {
        commands: commands(&a)?,
        states: a.states.iter().map(|&s| s.into()).collect(),
        runs: a.runs,
        warmup: a.warmup,
        min_time_s: a.min_time,
        keep: a.keep.clone(),
        prepare: a.prepare.clone(),
        conclude: a.conclude.clone(),
        recordings: a.recordings,
        seed: a.seed,
        ignore_failure: a.ignore_failure,
        show_output: a.show_output,
    };
    // SIGINT ends the runs (the command dies of it too): the figures so far, the cache put back.
    let _ = pagewise_core::sys::interrupt_flag();
    let status = Status {
        total: AtomicU64::new(0),
        done: AtomicU64::new(0),
        tty: std::io::stderr().is_terminal() && !a.json,
    };
    let result = bench::bench(&opts, &status);
    if status.tty {
        eprint!("\r\x1b[K");
    }
    let report = match result {
        Ok(r) => r,
        Err(e) => return Ok(command_error("bench", e)),
    };
    export(&a, &report)?;
    Output::of(a.json, false).document(&report, |r| {
        let _ = write_report(&mut std::io::stdout().lock(), r);
    });
    Ok(if report.outcome.interrupted {
        ExitCode::Signal(2)
    } else {
        ExitCode::Success
    })
}

/// The files asked for: JSON, Markdown, CSV, the picture.
fn export(a: &BenchArgs, r: &BenchReport) -> Result<(), CliError> {
    let write = |p: &PathBuf, text: String| {
        std::fs::write(p, text).map_err(|e| CliError::file(render::path_text(p), "write", e))
    };
    if let Some(p) = &a.export_json {
        write(
            p,
            serde_json::to_string_pretty(r).unwrap_or_default() + "\n",
        )?;
    }
    if let Some(p) = &a.export_markdown {
        write(p, markdown(r))?;
    }
    if let Some(p) = &a.export_csv {
        write(p, csv(r))?;
    }
    if let Some(p) = &a.plot {
        bench_plot::svg(r, p).map_err(|e| CliError::file(render::path_text(p), "write", e))?;
    }
    Ok(())
}

/// `12.3 ms`, `1.234 s`.
fn time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

/// `12.3 ms ± 0.4 ms`; `12.3 ms` alone with a single run.
fn mean_ci(mean: f64, ci: Option<f64>) -> String {
    match ci {
        Some(c) => format!("{} ± {}", time(mean), time(c)),
        None => time(mean),
    }
}

/// The table: per command its read set, a row per state, the differences, the cache put back.
pub fn write_report(w: &mut dyn Write, r: &BenchReport) -> std::io::Result<()> {
    for (i, c) in r.commands.iter().enumerate() {
        write_command(w, i + 1, c)?;
    }
    writeln!(
        w,
        "Starting a program costs {} here (part of every run); setting up and checking each \
         state took {} per run, outside the timed runs.",
        time(r.spawn_overhead_s),
        time(r.setup_s_per_run)
    )?;
    if r.outcome.interrupted {
        writeln!(w, "Interrupted: the figures are of the runs made so far.")?;
    }
    Ok(())
}

fn write_command(w: &mut dyn Write, n: usize, c: &CommandReport) -> std::io::Result<()> {
    let s = &c.set;
    let how = match s.learning.recordings {
        0 => "given as a trace".to_string(),
        k => format!(
            "learnt in {k} recordings{}",
            if s.learning.stable {
                ", stable"
            } else {
                ", still growing"
            }
        ),
    };
    writeln!(
        w,
        "Benchmark {n}: {}\n  read set: {} in {} files ({how}){}{}",
        render::escape_bytes(c.name.as_bytes()),
        bytes(s.bytes),
        s.files,
        if s.files_missing > 0 {
            format!("; {} files gone since", s.files_missing)
        } else {
            String::new()
        },
        if s.kept_out_bytes > 0 {
            format!("; {} left out (--keep)", bytes(s.kept_out_bytes))
        } else {
            String::new()
        }
    )?;
    if let (Some(p), Some(n)) = (&s.mapped_out_example, s.mapped_out_example_processes) {
        writeln!(
            w,
            "  left out: {} files ({}) other processes map, cached in every state (e.g. {}, \
             mapped by {n} processes)",
            s.mapped_out_files,
            bytes(s.mapped_out_bytes),
            render::escape_bytes(p.as_bytes())
        )?;
    }
    let mut rows = vec![[
        "  STATE",
        "MEAN ± 95% CI",
        "MEDIAN",
        "σ",
        "MIN … MAX",
        "RUNS",
        "OUTLIERS",
        "REPEATED",
    ]
    .map(String::from)
    .to_vec()];
    for st in &c.states {
        let Some(x) = &st.stats else {
            rows.push(vec![format!("  {}", st.state.name()), "no runs".into()]);
            continue;
        };
        rows.push(vec![
            format!("  {}", st.state.name()),
            mean_ci(x.mean_s, x.ci95_s),
            time(x.median_s),
            x.stddev_s.map_or("-".into(), time),
            format!("{} … {}", time(x.min_s), time(x.max_s)),
            x.runs.to_string(),
            x.outliers.to_string(),
            st.repeated_setups.to_string(),
        ]);
    }
    write!(w, "{}", render::table(&rows))?;
    for st in &c.states {
        if let (Some(p), Some(t)) = (&st.preload, &st.with_preload) {
            writeln!(
                w,
                "  {}: the preload took {}; preload and run {}",
                st.state.name(),
                mean_ci(p.mean_s, p.ci95_s),
                mean_ci(t.mean_s, t.ci95_s)
            )?;
        }
    }
    for d in &c.differences {
        let sign = if d.difference.mean_s >= 0.0 { "+" } else { "-" };
        writeln!(
            w,
            "  {} − {}: {sign}{}{} ({:.2}x)",
            d.state.name(),
            d.minus.name(),
            time(d.difference.mean_s.abs()),
            d.difference
                .ci95_s
                .map_or(String::new(), |c| format!(" ± {}", time(c))),
            d.difference.ratio
        )?;
    }
    let rs = &c.restored;
    writeln!(
        w,
        "  cache put back: {} files, {} cached again of {} before{}",
        rs.files,
        bytes(rs.cached_bytes_after),
        bytes(rs.cached_bytes_before),
        if rs.failed > 0 {
            format!(" ({} files could not be reopened)", rs.failed)
        } else {
            String::new()
        }
    )
}

/// The Markdown table (hyperfine's columns, a row per command and state).
pub fn markdown(r: &BenchReport) -> String {
    let mut s = String::from(
        "| Command | State | Mean [ms] | ± 95% CI [ms] | Median [ms] | Min [ms] | Max [ms] | Runs |\n\
         |:---|:---|---:|---:|---:|---:|---:|---:|\n",
    );
    for c in &r.commands {
        for st in &c.states {
            let Some(x) = &st.stats else { continue };
            s += &format!(
                "| `{}` | {} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {} |\n",
                c.name.replace('|', "\\|").replace('`', "'"),
                st.state.name(),
                x.mean_s * 1e3,
                x.ci95_s.map_or("-".into(), |c| format!("{:.1}", c * 1e3)),
                x.median_s * 1e3,
                x.min_s * 1e3,
                x.max_s * 1e3,
                x.runs
            );
        }
    }
    s
}

/// CSV: a row per command and state, seconds.
pub fn csv(r: &BenchReport) -> String {
    let mut s = String::from(
        "command,state,runs,mean_s,ci95_s,median_s,stddev_s,min_s,max_s,outliers,repeated_setups,preload_mean_s\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
    for c in &r.commands {
        for st in &c.states {
            let Some(x) = &st.stats else { continue };
            s += &format!(
                "\"{}\",{},{},{:.6},{},{:.6},{},{:.6},{:.6},{},{},{}\n",
                c.name.replace('"', "\"\""),
                st.state.name(),
                x.runs,
                x.mean_s,
                opt(x.ci95_s),
                x.median_s,
                opt(x.stddev_s),
                x.min_s,
                x.max_s,
                x.outliers,
                st.repeated_setups,
                opt(st.preload.as_ref().map(|p| p.mean_s))
            );
        }
    }
    s
}
