//! Flag groups several verbs share (walk, output, trace backend, assist tuning) and the
//! parsers of sizes and durations.

use super::exit::CliError;
use clap::{Args, ValueEnum};
use pagewise_core::assist::Config;
use pagewise_core::assist::Prefetch;
use pagewise_core::residency::parse_size;
use pagewise_core::trace::Backend;
use pagewise_core::{ByteRange, Method, WalkOptions};
use std::io::{BufRead, Read};
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
    #[arg(short = 'j', long, value_name = "N", value_parser = at_least_one)]
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

/// A count that must be at least 1 (threads, requests in flight, runs), refused at 0 when the
/// arguments are parsed: `invalid value '0' for '--depth <N>': must be at least 1`.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e} (a whole number, at least 1)")),
    }
}

/// The longest entry of a `--from` list: a path a system call takes is at most PATH_MAX
/// (4096) bytes with its terminating NUL.
pub const MAX_LIST_ENTRY: usize = 4095;

/// Why a `--from` list was refused (the caller names the file).
#[derive(Debug)]
pub enum ListError {
    /// Reading it failed.
    Io(std::io::Error),
    /// Entry `n` (1-based) is longer than [`MAX_LIST_ENTRY`].
    TooLong { n: u64, nul: bool },
    /// Line `n` of a newline-separated list holds a NUL byte.
    Nul { n: u64 },
    /// Entry `n` of a NUL-separated list is empty.
    Empty { n: u64 },
}

impl std::fmt::Display for ListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = |nul: bool| if nul { "entry" } else { "line" };
        match self {
            ListError::Io(e) => write!(f, "read failed: {e}"),
            ListError::TooLong { n, nul } => write!(
                f,
                "{} {n} is longer than {MAX_LIST_ENTRY} bytes, the longest path there is: not a list of paths",
                what(*nul)
            ),
            ListError::Nul { n } => write!(
                f,
                "line {n} holds a NUL byte: not a list of paths (a NUL-separated list, as find -print0 writes, needs -0)"
            ),
            ListError::Empty { n } => write!(
                f,
                "entry {n} is empty: not a NUL-separated list of paths (no path is empty)"
            ),
        }
    }
}

/// The paths of a `--from` list: entries separated by `sep` (`\n`, or `\0` under -0), each
/// read with a bound ([`MAX_LIST_ENTRY`]), so an endless source (/dev/zero) is refused after a
/// few KiB rather than buffered. Blank lines are skipped; a NUL-separated list has no empty
/// entry (find -print0 writes none; /dev/zero is nothing else), nor a line of a newline list a
/// NUL byte (no path has one).
pub fn read_path_list(r: &mut impl BufRead, sep: u8) -> Result<Vec<PathBuf>, ListError> {
    use std::os::unix::ffi::OsStrExt;
    let nul = sep == b'\0';
    let mut paths = Vec::new();
    let mut entry = Vec::with_capacity(256);
    for n in 1u64.. {
        entry.clear();
        // At most one byte past the bound (the separator) is read of one entry.
        let got = r
            .by_ref()
            .take(MAX_LIST_ENTRY as u64 + 1)
            .read_until(sep, &mut entry)
            .map_err(ListError::Io)?;
        if got == 0 {
            break;
        }
        if entry.last() == Some(&sep) {
            entry.pop();
        } else if entry.len() > MAX_LIST_ENTRY {
            return Err(match entry.contains(&0) {
                true if !nul => ListError::Nul { n },
                _ => ListError::TooLong { n, nul },
            });
        }
        match entry.is_empty() {
            true if nul => return Err(ListError::Empty { n }),
            true => continue,
            false if !nul && entry.contains(&0) => return Err(ListError::Nul { n }),
            false => paths.push(PathBuf::from(std::ffi::OsStr::from_bytes(&entry))),
        }
    }
    Ok(paths)
}

impl WalkArgs {
    /// Roots from the arguments and --from; the current directory when there are none.
    pub fn roots(&self) -> Result<Vec<PathBuf>, CliError> {
        let mut roots = self.paths.clone();
        if let Some(src) = &self.from {
            let sep = if self.null { b'\0' } else { b'\n' };
            let fail = |e: ListError| match e {
                ListError::Io(e) => CliError::file(format!("--from {}", src.display()), "read", e),
                e => CliError::Usage(format!("--from {}: {e}", src.display())),
            };
            let listed = if src.as_os_str() == "-" {
                read_path_list(&mut std::io::stdin().lock(), sep)
            } else {
                std::fs::File::open(src)
                    .map_err(ListError::Io)
                    .and_then(|f| read_path_list(&mut std::io::BufReader::new(f), sep))
            };
            roots.extend(listed.map_err(fail)?);
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
            threads: self.threads.unwrap_or(default_threads),
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

impl OutputArgs {
    /// The run's output format.
    pub fn format(&self) -> super::output::Output {
        super::output::Output::of(self.json, self.json_lines)
    }
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
    pub fn options(&self) -> Prefetch {
        Prefetch {
            config: self.config(pagewise_core::sys::page_size()),
            ..Default::default()
        }
    }
}

/// Parses a size (`4M`, `64K`, `1G`, bytes without a suffix) for clap.
pub fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// A size, or `none`/`off`/`unlimited` for no limit (None).
pub fn parse_limit_arg(s: &str) -> Result<Option<u64>, String> {
    match s {
        "none" | "off" | "unlimited" => Ok(None),
        _ => parse_size(s).map(Some).map_err(|e| e.to_string()),
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
    // Not from_secs_f64: it panics on what no Duration holds (1e300, inf).
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("'{s}' is longer than any duration pagewise can wait"))
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

    /// Durations no Duration can hold are refused with the reason (they panicked in
    /// Duration::from_secs_f64: `load --lock --for 99999999999999999999d` exited 101).
    #[test]
    fn durations_beyond_any_duration_are_refused() {
        let huge = format!("1{}", "0".repeat(400));
        for s in ["99999999999999999999d", "18446744073709551616", &huge] {
            let e = parse_duration(s).unwrap_err();
            assert!(e.contains(s) && e.contains("longer than any"), "{s}: {e}");
        }
        assert_eq!(
            parse_duration("100000000000d").unwrap(),
            Duration::from_secs(8_640_000_000_000_000)
        );
    }

    /// Sizes are read exactly (not through an f64's 53 bits), and sizes of 2^64 bytes or
    /// more are refused, not taken as the largest (`--range 0-1e30` was 0-18446744073709551615).
    #[test]
    fn sizes_are_exact_and_bounded() {
        assert_eq!(
            parse_size_arg("9007199254740993"),
            Ok(9_007_199_254_740_993)
        );
        assert_eq!(parse_size_arg("16383P"), Ok(16383 << 50));
        assert_eq!(parse_size_arg("1.5K"), Ok(1536));
        for s in ["16384P", "1e30", "2e19", "18446744073709551616"] {
            let e = parse_size_arg(s).unwrap_err();
            assert!(e.contains("larger than any size"), "{s}: {e}");
        }
        assert_eq!(parse_limit_arg("none"), Ok(None));
    }

    mod fuzz {
        //! Property tests of the parsers of sizes (`--merge-gap 64K`), limits (`--max-cache
        //! none`), ranges (`--range 0-1G`) and durations (`--for 10m`): no input panics, and
        //! what is accepted is what was written. [`CASES`] inputs per property in the normal
        //! suite; `PAGEWISE_FUZZ_SECS=600 cargo test --release --bin pagewise cli::args` runs
        //! each for that many seconds with fresh seeds and prints the inputs tried.
        use super::*;
        use pagewise_core::fuzzing::fuzz;
        use proptest::prelude::*;
        use std::os::unix::ffi::OsStrExt;

        const CASES: u32 = 2_000;

        /// Numbers as people (and attackers) write them.
        fn number() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<u64>().prop_map(|n| n.to_string()),
                any::<f64>().prop_map(|n| n.to_string()),
                (0u32..400).prop_map(|e| format!("1e{e}")),
                (any::<u32>(), 0u32..6)
                    .prop_map(|(n, d)| format!("{n}.{}", "5".repeat(d as usize))),
                prop_oneof![
                    Just("inf"),
                    Just("-inf"),
                    Just("NaN"),
                    Just("infinity"),
                    Just("-0"),
                    Just(""),
                    Just("."),
                    Just("0x10"),
                    Just("+3"),
                    Just("1_000"),
                    Just(" 7 "),
                    Just("18446744073709551616"),
                    Just("-1"),
                    Just("1e-400"),
                ]
                .prop_map(String::from),
            ]
        }

        fn unit() -> impl Strategy<Value = &'static str> {
            proptest::sample::select(vec![
                "", "K", "M", "G", "T", "P", "E", "k", "KiB", "MB", "iB", "B", "x", "é", "µs",
                "us", "ms", "s", "m", "min", "h", "d", "w", " ", "-", "--", "\u{0}",
            ])
        }

        /// A number with a unit, a range of two of them, or any characters at all.
        fn input() -> impl Strategy<Value = String> {
            let sized = (number(), unit())
                .prop_map(|(n, u)| format!("{n}{u}"))
                .boxed();
            prop_oneof![
                3 => sized.clone(),
                2 => (sized.clone(), sized, any::<bool>(), any::<bool>()).prop_map(
                    |(a, b, no_a, no_b)| format!(
                        "{}-{}",
                        if no_a { "" } else { a.as_str() },
                        if no_b { "" } else { b.as_str() }
                    )
                ),
                2 => proptest::collection::vec(any::<char>(), 0..12).prop_map(String::from_iter),
                1 => proptest::collection::vec(
                    proptest::sample::select(vec!['0', '1', '9', '.', 'e', '-', 'K', 'i', 'B', 's', ' ']),
                    0..16
                )
                .prop_map(String::from_iter),
            ]
        }

        #[test]
        fn sizes_and_limits() {
            fuzz("size", CASES, input(), |s| {
                let size = parse_size_arg(&s);
                let limit = parse_limit_arg(&s);
                // Plain integers are read exactly; a limit is a size or `none`.
                if let Ok(n) = s.trim().parse::<u64>() {
                    prop_assert_eq!(size.clone(), Ok(n));
                }
                if !matches!(s.as_str(), "none" | "off" | "unlimited") {
                    prop_assert_eq!(size.is_ok(), limit.is_ok());
                }
                if let Ok(n) = size {
                    // What is accepted reads back the same: written as bytes, it parses to itself
                    // (within f64's 53 bits, the parser's precision).
                    if n < 1 << 53 {
                        prop_assert_eq!(parse_size_arg(&n.to_string()), Ok(n));
                    }
                }
                Ok(())
            });
        }

        #[test]
        fn ranges() {
            fuzz("range", CASES, input(), |s| {
                if let Ok(r) = ByteRange::parse(&s) {
                    prop_assert!(r.end.is_none_or(|e| e > r.start), "{s}: {r:?}");
                    for size in [0u64, 1, 4095, 4096, 1 << 40, i64::MAX as u64] {
                        let (a, b) = r.span(size);
                        prop_assert!(a <= b && b <= size);
                        let _ = r.clamp(size);
                    }
                }
                Ok(())
            });
        }

        /// Entries of a path list: any bytes but the separator, some as long as allowed.
        fn entries(sep: u8) -> impl Strategy<Value = Vec<Vec<u8>>> {
            let byte = any::<u8>().prop_filter("not a separator", move |&b| b != sep && b != 0);
            let entry = prop_oneof![
                4 => proptest::collection::vec(byte.clone(), 0..40),
                1 => proptest::collection::vec(byte, MAX_LIST_ENTRY - 2..MAX_LIST_ENTRY + 3),
            ];
            proptest::collection::vec(entry, 0..8)
        }

        /// The list reader: well-formed lists (blank lines, a final separator or none) read
        /// back as written through any buffer size; what is over long, holds a NUL in a line or
        /// an empty NUL-separated entry is refused with that entry's number; arbitrary bytes
        /// never panic and give only entries within the bound.
        #[test]
        fn path_lists() {
            let input =
                (any::<bool>(), any::<bool>(), 1usize..64).prop_flat_map(|(nul, end, cap)| {
                    let sep = if nul { 0 } else { b'\n' };
                    (entries(sep), Just((sep, end, cap)))
                });
            fuzz("path list", 512, input, |(list, (sep, end, cap))| {
                let mut bytes = list.join(&sep);
                if end && !list.is_empty() {
                    bytes.push(sep);
                }
                let mut r = std::io::BufReader::with_capacity(cap, &bytes[..]);
                let got = read_path_list(&mut r, sep);
                // Without a final separator, an empty last entry is no bytes at all.
                let written = match list.last() {
                    Some(last) if !end && last.is_empty() => list.len() - 1,
                    _ => list.len(),
                };
                let bad = list
                    .iter()
                    .take(written)
                    .position(|e| e.len() > MAX_LIST_ENTRY || (sep == 0 && e.is_empty()));
                match (bad, got) {
                    (None, Ok(paths)) => {
                        let want: Vec<&Vec<u8>> = list.iter().filter(|e| !e.is_empty()).collect();
                        let got: Vec<&[u8]> =
                            paths.iter().map(|p| p.as_os_str().as_bytes()).collect();
                        prop_assert_eq!(got, want.iter().map(|e| e.as_slice()).collect::<Vec<_>>());
                    }
                    (Some(i), Err(ListError::TooLong { n, .. } | ListError::Empty { n })) => {
                        prop_assert_eq!(n, i as u64 + 1)
                    }
                    (bad, got) => prop_assert!(false, "bad entry {bad:?}, read {got:?}"),
                }
                Ok(())
            });
            let junk = (
                any::<bool>(),
                proptest::collection::vec(
                    proptest::sample::select(vec![0u8, b'\n', b'a', 0xff]),
                    0..10_000,
                ),
            );
            fuzz("path list bytes", 256, junk, |(nul, bytes)| {
                let sep = if nul { 0 } else { b'\n' };
                if let Ok(paths) = read_path_list(&mut &bytes[..], sep) {
                    for p in paths {
                        let p = p.as_os_str().as_bytes();
                        prop_assert!(!p.is_empty() && p.len() <= MAX_LIST_ENTRY);
                        prop_assert!(!p.contains(&0) && !p.contains(&sep));
                    }
                }
                Ok(())
            });
        }

        #[test]
        fn durations() {
            fuzz("duration", CASES, input(), |s| {
                if let Ok(d) = parse_duration(&s) {
                    // Whatever is accepted is a duration a deadline can be made of.
                    let _ = std::time::Instant::now().checked_add(d);
                    prop_assert!(d.as_secs_f64().is_finite());
                }
                Ok(())
            });
        }
    }
}
