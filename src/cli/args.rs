//! Flag groups several verbs share (walk, output, trace backend, assist tuning) and the
//! parsers of sizes and durations.

use super::exit::CliError;
use clap::{Args, ValueEnum};
use pagewise_core::assist::live::AssistOptions;
use pagewise_core::assist::Config;
use pagewise_core::residency::parse_size;
use pagewise_core::trace::Backend;
use pagewise_core::{ByteRange, Method, WalkOptions};
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

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

/// `--method`: how residency is measured.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum MethodArg {
    // No doc comments on the values: clap would show them in --help.
    Auto,
    Cachestat,
    Mincore,
}

impl From<MethodArg> for Method {
    fn from(m: MethodArg) -> Method {
        match m {
            MethodArg::Auto => Method::Auto,
            MethodArg::Cachestat => Method::Cachestat,
            MethodArg::Mincore => Method::Mincore,
        }
    }
}

impl WalkArgs {
    /// Roots from the arguments and --from; the current directory when there are none.
    pub fn roots(&self) -> Result<Vec<PathBuf>, CliError> {
        let mut roots = self.paths.clone();
        if let Some(src) = &self.from {
            let mut data = Vec::new();
            let r = if src.as_os_str() == "-" {
                std::io::stdin().read_to_end(&mut data)
            } else {
                std::fs::File::open(src).and_then(|mut f| f.read_to_end(&mut data))
            };
            r.map_err(|e| CliError::file(format!("--from {}", src.display()), "read", e))?;
            let sep = if self.null { b'\0' } else { b'\n' };
            use std::os::unix::ffi::OsStrExt;
            roots.extend(
                data.split(|&b| b == sep)
                    .filter(|l| !l.is_empty())
                    .map(|l| PathBuf::from(std::ffi::OsStr::from_bytes(l))),
            );
            if roots.is_empty() {
                return Err(CliError::Usage(format!(
                    "--from {}: no paths in it",
                    src.display()
                )));
            }
        }
        if roots.is_empty() {
            roots.push(PathBuf::from("."));
        }
        Ok(roots)
    }

    /// The walk's options; `default_threads` when `-j` is not given.
    pub fn walk_options(&self, default_threads: usize) -> WalkOptions {
        WalkOptions {
            follow: self.follow,
            one_file_system: self.one_file_system,
            max_depth: self.max_depth,
            include: self.include.clone(),
            exclude: self.exclude.clone(),
            threads: self.threads.unwrap_or(default_threads).max(1),
            noatime: false,
        }
    }

    /// `--range`, or the whole file.
    pub fn range(&self) -> ByteRange {
        self.range.unwrap_or_default()
    }

    /// `--method`.
    pub fn method(&self) -> Method {
        self.method.into()
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

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum BackendArg {
    /// Perf events where the kernel allows them, else tracefs (with a notice)
    Auto,
    /// Perf events, one per CPU, inherited by the command's process tree (fails if refused)
    Perf,
    /// A tracefs instance following the command with set_event_pid (slower back to back)
    Tracefs,
}

impl From<BackendArg> for Backend {
    fn from(b: BackendArg) -> Backend {
        match b {
            BackendArg::Auto => Backend::Auto,
            BackendArg::Perf => Backend::Perf,
            BackendArg::Tracefs => Backend::Tracefs,
        }
    }
}

/// Tuning of the assist predictor.
#[derive(Args, Debug, Clone)]
pub struct AssistTuning {
    /// Cluster radius: a fault within SIZE of the previous one joins its cluster
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size_arg)]
    pub range: u64,
    /// Smallest prefetch window
    #[arg(long, value_name = "SIZE", default_value = "16K", value_parser = parse_size_arg)]
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

impl AssistTuning {
    /// Predictor options from the command line.
    pub fn config(&self, page: u64) -> Config {
        let mut c = Config::for_page_size(page);
        c.range_pages = (self.range / page).max(1);
        c.min_window = (self.min_window / page).max(1);
        c.max_window = (self.max_window / page).max(c.min_window);
        c.forward = !self.centred;
        c.range = !self.no_range;
        c.sequential = !self.no_sequential;
        c.stride = !self.no_stride;
        c
    }

    /// Live-assist options from the command line.
    pub fn options(&self, buffer_kb: u64) -> AssistOptions {
        AssistOptions {
            config: self.config(pagewise_core::sys::page_size()),
            buffer_kb,
            ..Default::default()
        }
    }
}

/// Parses a size (`4M`, `64K`, `1G`, bytes without a suffix) for clap.
pub fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// A size, or `none`/`off`/`unlimited` for no limit.
pub fn parse_limit_arg(s: &str) -> Result<u64, String> {
    match s {
        "none" | "off" | "unlimited" => Ok(u64::MAX),
        _ => parse_size(s).map_err(|e| e.to_string()),
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
    // A value past Duration's range is an error, not a panic.
    Duration::try_from_secs_f64(secs).map_err(|_| format!("'{s}' is too long a duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("x").is_err());
    }
}
