//! Command-line definitions: clap derive -> validated library options. No syscalls here.

pub mod assist;
pub mod copy;
pub mod evict;
pub mod exit;
pub mod load;
pub mod output;
pub mod progress;
pub mod record;
pub mod render;
pub mod stat;

use clap::{Args, Parser, Subcommand, ValueEnum};
use pagewise_core::residency::parse_size;
use pagewise_core::{ByteRange, Method, WalkOptions};
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

pub const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  fatal error: bad arguments, or the verb could not start
  2  finished, but some files failed (each is listed on stderr with the path and the syscall)";

#[derive(Parser, Debug)]
#[command(
    name = "pagewise",
    version,
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
    #[command(after_help = STAT_EXAMPLES)]
    Stat(StatArgs),
    /// Drop files, ranges or trees from the page cache (dirty pages written back first) and
    /// report what the kernel shows afterwards
    #[command(after_help = EVICT_EXAMPLES)]
    Evict(EvictArgs),
    /// Bring files or trees into the page cache with many reads in flight; optionally lock them
    #[command(after_help = LOAD_EXAMPLES)]
    Load(LoadArgs),
    /// Copy files and trees at device speed, leaving the page cache as it was
    #[command(after_help = COPY_EXAMPLES)]
    Copy(CopyArgs),
    /// Record which file pages a command (and its children) brings into the page cache
    #[command(after_help = RECORD_EXAMPLES)]
    Record(RecordArgs),
    /// Print a recorded trace as text (per page or grouped) or JSON
    #[command(after_help = SHOW_EXAMPLES)]
    Show(ShowArgs),
    /// Re-issue a recorded read set in recorded, per-file or on-disk order and time it
    #[command(after_help = REPLAY_EXAMPLES)]
    Replay(ReplayArgs),
    /// Run a command and drop again exactly the pages it brings into the page cache
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Prefetch for running processes that mmap and read at random (Lustre-style range
    /// readahead), or simulate the predictor on a recorded trace
    #[command(after_help = ASSIST_EXAMPLES)]
    Assist(AssistArgs),
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

const ASSIST_EXAMPLES: &str = "\
Examples:
  pagewise assist -p $(pidof postgres)          assist running processes until they exit
  pagewise run --assist --max-cache none -- fio job.fio
  pagewise record --faults -o fio.trace -- fio job.fio
  pagewise assist --simulate fio.trace          hit rate with and without the range detector

How it works: the target's page faults (tracepoint mm_filemap_fault) feed a predictor with
sequential, stride and range detectors. The range detector (Lustre LU-13669) groups faults
within --range of each other into clusters; on the next miss it prefetches a window of the last
cluster's span (at least --min-window) with fadvise(WILLNEED), starting at the fault when the
last cluster was read upwards (--centred: centred on it, as Lustre does). Hits prefetch nothing.

Exit codes: 0 success, 1 fatal error (no tracing rights, no such process, bad trace).";

const STAT_EXAMPLES: &str = "\
Examples:
  pagewise stat                       summary of the current directory
  pagewise stat /var/lib/postgresql   one line per tree
  pagewise stat -l --sort cached /data --top 20
  pagewise stat --map big.db          per-page residency bar, 60 cells (--map=120: wider)
  pagewise stat --range 0-64M big.img only the first 64 MiB (SIZE becomes IN RANGE)
  find /data -name '*.db' -print0 | pagewise stat --from - -0 --json

Map cells: ' ' nothing cached, '.' some (even one page), 'o' 34% or more, 'O' all, '?' unknown.
'unknown': cachestat(2) refused the file (not yours, not writable) and mincore(2) would call it
fully cached; totals that leave such files out are marked '>='.
vmtouch users: -v (--map), -p RANGE, -I include, -i ignore, -f follow, -F one filesystem.

Exit codes: 0 success, 1 fatal error, 2 some files failed.";

const EVICT_EXAMPLES: &str = "\
Examples:
  pagewise evict /data/db             drop a tree, dirty pages included
  pagewise evict --range 0-1G big.img drop only the first GiB
  pagewise evict --owned --why ~/cache
  pagewise evict --dry-run /srv       what would go

Exit codes: 0 success, 1 fatal error, 2 some files failed.";

const LOAD_EXAMPLES: &str = "\
Examples:
  pagewise load /usr/lib              warm a tree
  pagewise load --lock --for 10m model.bin
  pagewise load --range 0-64M big.db

Exit codes: 0 success, 1 fatal error, 2 some files failed.";

const COPY_EXAMPLES: &str = "\
Examples:
  pagewise copy big.img /backup/                  one file into a directory
  pagewise copy -p /srv/data /mnt/new/data        a tree, keeping mode/owner/times/xattrs
  pagewise copy --verify --fsync db/ /backup/db   durable, and re-read from disk to compare
  pagewise copy --cache drop-behind a b           force a strategy

Strategies (--cache): auto picks dontcache (RWF_DONTCACHE) where the filesystem has it, else
direct (O_DIRECT, many I/Os in flight) for files of 1 MiB and more, else drop-behind;
buffered leaves both files cached, like cp.

Exit codes: 0 success, 1 fatal error, 2 some files failed, 130 interrupted (no partial file is
left under a final name).";

const RECORD_EXAMPLES: &str = "\
Examples:
  pagewise record -o py.trace -- python3 -c 'import asyncio, json'
  pagewise record --format grouped -o - -- ./app --init     grouped text on stdout
  pagewise show --format text py.trace                      one line per page

Needs root (perf events or tracefs). SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to pagewise are
forwarded to the command; the trace is written when it ends. Processes the command leaves
running (daemons) are not recorded after it exits (a note says how many).
Exit code: the command's own (128+N when it died of signal N); 127 command not found, 126 not
executable; 1 when tracing could not start or the output cannot be created (checked before the
command runs).";

const REPLAY_EXAMPLES: &str = "\
Examples:
  pagewise replay --compare --direct app.trace     all orders, cold, side by side
  pagewise replay --order disk --depth 64 app.trace
  hyperfine --prepare 'pagewise evict --trace app.trace' './app'   selectively cold start

Files recorded without a path (<MAJOR:MINOR inode N>), or deleted since, are skipped and
listed with the reason. Exit codes: 0 success, 1 fatal error (unreadable trace), 2 some reads
failed.";

const SHOW_EXAMPLES: &str = "\
Examples:
  pagewise show app.trace                    merged runs: time path offset length
  pagewise show --format text app.trace      one line per page
  pagewise show --format json app.trace | jq '.files[].path'

<MAJOR:MINOR inode N> names a file recorded without a path: deleted by the end of the
recording, or on a filesystem with no mount point (pipes, memfd, shared memory). Paths are
printed with control characters and non-UTF-8 bytes as \\xHH; JSON keeps the bytes.";

const RUN_EXAMPLES: &str = "\
Examples:
  pagewise run -- tar cf /backup/home.tar /home        the backup leaves the cache as it was
  pagewise run --max-cache 16M -- grep -r needle /data
  pagewise run --keep-written --report run.json -- rsync -a /src /dst

The command's stdin/stdout/stderr are untouched; pagewise's report goes to stderr (or
--report FILE as JSON, created before the command starts). SIGINT, SIGTERM, SIGHUP and SIGQUIT
sent to pagewise are forwarded to the command as they are, and its pages are dropped before
pagewise exits. Exit code: the command's own (128+N when killed by signal N: 130 for Ctrl-C);
127 command not found, 126 not executable; 1 when tracing is impossible (needs root or
CAP_SYS_ADMIN with tracefs).";

/// Where the files come from and which of them count: shared by every verb.
#[derive(Args, Debug, Clone)]
pub struct WalkArgs {
    /// Files and directories (directories recurse). Default: the current directory.
    pub paths: Vec<PathBuf>,
    /// Read more paths from FILE, one per line ('-' for stdin)
    #[arg(long, value_name = "FILE|-")]
    pub from: Option<PathBuf>,
    /// Paths read with --from are NUL-separated (find -print0)
    #[arg(short = '0', long = "null")]
    pub null: bool,
    /// Only files matching GLOB (name or path below the root); repeatable (vmtouch -I)
    #[arg(short = 'I', long = "include", value_name = "GLOB")]
    pub include: Vec<String>,
    /// Skip files and directories matching GLOB; repeatable (vmtouch -i)
    #[arg(
        short = 'i',
        long = "exclude",
        visible_alias = "ignore",
        value_name = "GLOB"
    )]
    pub exclude: Vec<String>,
    /// Stay on the filesystem of each root (vmtouch -F)
    #[arg(short = 'x', long, visible_short_alias = 'F')]
    pub one_file_system: bool,
    /// Follow symlinks inside trees (roots are always followed); loops are detected
    /// (vmtouch -f)
    #[arg(short = 'L', long, visible_short_alias = 'f')]
    pub follow: bool,
    /// Descend at most N levels below each root (1 = only its direct entries)
    #[arg(long, value_name = "N")]
    pub max_depth: Option<usize>,
    /// Worker threads [default: number of CPUs]
    #[arg(short = 'j', long, value_name = "N")]
    pub threads: Option<usize>,
    /// Only this byte range of every file: START-END, START- or -END (K/M/G/T suffixes;
    /// vmtouch -p)
    #[arg(short = 'p', long, value_name = "START-END", value_parser = ByteRange::parse)]
    pub range: Option<ByteRange>,
    /// How residency is measured: cachestat, or mmap+mincore (auto: cachestat when the kernel
    /// has it)
    #[arg(long, value_enum, default_value_t = MethodArg::Auto)]
    pub method: MethodArg,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum MethodArg {
    Auto,
    Cachestat,
    Mincore,
}

impl WalkArgs {
    /// Roots from the arguments and --from; the current directory when there are none.
    pub fn roots(&self) -> Result<Vec<PathBuf>, String> {
        let mut roots = self.paths.clone();
        if let Some(src) = &self.from {
            let mut data = Vec::new();
            let r = if src.as_os_str() == "-" {
                std::io::stdin().read_to_end(&mut data)
            } else {
                std::fs::File::open(src).and_then(|mut f| f.read_to_end(&mut data))
            };
            r.map_err(|e| format!("--from {}: read failed: {e}", src.display()))?;
            let sep = if self.null { b'\0' } else { b'\n' };
            use std::os::unix::ffi::OsStrExt;
            roots.extend(
                data.split(|&b| b == sep)
                    .filter(|l| !l.is_empty())
                    .map(|l| PathBuf::from(std::ffi::OsStr::from_bytes(l))),
            );
            if roots.is_empty() {
                return Err(format!("--from {}: no paths in it", src.display()));
            }
        }
        if roots.is_empty() {
            roots.push(PathBuf::from("."));
        }
        Ok(roots)
    }

    pub fn walk_options(&self, default_threads: usize) -> WalkOptions {
        WalkOptions {
            follow: self.follow,
            one_file_system: self.one_file_system,
            max_depth: self.max_depth,
            include: self.include.clone(),
            exclude: self.exclude.clone(),
            threads: self.threads.unwrap_or(default_threads).max(1),
            write: false,
            noatime: false,
        }
    }

    pub fn range(&self) -> ByteRange {
        self.range.unwrap_or_default()
    }

    pub fn method(&self) -> Method {
        match self.method {
            MethodArg::Auto => Method::Auto,
            MethodArg::Cachestat => Method::Cachestat,
            MethodArg::Mincore => Method::Mincore,
        }
    }
}

/// Output format flags shared by the verbs.
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// One JSON document on stdout (schema: docs/json.md; fincore -J)
    #[arg(short = 'J', long, conflicts_with = "json_lines")]
    pub json: bool,
    /// One JSON object per line, streamed as files are done, then a summary line
    #[arg(long)]
    pub json_lines: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Path,
    Size,
    Cached,
    Percent,
    Dirty,
    Evicted,
}

#[derive(Args, Debug)]
pub struct StatArgs {
    #[command(flatten)]
    pub walk: WalkArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// List every file, not only one line per argument
    #[arg(short = 'l', long)]
    pub files: bool,
    /// Order of listed files [default: path; cached with --top]
    #[arg(long, value_enum)]
    pub sort: Option<SortKey>,
    /// List only the N files first in --sort order (memory stays bounded)
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// List only files with at least one cached page
    #[arg(long)]
    pub only_cached: bool,
    /// Show a residency bar under each listed file (like vmtouch -v), 60 cells or
    /// --map=WIDTH. Cells: ' ' nothing cached, '.' some (even one page), 'o' 34% or more,
    /// 'O' all, '?' unknown
    #[arg(
        short = 'v',
        long,
        value_name = "WIDTH",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "60",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub map: Option<u16>,
}

#[derive(Args, Debug)]
pub struct EvictArgs {
    #[command(flatten)]
    pub walk: WalkArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Do not write dirty pages back first (they will stay cached)
    #[arg(long)]
    pub no_sync: bool,
    /// Only files owned by you; others are counted and left alone
    #[arg(long)]
    pub owned: bool,
    /// Measure what would be dropped; change nothing
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Name the processes whose mappings keep pages in (reads /proc/*/maps)
    #[arg(long)]
    pub why: bool,
    /// List every file evicted, not only those with pages left
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Evict exactly the pages recorded in TRACE (a selectively cold cache)
    #[arg(long, value_name = "TRACE", conflicts_with_all = ["paths", "from"])]
    pub trace: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    pub walk: WalkArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Keep the loaded pages locked in memory (mlock) until Ctrl-C or --for ends
    #[arg(long)]
    pub lock: bool,
    /// With --lock: how long to hold (e.g. 30s, 10m, 2h); default until SIGINT/SIGTERM
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration, requires = "lock")]
    pub hold_for: Option<Duration>,
    /// Files each worker queues readahead for before waiting on them
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub batch: usize,
    /// Bytes in flight within one large file (>= 64 MiB), split into --depth chunks
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size_arg)]
    pub window: u64,
    /// Threads reading one large file
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub depth: usize,
    /// Load exactly the pages recorded in TRACE, in on-disk order with a deep queue
    #[arg(long, value_name = "TRACE", conflicts_with_all = ["paths", "from", "lock"])]
    pub trace: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// The versioned binary trace (for replay, evict --trace, load --trace)
    Binary,
    /// One line per page: time path offset
    Text,
    /// Contiguous pages merged: time path offset length
    Grouped,
    /// JSON document
    Json,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Where to write the trace ('-' for stdout)
    #[arg(short = 'o', long, default_value = "pagewise.trace")]
    pub output: PathBuf,
    /// What to write: the binary trace (for replay, show, evict --trace, load --trace), or
    /// text as `show` prints it
    #[arg(long, value_enum, default_value_t = TraceFormat::Binary)]
    pub format: TraceFormat,
    /// Ring buffer per CPU in KiB (events beyond it are lost, and counted)
    #[arg(long, value_name = "KIB", default_value_t = 4096)]
    pub buffer_kb: u64,
    /// Also record the command's page faults on file mappings (for `assist --simulate`)
    #[arg(long)]
    pub faults: bool,
    /// How events are collected
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// The command and its arguments ('--' before it is optional; needed when the command's
    /// own options could be taken for pagewise's)
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum BackendArg {
    /// Perf events where the kernel allows them, else tracefs (with a notice)
    Auto,
    /// Perf events, one per CPU, inherited by the command's process tree (fails if refused)
    Perf,
    /// A tracefs instance following the command with set_event_pid (slower back to back)
    Tracefs,
}

/// Tuning of the assist predictor.
#[derive(Args, Debug, Clone)]
pub struct AssistTuning {
    /// Cluster radius: a fault within SIZE of the previous one joins its cluster
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size_arg)]
    pub range: u64,
    /// Smallest prefetch window
    #[arg(long, value_name = "SIZE", default_value = "64K", value_parser = parse_size_arg)]
    pub min_window: u64,
    /// Largest prefetch window
    #[arg(long, value_name = "SIZE", default_value = "8M", value_parser = parse_size_arg)]
    pub max_window: u64,
    /// Centre range windows on the fault (Lustre) even when clusters are read upwards
    #[arg(long)]
    pub centred: bool,
    /// Turn off the range detector
    #[arg(long)]
    pub no_range: bool,
    /// Turn off the sequential detector
    #[arg(long)]
    pub no_sequential: bool,
    /// Turn off the stride detector
    #[arg(long)]
    pub no_stride: bool,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "simulate"])))]
pub struct AssistArgs {
    /// Processes to assist (all their threads, and children they start from now on)
    #[arg(short = 'p', long = "pid", value_name = "PID", num_args = 1..)]
    pub pid: Vec<u32>,
    /// Replay the faults of a trace (`record --faults`) through the predictor instead
    #[arg(long, value_name = "TRACE")]
    pub simulate: Option<PathBuf>,
    /// With --simulate: time from a fault to its prefetch being ready
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = parse_duration, requires = "simulate")]
    pub latency: Duration,
    /// Stop after DURATION even if the processes still run
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration, conflicts_with = "simulate")]
    pub for_: Option<Duration>,
    /// Ring buffer per CPU in KiB
    #[arg(long, value_name = "KIB", default_value_t = 4096)]
    pub buffer_kb: u64,
    #[command(flatten)]
    pub tuning: AssistTuning,
    /// One JSON document on stdout: the assist or simulation report (schema: docs/json.md)
    #[arg(short = 'J', long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Drop the command's pages whenever more than SIZE of them are cached ('none': only when
    /// the command exits)
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = parse_limit_arg)]
    pub max_cache: u64,
    /// Prefetch for the command like `pagewise assist` (the prefetched pages are dropped too)
    #[arg(long)]
    pub assist: bool,
    #[command(flatten)]
    pub tuning: AssistTuning,
    /// Leave the pages of files the command wrote alone
    #[arg(long)]
    pub keep_written: bool,
    /// Write the report as JSON to FILE instead of a line on stderr
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Ring buffer per CPU in KiB
    #[arg(long, value_name = "KIB", default_value_t = 4096)]
    pub buffer_kb: u64,
    /// How the command's page-cache events are followed (as for `record`)
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// The command and its arguments ('--' before it is optional; needed when the command's
    /// own options could be taken for pagewise's)
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShowFormat {
    /// One line per page: time path offset
    Text,
    /// Contiguous pages merged: time path offset length
    Grouped,
    /// The whole trace as one JSON document (schema: docs/json.md)
    Json,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// A trace written by `pagewise record`
    pub trace: PathBuf,
    /// How to print it
    #[arg(long, value_enum, default_value_t = ShowFormat::Grouped)]
    pub format: ShowFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum OrderArg {
    /// As the program read them (the order of the trace)
    Recorded,
    /// File by file, each file's pages in offset order
    File,
    /// By on-disk position (FIEMAP), across files: the fewest seeks
    Disk,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// A trace written by `pagewise record`
    pub trace: PathBuf,
    /// Order of the reads
    #[arg(long, value_enum, default_value_t = OrderArg::Disk)]
    pub order: OrderArg,
    /// Read with O_DIRECT: exactly the recorded pages, no cache, no readahead
    #[arg(long)]
    pub direct: bool,
    /// Merge ranges at most SIZE apart (reading the gap)
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = parse_size_arg)]
    pub merge_gap: u64,
    /// Requests in flight [default: 1 for recorded/file, 32 for disk]
    #[arg(long, value_name = "N")]
    pub depth: Option<usize>,
    /// Longest single request (merged ranges are split)
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size_arg)]
    pub max_request: u64,
    /// Run every order on a cold cache (evicting the traced pages before each) and compare
    #[arg(long)]
    pub compare: bool,
    /// Runs per order with --compare (median reported)
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// One JSON document on stdout: a list of replay reports (schema: docs/json.md)
    #[arg(short = 'J', long)]
    pub json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum CacheArg {
    Auto,
    Dontcache,
    Direct,
    DropBehind,
    Buffered,
}

#[derive(Args, Debug)]
pub struct CopyArgs {
    /// Sources, then the destination (a directory when there are several sources)
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<PathBuf>,
    /// How the page cache is kept clean
    #[arg(long, value_enum, default_value_t = CacheArg::Auto)]
    pub cache: CacheArg,
    /// Keep mode, owner (when root), timestamps and extended attributes
    #[arg(short = 'p', long)]
    pub preserve: bool,
    /// Do not fallocate destinations before writing
    #[arg(long)]
    pub no_preallocate: bool,
    /// Write each file under a hidden temporary name, renamed into place when complete
    /// (default: an unnamed O_TMPFILE file, linked into place, where the filesystem has it)
    #[arg(long)]
    pub named_temp: bool,
    /// fsync each file before it is linked (or renamed) into place, and the directories at the end
    #[arg(long)]
    pub fsync: bool,
    /// Re-read every copied file from disk (not cache) and compare checksums with the source
    #[arg(long)]
    pub verify: bool,
    /// Files copied in parallel
    #[arg(short = 'j', long, value_name = "N", default_value_t = 16)]
    pub threads: usize,
    /// I/Os in flight within one large file
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub depth: usize,
    /// Bytes per I/O
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = parse_size_arg)]
    pub chunk: u64,
    /// Say which strategy each kind of file used
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// One JSON document on stdout (schema: docs/json.md)
    #[arg(short = 'J', long)]
    pub json: bool,
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s)
}

/// A size, or `none`/`off`/`unlimited` for no limit.
fn parse_limit_arg(s: &str) -> Result<u64, String> {
    match s {
        "none" | "off" | "unlimited" => Ok(u64::MAX),
        _ => parse_size(s),
    }
}

/// Parses `100us`, `500ms`, `30s`, `10m`, `2h`, `1d` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let v: f64 = n
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (try 30s, 10m, 2h)"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1000.0,
        "us" => v / 1e6,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86400.0,
        _ => {
            return Err(format!(
                "unknown duration unit in '{s}' (us, ms, s, m, h, d)"
            ))
        }
    };
    if secs.is_nan() || secs < 0.0 {
        return Err(format!("'{s}' is not a duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("x").is_err());
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
