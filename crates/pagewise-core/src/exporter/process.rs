//! The standard `process_*` metrics of the exporter's own process, read from `/proc/self` as
//! the Prometheus client libraries read them (client_golang's procfs collector): CPU time and
//! memory from `/proc/self/stat`, the start time from it and `/proc/stat`'s `btime`, open
//! descriptors by counting `/proc/self/fd`, their limit from `/proc/self/limits`.
//!
//! Each figure is `None` when its file cannot be read or parsed; the rest are still given.

use super::metrics::{Kind, Writer};

/// The figures, in seconds and bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessSnapshot {
    /// User and system CPU time (`utime + stime` over CLK_TCK).
    pub cpu_seconds: Option<f64>,
    /// Resident set (`rss` pages times the page size).
    pub resident_bytes: Option<u64>,
    /// Virtual memory (`vsize`).
    pub virtual_bytes: Option<u64>,
    /// Start time since the epoch (`btime + starttime / CLK_TCK`).
    pub start_time_seconds: Option<f64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// `Max open files` (soft limit); None also when unlimited.
    pub max_fds: Option<u64>,
}

/// The fields of `/proc/PID/stat` after the command name: (utime, stime, starttime in clock
/// ticks; vsize in bytes; rss in pages). The command name may hold spaces and `)`: the fields
/// start after the last `)`.
pub fn parse_stat(text: &str) -> Option<(u64, u64, u64, u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().take(22).collect();
    // Field n of proc(5) is f[n - 3].
    let n = |i: usize| f.get(i - 3)?.parse::<u64>().ok();
    Some((n(14)?, n(15)?, n(22)?, n(23)?, n(24)?))
}

/// `btime` of `/proc/stat`: the boot time, seconds since the epoch.
pub fn parse_btime(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft `Max open files` of `/proc/PID/limits` (None when unlimited or unparsable).
pub fn parse_max_fds(text: &str) -> Option<u64> {
    let rest = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    rest.split_ascii_whitespace().next()?.parse().ok()
}

impl ProcessSnapshot {
    /// Reads this process's figures now.
    pub fn read() -> ProcessSnapshot {
        use crate::procfs;
        let tick = rustix::param::clock_ticks_per_second().max(1) as f64;
        let page = rustix::param::page_size() as u64;
        let stat = procfs::own_stat_text().as_deref().and_then(parse_stat);
        let btime = procfs::machine_stat_text().as_deref().and_then(parse_btime);
        ProcessSnapshot {
            cpu_seconds: stat.map(|s| (s.0 + s.1) as f64 / tick),
            resident_bytes: stat.map(|s| s.4.saturating_mul(page)),
            virtual_bytes: stat.map(|s| s.3),
            start_time_seconds: stat.zip(btime).map(|(s, b)| b as f64 + s.2 as f64 / tick),
            open_fds: procfs::own_open_fds(),
            max_fds: procfs::own_limits_text().as_deref().and_then(parse_max_fds),
        }
    }

    /// Writes the families it has.
    pub fn render(&self, w: &mut Writer) {
        let u = |v: Option<u64>| v.map(|v| v as f64);
        for (name, kind, help, v) in [
            (
                "process_cpu_seconds_total",
                Kind::Counter,
                "Total user and system CPU time spent in seconds.",
                self.cpu_seconds,
            ),
            (
                "process_resident_memory_bytes",
                Kind::Gauge,
                "Resident memory size in bytes.",
                u(self.resident_bytes),
            ),
            (
                "process_virtual_memory_bytes",
                Kind::Gauge,
                "Virtual memory size in bytes.",
                u(self.virtual_bytes),
            ),
            (
                "process_start_time_seconds",
                Kind::Gauge,
                "Start time of the process since unix epoch in seconds.",
                self.start_time_seconds,
            ),
            (
                "process_open_fds",
                Kind::Gauge,
                "Number of open file descriptors.",
                u(self.open_fds),
            ),
            (
                "process_max_fds",
                Kind::Gauge,
                "Maximum number of open file descriptors.",
                u(self.max_fds),
            ),
        ] {
            if let Some(v) = v {
                w.single(name, kind, help, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzzing::fuzz;

    #[test]
    fn stat_limits_and_btime_parse() {
        let stat = "42 (a) b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 \
                    1000 8192000 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0";
        assert_eq!(parse_stat(stat), Some((250, 50, 1000, 8192000, 300)));
        assert_eq!(parse_stat("1 (x) S 1"), None);
        assert_eq!(
            parse_btime("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(
            parse_max_fds("Max open files unlimited unlimited files\n"),
            None
        );
    }

    #[test]
    fn this_process_figures_match_the_kernel() {
        let p = ProcessSnapshot::read();
        let rl = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(p.max_fds, rl.current);
        assert!(p.open_fds.unwrap() >= 3);
        assert!(p.resident_bytes.unwrap() > 0);
        assert!(p.virtual_bytes.unwrap() >= p.resident_bytes.unwrap());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = p.start_time_seconds.unwrap();
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "{start} vs {now}"
        );
    }

    /// Any text: a parse or None, never a panic.
    #[test]
    fn fuzz_proc_parsers() {
        use proptest::prelude::*;
        let text = prop_oneof![
            any::<String>(),
            "[0-9]{1,5} \\([ -~]{0,20}\\)( [-0-9]{1,21}){0,30}",
            "(btime|Max open files)[ 0-9a-z]{0,40}\n",
        ];
        fuzz("proc-self", 512, text, |t| {
            let _ = parse_stat(&t);
            let _ = parse_btime(&t);
            let _ = parse_max_fds(&t);
        });
    }
}
