//! Page faults without the `mm_filemap_fault` tracepoint (Linux before 6.7, Debian 12's 6.1):
//! perf's software events `PERF_COUNT_SW_PAGE_FAULTS_MAJ` and `_MIN`, sampled at every fault
//! with the faulting address, which the process's mappings (`/proc/PID/maps`) turn into a
//! file and an offset: the same [`RawEvent`] the tracepoint gives, plus whether the kernel
//! counted the fault major (it waited for the page to be read).
//!
//! The kernel counts a fault when it is done (`mm_account_fault`), after the read a major
//! fault waited for, where the tracepoint fires before it: the page a major fault read has
//! entered the cache (`mm_filemap_add_to_page_cache`) before its sample, which is why the
//! assistant takes a major fault as a miss whatever the pages added say.
//!
//! Chosen at run time by [`super::perf::Session::start_on`]: the tracepoint where the kernel
//! has it, these events where it does not; `PAGEWISE_FAULTS_FROM=samples` forces them (the
//! tests' way to follow this route on a new kernel), `=tracepoint` forbids them.

use super::tracefs::RawEvent;
use crate::procfs::{self, FileMapping};
use crate::sys;
use std::collections::HashMap;

/// The environment variable choosing how faults are followed: `samples` (perf software
/// events, even where the tracepoint exists) or `tracepoint` (refuse without it); anything
/// else, or unset: the tracepoint where the kernel has it.
pub const FAULTS_FROM_ENV: &str = "PAGEWISE_FAULTS_FROM";

/// How page faults are followed, as [`FAULTS_FROM_ENV`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultsFrom {
    /// The tracepoint where the kernel has it, else samples.
    Auto,
    /// The software events' samples.
    Samples,
    /// The tracepoint only.
    Tracepoint,
}

impl FaultsFrom {
    /// What [`FAULTS_FROM_ENV`] says.
    pub fn from_env() -> FaultsFrom {
        match std::env::var(FAULTS_FROM_ENV).as_deref() {
            Ok("samples") => FaultsFrom::Samples,
            Ok("tracepoint") => FaultsFrom::Tracepoint,
            _ => FaultsFrom::Auto,
        }
    }
}

/// One fault sample: `PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultSample {
    /// The process (thread group).
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// CLOCK_MONOTONIC, ns.
    pub time_ns: u64,
    /// The faulting address.
    pub addr: u64,
}

/// Decodes the body of a PERF_RECORD_SAMPLE of the fault events: u32 pid, u32 tid, u64 time,
/// u64 addr (the order of `PERF_SAMPLE_*` bits). None when it is shorter; bytes after them
/// are ignored.
pub fn parse_fault_sample(b: &[u8]) -> Option<FaultSample> {
    let u32_at = |o: usize| Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_ne_bytes(b.get(o..o + 8)?.try_into().ok()?));
    Some(FaultSample {
        pid: u32_at(0)?,
        tid: u32_at(4)?,
        time_ns: u64_at(8)?,
        addr: u64_at(16)?,
    })
}

/// Processes whose mappings are kept at once (the one read longest ago goes first).
const MAX_PROCESSES: usize = 1024;

/// Mappings kept per process (`vm.max_map_count` is 65530 by default).
const MAX_MAPPINGS: usize = 1 << 17;

/// A process's file mappings, sorted by address, and when they were read.
struct Maps {
    list: Vec<FileMapping>,
    read_ns: u64,
}

impl Maps {
    fn find(&self, addr: u64) -> Option<&FileMapping> {
        let i = self.list.partition_point(|m| m.start <= addr);
        let m = self.list.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }
}

/// Faulting addresses to `(device, inode, offset)` through the processes' `/proc/PID/maps`,
/// read when a process is first seen and again when an address is in none of its file
/// mappings and they were read before the fault (a file mapped since); at most
/// [`MAX_PROCESSES`] kept.
pub struct Resolver {
    procs: HashMap<u32, Maps>,
    /// Reads of /proc/PID/maps so far.
    pub reads: u64,
    read: Box<dyn FnMut(u32) -> Vec<FileMapping> + Send>,
}

impl Default for Resolver {
    fn default() -> Self {
        Resolver::with_reader(Box::new(|pid| {
            procfs::file_mappings(pid).unwrap_or_default()
        }))
    }
}

impl Resolver {
    /// A resolver reading a process's mappings with `read` (tests and the fuzz harness give
    /// their own).
    pub fn with_reader(read: Box<dyn FnMut(u32) -> Vec<FileMapping> + Send>) -> Resolver {
        Resolver {
            procs: HashMap::new(),
            reads: 0,
            read,
        }
    }

    /// The event of fault `s` (`major` as the kernel counted it): None when its address is
    /// in none of the process's file mappings (anonymous memory, or a process gone).
    pub fn event(&mut self, s: &FaultSample, major: bool, now_ns: u64) -> Option<RawEvent> {
        let m = self.mapping(s.pid, s.addr, s.time_ns, now_ns)?;
        let page = sys::page_size();
        let ofs = m.offset.checked_add(s.addr - m.start)? / page * page;
        Some(RawEvent {
            pid: s.tid,
            ts_us: s.time_ns / 1000,
            dev_major: m.dev.0,
            dev_minor: m.dev.1,
            ino: m.ino,
            ofs,
            order: 0,
            fault: true,
            mapped: 0,
            major: Some(major),
        })
    }

    /// The file mapping of `pid` holding `addr` at `time_ns` (read at `now_ns` if need be).
    fn mapping(&mut self, pid: u32, addr: u64, time_ns: u64, now_ns: u64) -> Option<FileMapping> {
        if let Some(maps) = self.procs.get(&pid) {
            if let Some(m) = maps.find(addr) {
                return Some(m.clone());
            }
            // Read after the fault: the address was in no file mapping then either.
            if maps.read_ns >= time_ns {
                return None;
            }
        }
        if self.procs.len() >= MAX_PROCESSES && !self.procs.contains_key(&pid) {
            let oldest = self
                .procs
                .iter()
                .min_by_key(|(_, m)| m.read_ns)
                .map(|(p, _)| *p);
            if let Some(p) = oldest {
                self.procs.remove(&p);
            }
        }
        let mut list = (self.read)(pid);
        self.reads += 1;
        list.retain(|m| m.start < m.end);
        list.truncate(MAX_MAPPINGS);
        list.sort_unstable_by_key(|m| m.start);
        let maps = Maps {
            list,
            read_ns: now_ns,
        };
        let found = maps.find(addr).cloned();
        self.procs.insert(pid, maps);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(pid: u32, tid: u32, t: u64, addr: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&pid.to_ne_bytes());
        b.extend_from_slice(&tid.to_ne_bytes());
        b.extend_from_slice(&t.to_ne_bytes());
        b.extend_from_slice(&addr.to_ne_bytes());
        b
    }

    fn mapping(start: u64, end: u64, offset: u64, ino: u64) -> FileMapping {
        FileMapping {
            start,
            end,
            offset,
            dev: (8, 1),
            ino,
        }
    }

    #[test]
    fn samples_parse_in_the_order_of_their_bits() {
        let b = bytes(7, 8, 9, 0x7f00_0000_1234);
        assert_eq!(
            parse_fault_sample(&b),
            Some(FaultSample {
                pid: 7,
                tid: 8,
                time_ns: 9,
                addr: 0x7f00_0000_1234
            })
        );
        for n in 0..b.len() {
            assert_eq!(parse_fault_sample(&b[..n]), None, "{n} bytes");
        }
    }

    #[test]
    fn addresses_resolve_to_file_pages_and_maps_are_read_again_for_new_mappings() {
        let page = sys::page_size();
        let maps = std::sync::Arc::new(std::sync::Mutex::new(vec![mapping(
            0x10000,
            0x10000 + 16 * page,
            4 * page,
            42,
        )]));
        let m2 = maps.clone();
        let mut r = Resolver::with_reader(Box::new(move |_| m2.lock().unwrap().clone()));
        let s = |t: u64, addr: u64| FaultSample {
            pid: 5,
            tid: 6,
            time_ns: t,
            addr,
        };
        let e = r.event(&s(10, 0x10000 + page + 17), true, 20).unwrap();
        assert_eq!(
            (e.pid, e.ino, e.ofs, e.dev_major, e.dev_minor),
            (6, 42, 5 * page, 8, 1)
        );
        assert!(e.fault && e.major == Some(true) && e.ts_us == 0);
        assert_eq!(r.reads, 1);
        // Anonymous memory, faulted before the maps were read: not read again.
        assert!(r.event(&s(15, 0x1000), false, 30).is_none());
        assert_eq!(r.reads, 1);
        // A file mapped since: a fault after the read reads them again.
        maps.lock().unwrap().push(mapping(0x1000, 0x2000, 0, 43));
        let e = r.event(&s(40, 0x1fff), false, 50).unwrap();
        assert_eq!((e.ino, e.ofs, e.major), (43, 0, Some(false)));
        assert_eq!(r.reads, 2);
        // Past the end of a mapping.
        assert!(r.event(&s(45, 0x10000 + 16 * page), true, 60).is_none());
        assert_eq!(r.reads, 2);
    }

    #[test]
    fn processes_kept_are_bounded() {
        let mut r =
            Resolver::with_reader(Box::new(|pid| vec![mapping(0x1000, 0x2000, 0, pid as u64)]));
        for pid in 0..(MAX_PROCESSES as u32 + 10) {
            let s = FaultSample {
                pid,
                tid: pid,
                time_ns: 1,
                addr: 0x1000,
            };
            assert_eq!(r.event(&s, true, 2 + pid as u64).unwrap().ino, pid as u64);
        }
        assert_eq!(r.procs.len(), MAX_PROCESSES);
    }

    /// The sample parser and the resolution of its address are fed arbitrary bytes and
    /// arbitrary mappings (overlapping, empty, inverted, at the top of the address space):
    /// no panic, and an event only for an address inside a mapping.
    #[test]
    fn fuzz_fault_samples() {
        let maps = proptest::collection::vec(
            (any::<u64>(), any::<u64>(), any::<u64>(), 1..u64::MAX),
            0..8,
        );
        let input = (proptest::collection::vec(any::<u8>(), 0..40), maps);
        crate::fuzzing::fuzz("fault samples", 512, input, |(b, maps)| {
            let list: Vec<FileMapping> = maps
                .iter()
                .map(|&(s, e, o, i)| mapping(s, e, o, i))
                .collect();
            let l2 = list.clone();
            let mut r = Resolver::with_reader(Box::new(move |_| l2.clone()));
            let Some(s) = parse_fault_sample(&b) else {
                prop_assert!(b.len() < 24);
                return Ok(());
            };
            if let Some(e) = r.event(&s, true, 0) {
                prop_assert!(list
                    .iter()
                    .any(|m| m.start <= s.addr && s.addr < m.end && m.ino == e.ino));
            }
            Ok(())
        });
    }
}
