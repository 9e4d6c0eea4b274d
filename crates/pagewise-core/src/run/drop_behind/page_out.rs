//! Paging the command's mapped pages out of its processes (`process_madvise(MADV_PAGEOUT)`),
//! which DONTNEED cannot drop while they stay mapped; the processes' file mappings are read
//! from /proc at most every [`MAPS_TTL`].

use super::super::pending::Mappers;
use crate::residency::PageRange;
use crate::sys;
use crate::sys::FileId as FileKey;
use crate::verb::Tally;
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a process's file mappings read from /proc/PID/maps are used before they are read
/// again. Reading them at every drop cost an eighth of the CPU under fio mmap randread (the
/// retries come every few ms); a mapping replaced within this time would have the new file's
/// pages at those addresses paged out (clean pages, faulted in again when read).
const MAPS_TTL: Duration = Duration::from_millis(100);

/// Ranges paged out per `process_madvise` call (see [`PageOut::page_out`]).
const PAGE_OUT_RANGES: usize = 64;

/// A process's file mappings (None: unreadable) and when they were read.
type ReadMaps = (Instant, Option<Vec<crate::procfs::FileMapping>>);

/// What paging out remembers between drops: whether the kernel refused, and the processes'
/// file mappings. Owned by the [`Dropper`](super::Dropper); changed only here.
#[derive(Default)]
pub(super) struct PageOut {
    /// `process_madvise` was refused: mapped pages are not paged out.
    refused: AtomicBool,
    /// The process of each thread seen mapping a file.
    tgids: Mutex<HashMap<u32, Option<u32>>>,
    /// The file mappings of those processes, read at most every [`MAPS_TTL`].
    maps: Mutex<HashMap<u32, ReadMaps>>,
}

impl PageOut {
    /// Pages the command maps cannot be dropped with DONTNEED while they stay mapped (an
    /// mmap it keeps: fio's whole file, a database's). So the ranges of files its threads were
    /// seen using are first paged out of their processes where those map them
    /// (`process_madvise(MADV_PAGEOUT)`, [`PAGE_OUT_RANGES`] ranges a call: clean file pages
    /// mapped by that process alone leave the cache, as under memory pressure; the process
    /// faults them in again if it reads them again). Trying DONTNEED first and paging out only
    /// what stayed through the retries cost six passes over every mapped range (fio mmap
    /// randread under `run --assist`: a third of the CPU in the drop-behind thread). What
    /// stays (pages several processes map) is retried and parked by the caller. Where the
    /// kernel refuses (no CAP_SYS_NICE, or before Linux 5.10) a notice says so once and mapped
    /// pages stay until the command unmaps them.
    pub(super) fn page_out(
        &self,
        ranges: &[&(FileKey, Vec<PageRange>)],
        mappers: &Mappers,
        tally: &Tally,
    ) {
        if self.refused.load(Ordering::Relaxed) {
            return;
        }
        let page = sys::page_size();
        let mut per_process: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        let mut maps = self.maps.lock().unwrap();
        maps.retain(|_, (at, _)| at.elapsed() < MAPS_TTL);
        for (key, ranges) in ranges {
            let Some(tids) = mappers.get(key) else {
                continue;
            };
            let mut tgids: Vec<u32> = tids.iter().filter_map(|&t| self.tgid_of(t)).collect();
            tgids.sort_unstable();
            tgids.dedup();
            for tgid in tgids {
                let (_, m) = maps
                    .entry(tgid)
                    .or_insert_with(|| (Instant::now(), crate::procfs::file_mappings(tgid).ok()));
                let Some(m) = m else {
                    continue;
                };
                let iov = per_process.entry(tgid).or_default();
                for m in m
                    .iter()
                    .filter(|m| m.dev == (key.0, key.1) && m.ino == key.2)
                {
                    iov.extend(ranges.iter().filter_map(|r| {
                        let (off, len) = r.bytes(page);
                        m.addresses_of(off, len)
                    }));
                }
            }
        }
        drop(maps);
        for (tgid, iov) in per_process {
            if iov.is_empty() {
                continue;
            }
            // At most PAGE_OUT_RANGES ranges a call: a call of 1,024 windows of 128 KiB
            // reclaims for milliseconds, and the kernel does not preempt inside it.
            let r = sys::pidfd_open(tgid).and_then(|pidfd| {
                iov.chunks(PAGE_OUT_RANGES)
                    .try_for_each(|c| sys::process_madvise_pageout(pidfd.as_fd(), c).map(drop))
            });
            match r {
                // The process exited meanwhile: its mappings are gone.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    if !self.refused.swap(true, Ordering::Relaxed) {
                        tally.notice(format!(
                            "pages the command maps stay cached until it unmaps them \
                             (process_madvise(MADV_PAGEOUT): {e})"
                        ));
                    }
                    return;
                }
                Ok(()) => {}
            }
        }
    }

    /// The process of thread `tid` (remembered: read once from /proc).
    fn tgid_of(&self, tid: u32) -> Option<u32> {
        *self
            .tgids
            .lock()
            .unwrap()
            .entry(tid)
            .or_insert_with(|| crate::procfs::tgid_of(tid))
    }
}
