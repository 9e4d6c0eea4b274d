//! Command-line definitions: clap derive -> validated library options. No syscalls here.
//!
//! One file per verb: its clap arguments, its examples, its `run` (options and observer in,
//! report out) and its renderer (`write_*`: a report, plus a small view of the flags, written
//! to any `Write`; snapshot-tested from hand-made reports). Shared by several verbs: flag
//! groups, `From` conversions and the size/duration parsers in `args`; reading and writing
//! trace files in `trace_file`; what the trace-driven verbs say (files skipped, nothing to do,
//! the `--trace` report of `evict` and `load`) in `trace_report`; the signal-flag observer in
//! `signals`; table, size and problem-list helpers in `render`; output files in `output`; the
//! progress line in `progress`; `ExitCode`, `CliError` and `command_error` in `exit`. No verb
//! module imports another.

pub mod args;
pub mod assist;
pub mod bench;
pub mod bench_plot;
pub mod cgroups;
pub mod copy;
pub mod evict;
pub mod exit;
pub mod exporter;
pub mod load;
pub mod out_file;
pub mod output;
pub mod progress;
pub mod record;
pub mod render;
pub mod replay;
pub mod run;
pub mod show;
pub mod signals;
pub mod stat;
pub mod top;
pub mod trace_file;
pub mod trace_report;
pub mod usage;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// The exit codes, under `pagewise --help`.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  fatal error: bad arguments, or the verb could not start
  2  finished, but some files failed (each is listed on stderr with the path and the syscall)
  3  nothing to do: replay, evict --trace or load --trace found nothing to act on in the trace
     (no pages, every file gone or changed, or every page past its file's end; stderr says)";

#[derive(Parser, Debug)]
#[command(
    name = "pagewise",
    version = env!("PAGEWISE_BUILD_INFO"),
    about = "Exact control of the Linux page cache: see what is cached, evict it, load it",
    after_help = EXIT_CODES,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show how much of files and trees is in the page cache
    #[command(after_help = stat::EXAMPLES)]
    Stat(stat::StatArgs),
    /// Drop files, ranges or trees from the page cache (dirty pages written back first) and
    /// report what the kernel shows afterwards
    #[command(after_help = evict::EXAMPLES)]
    Evict(evict::EvictArgs),
    /// Bring files or trees into the page cache with many reads in flight; optionally lock them
    #[command(after_help = load::EXAMPLES)]
    Load(load::LoadArgs),
    /// Copy files and trees at device speed, leaving the page cache as it was
    #[command(after_help = copy::EXAMPLES, override_usage = "pagewise copy [OPTIONS] SOURCE... DEST")]
    Copy(copy::CopyArgs),
    /// rsync's command line for local paths, on copy's engine: the trailing-slash rule, -a =
    /// -rlptgoD, -H -A -X -S, -i codes, --stats, --link-dest, --backup, --delete-*
    #[command(after_help = copy::sync::EXAMPLES, override_usage = "pagewise sync [OPTIONS] SRC... DEST")]
    Sync(Box<copy::sync::SyncArgs>),
    /// Record which file pages a command (and its children) brings into the page cache
    #[command(after_help = record::EXAMPLES)]
    Record(record::RecordArgs),
    /// Print a recorded trace as text (per page or grouped) or JSON
    #[command(after_help = show::EXAMPLES)]
    Show(show::ShowArgs),
    /// Re-issue a recorded read set in recorded, per-file or on-disk order and time it
    #[command(after_help = replay::EXAMPLES)]
    Replay(replay::ReplayArgs),
    /// Run a command and drop again exactly the pages it brings into the page cache
    #[command(after_help = run::EXAMPLES)]
    Run(run::RunArgs),
    /// Prefetch for running processes that mmap and read at random (Lustre-style range
    /// readahead), or simulate the predictor on a recorded trace
    #[command(after_help = assist::EXAMPLES)]
    Assist(assist::AssistArgs),
    /// Time commands hot, selectively cold (exactly their read set evicted) and preloaded,
    /// interleaved, each state checked before its run: mean ± 95% CI, a table and a picture
    #[command(after_help = bench::EXAMPLES)]
    Bench(bench::BenchArgs),
    /// Show the cgroup tree with each group's file cache (memory.stat; cgroup v1 and v2)
    #[command(after_help = cgroups::EXAMPLES)]
    Cgroups(cgroups::CgroupsArgs),
    /// Serve page-cache metrics to Prometheus (per path, per cgroup; each cgroup's cache traffic with --cgroup-rates), or
    /// write them for node_exporter's textfile collector
    #[command(after_help = exporter::EXAMPLES)]
    Exporter(exporter::ExporterArgs),
    /// Who is filling or evicting the page cache right now: bytes added, dirtied and evicted
    /// per process, memory cgroup or file, interval by interval
    #[command(after_help = top::EXAMPLES)]
    Top(top::TopArgs),
    /// Print shell completions for SHELL to stdout
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages (pagewise.1 and one per verb) into DIR
    Man {
        #[arg(default_value = "man")]
        dir: PathBuf,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// clap's own asserts run only with debug assertions, which the test profile (`ci`,
    /// optimized) has not: names given twice in one verb are checked here too (a second
    /// `--super` passed every test and failed only the release build's debug binary).
    #[test]
    fn no_verb_names_an_option_twice() {
        fn check(cmd: &clap::Command, path: &str) {
            let mut seen = std::collections::HashSet::new();
            for a in cmd.get_arguments() {
                let longs = a
                    .get_long()
                    .into_iter()
                    .chain(a.get_all_aliases().unwrap_or_default());
                for name in longs
                    .map(|l| format!("--{l}"))
                    .chain(a.get_short().map(|s| format!("-{s}")))
                {
                    assert!(
                        seen.insert(name.clone()),
                        "{path}: {name} names two options"
                    );
                }
            }
            for sub in cmd.get_subcommands() {
                check(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        check(&Cli::command(), "pagewise");
    }

    #[test]
    fn from_file_reads_nul_lists() {
        let d = tempfile::tempdir().unwrap();
        let list = d.path().join("list");
        std::fs::write(&list, b"/a\0/b c\0").unwrap();
        let cli = Cli::try_parse_from(["pagewise", "stat", "--from", list.to_str().unwrap(), "-0"])
            .unwrap();
        let Command::Stat(a) = cli.command else {
            panic!()
        };
        assert_eq!(
            a.walk.roots().unwrap(),
            vec![PathBuf::from("/a"), PathBuf::from("/b c")]
        );
    }
}
