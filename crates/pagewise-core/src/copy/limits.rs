//! Sizes as rsync reads them (`--max-size`, `--min-size`, `--bwlimit`): a number with an
//! optional fraction, a unit (`b`, `k`, `m`, `g`, `t`, `p`, any case) that counts in 1024s,
//! or in 1000s when followed by `b` (`kb`, `MB`), `ib` allowed (`KiB`), and an optional
//! `+1` or `-1` ("just over", "just under"). And the bandwidth limit (`--bwlimit`):
//! [`Bandwidth`].

use crate::error::Error;
use crate::sys::IoPriority;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An I/O priority as ionice(1) names its classes: `idle` (3), `best-effort[:LEVEL]` (2,
/// also `be`), LEVEL 0-7.
pub fn parse_io_priority(s: &str) -> Result<IoPriority, String> {
    let (class, level) = match s.split_once(':') {
        Some((c, l)) => (c, Some(l)),
        None => (s, None),
    };
    match (class, level) {
        ("idle" | "3", None) => Ok(IoPriority::Idle),
        ("best-effort" | "be" | "2", None) => Ok(IoPriority::BestEffort(4)),
        ("best-effort" | "be" | "2", Some(l)) => match l.parse::<u8>() {
            Ok(n) if n <= 7 => Ok(IoPriority::BestEffort(n)),
            _ => Err(format!("{l:?} is not a level 0-7")),
        },
        ("realtime" | "1", _) => {
            Err("the realtime class is not offered (it can starve the system)".into())
        }
        _ => Err(format!("{s:?}: use idle or best-effort[:0-7]")),
    }
}

/// A bandwidth limit shared by every thread of a copy: each chunk reserves its time on one
/// clock before it moves (`bytes / rate` after the previous reservation, never before now), so
/// over any window the bytes moved are at most the rate times the window plus the chunks in
/// flight, and idle time earns no burst.
#[derive(Debug)]
pub struct Bandwidth {
    /// The rate as f64 bits (set while the copy runs by `--bwlimit auto`).
    bytes_per_s: std::sync::atomic::AtomicU64,
    next: Mutex<Option<Instant>>,
    /// The copy's own reads so far and their time in µs (see [`Bandwidth::note_read`]).
    own: (AtomicU64, AtomicU64),
}

/// Longest single sleep while waiting for a reservation (a stop is seen within it).
const NAP: Duration = Duration::from_millis(50);

impl Bandwidth {
    /// A limit of `bytes_per_s` (at least 1).
    pub fn new(bytes_per_s: u64) -> Self {
        Bandwidth {
            bytes_per_s: std::sync::atomic::AtomicU64::new((bytes_per_s.max(1) as f64).to_bits()),
            next: Mutex::new(None),
            own: Default::default(),
        }
    }

    /// One read of the copy's own that took `took`: `--bwlimit auto` takes the copy's reads
    /// out of the devices' read latency, which is meant to be the others'.
    pub fn note_read(&self, took: Duration) {
        self.own.0.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.own.1.fetch_add(us, Ordering::Relaxed);
    }

    /// The copy's own reads so far and their time in µs.
    pub fn own_reads(&self) -> (u64, u64) {
        (
            self.own.0.load(Ordering::Relaxed),
            self.own.1.load(Ordering::Relaxed),
        )
    }

    /// Sets the rate (bytes per second, at least 1; infinite: no limit).
    pub fn set_rate(&self, bytes_per_s: f64) {
        let r = bytes_per_s.max(1.0);
        self.bytes_per_s
            .store(r.to_bits(), std::sync::atomic::Ordering::Relaxed);
    }

    fn rate(&self) -> f64 {
        f64::from_bits(self.bytes_per_s.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Waits until `bytes` may move; returns early (false) when `stop()` says so.
    pub fn take(&self, bytes: u64, stop: impl Fn() -> bool) -> bool {
        let start = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let start = next.map_or(now, |n| n.max(now));
            *next = Some(start + Duration::from_secs_f64(bytes as f64 / self.rate()));
            start
        };
        loop {
            let now = Instant::now();
            if now >= start {
                return true;
            }
            if stop() {
                return false;
            }
            std::thread::sleep((start - now).min(NAP));
        }
    }
}

/// Parses an rsync size argument; `default_unit` applies to a bare number (`b` for sizes,
/// `k` for `--bwlimit`). `option` names the option in the error.
pub fn parse_rsync_size(arg: &str, default_unit: u8, option: &'static str) -> Result<u64, Error> {
    let bad = |why: &str| Error::Invalid {
        what: option,
        message: format!("{arg:?} is {why} (a size such as 100, 1.5K, 10MB, 2G-1)"),
    };
    let b = arg.as_bytes();
    let mut i = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if b.get(i) == Some(&b'.') {
        i += 1 + b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
    }
    let number = &arg[..i];
    if number.is_empty() || number == "." {
        return Err(bad("not a number"));
    }
    let (unit, mut rest) = match b.get(i) {
        Some(&c) if c != b'+' && c != b'-' => (c, &b[i + 1..]),
        _ => (default_unit, &b[i..]),
    };
    let reps = match unit.to_ascii_lowercase() {
        b'b' => 0,
        b'k' => 1,
        b'm' => 2,
        b'g' => 3,
        b't' => 4,
        b'p' => 5,
        _ => return Err(bad("invalid")),
    };
    let mult: f64 = if let [b'b' | b'B', tail @ ..] = rest {
        rest = tail;
        1000.0
    } else if rest.len() >= 2 && rest[..2].eq_ignore_ascii_case(b"ib") {
        rest = &rest[2..];
        1024.0
    } else {
        1024.0
    };
    let value: f64 = number.parse().map_err(|_| bad("not a number"))?;
    let size = value * mult.powi(reps);
    if !size.is_finite() || size >= u64::MAX as f64 / 2.0 {
        return Err(bad("too large"));
    }
    let mut size = size as u64;
    match rest {
        [] => {}
        [b'+', b'1'] => size += 1,
        [b'-', b'1'] => size = size.saturating_sub(1),
        _ => return Err(bad("invalid")),
    }
    Ok(size)
}

/// One notice per device the copy reads or writes whose I/O scheduler ignores I/O priorities
/// (`none`, `kyber`: only `bfq` and `mq-deadline`, Linux 5.14+, serve the classes), so that
/// `--ionice` is said to change nothing there. The destination's device is its parent's when
/// it does not exist yet.
pub fn ignored_priority(sources: &[std::path::PathBuf], dest: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let dev_of = |p: &std::path::Path| {
        std::fs::metadata(p)
            .or_else(|_| std::fs::metadata(p.parent().unwrap_or(p)))
            .map(|m| m.dev())
            .ok()
    };
    let mut devs: Vec<u64> = sources
        .iter()
        .map(|p| p.as_path())
        .chain([dest])
        .filter_map(dev_of)
        .collect();
    devs.sort_unstable();
    devs.dedup();
    devs.into_iter()
        .filter_map(|d| {
            let s = crate::sys::io_scheduler(d)?;
            matches!(s.as_str(), "none" | "kyber").then(|| {
                format!(
                    "--ionice: the I/O scheduler of device {}:{} is {s}, which ignores I/O \
                     priorities (bfq and mq-deadline serve them): use --bwlimit to hold the \
                     copy back there",
                    libc::major(d),
                    libc::minor(d)
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_rsync_reads_them() {
        let p = |s| parse_rsync_size(s, b'b', "max_size").ok();
        assert_eq!(p("100"), Some(100));
        assert_eq!(p("1K"), Some(1024));
        assert_eq!(p("1k"), Some(1024));
        assert_eq!(p("1kb"), Some(1000));
        assert_eq!(p("1KiB"), Some(1024));
        assert_eq!(p("2.9K"), Some(2969));
        assert_eq!(p("1M+1"), Some((1 << 20) + 1));
        assert_eq!(p("1G-1"), Some((1 << 30) - 1));
        assert_eq!(p("5b"), Some(5));
        for bad in [
            "",
            "x",
            "1x",
            "1Kx",
            "-1",
            "1K+2",
            ".",
            "1e9",
            "99999999999P",
        ] {
            assert_eq!(p(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_rsync_size("50", b'k', "bwlimit").ok(),
            Some(50 * 1024)
        );
        assert_eq!(
            parse_rsync_size("50M", b'k', "bwlimit").ok(),
            Some(50 << 20)
        );
    }

    #[test]
    fn bandwidth_holds_the_rate_across_threads() {
        let b = Bandwidth::new(40 << 20);
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..5 {
                        b.take(1 << 20, || false);
                    }
                });
            }
        });
        // 20 MiB at 40 MiB/s: the last reservation starts at 19/40 s.
        let took = t.elapsed().as_secs_f64();
        assert!((0.47..0.7).contains(&took), "{took}");
        let slow = Bandwidth::new(1);
        slow.take(10, || false);
        assert!(!slow.take(1, || true), "a stop ends the wait");
    }

    #[test]
    fn io_priorities_as_ionice_names_them() {
        assert_eq!(parse_io_priority("idle"), Ok(IoPriority::Idle));
        assert_eq!(parse_io_priority("3"), Ok(IoPriority::Idle));
        assert_eq!(parse_io_priority("be"), Ok(IoPriority::BestEffort(4)));
        assert_eq!(
            parse_io_priority("best-effort:7"),
            Ok(IoPriority::BestEffort(7))
        );
        for bad in ["idle:1", "be:8", "realtime", "1", "", "x"] {
            assert!(parse_io_priority(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fuzz_sizes() {
        use proptest::prelude::*;
        let s = proptest::string::string_regex("[0-9.kKmMbBiI+-]{0,12}").unwrap();
        crate::fuzzing::fuzz("rsync sizes", 2048, (s, any::<bool>()), |(s, k)| {
            let _ = parse_rsync_size(&s, if k { b'k' } else { b'b' }, "size");
        });
    }
}
