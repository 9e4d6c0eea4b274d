//! The access-pattern predictor: fed `(file, page, hit/miss, time)` accesses, it returns the
//! windows worth prefetching. Pure logic, no I/O.
//!
//! Three detectors, tried in this order on every miss (a hit never prefetches):
//!
//! - **sequential**: the accesses since the current cluster began climb without gaps larger than
//!   `seq_gap` pages, over more than `seq_min_run` pages and twice the last cluster's span. The
//!   window starts where the last sequential prefetch ended and doubles up to `max_window`.
//! - **stride**: the first pages of the last three clusters are equally spaced (a column scan
//!   reading a little every N MiB): prefetch the next cluster, one stride ahead, with the span of
//!   the last one.
//! - **range** (Lustre LU-13669): accesses within `range` bytes of the previous one form a
//!   cluster; when an access lands farther away, the cluster closes and its span (highest − lowest
//!   page + 1) is remembered. On the next miss, prefetch a window of that span (at least
//!   `min_window` pages) centred on the missing page. `forward` is our refinement: the window is
//!   laid around the missing page as the last clusters lay around their first access (a chunk
//!   read upwards: the window starts at the missing page), so no half of it lands outside the
//!   chunk.
//!
//! Per-file state is bounded (`max_files`, least recently used dropped first) and windows that
//! were already issued recently are not issued again.
//!
//! Here: the types and the [`Predictor`] over its files; each file's state and the detectors
//! in `file_state`.

mod file_state;

use file_state::FileState;
use std::collections::HashMap;

/// Which detector proposed a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Detector {
    /// Consecutive pages, read upwards.
    Sequential,
    /// Accesses a constant distance apart.
    Stride,
    /// Clusters of accesses close to each other (Lustre LU-13669).
    Range,
}

/// Tuning of the predictor. Sizes are in pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The sequential detector is on.
    pub sequential: bool,
    /// The stride detector is on.
    pub stride: bool,
    /// The range detector is on.
    pub range: bool,
    /// Cluster radius: an access within this many pages of the previous one joins its cluster.
    pub range_pages: u64,
    /// Smallest window issued (Lustre: 16 pages).
    pub min_window: u64,
    /// Largest window issued.
    pub max_window: u64,
    /// Lay range windows around the missing page as the last clusters lay around their first
    /// access (see [`FileState`]'s `shaped`), instead of centring them on it (Lustre).
    pub forward: bool,
    /// Largest gap between two accesses of a sequential run (fault-around maps 16 pages at once,
    /// so faults of a sequential reader are up to 16 pages apart).
    pub seq_gap: u64,
    /// A run must cover this many pages before it counts as sequential.
    pub seq_min_run: u64,
    /// Files tracked at once.
    pub max_files: usize,
    /// Pages the kernel maps around a fault without faulting (`fault_around_bytes`, 64 KiB
    /// by default). A cluster's last fault stands for the rest of its fault-around chunk, as
    /// far as a window we issued made those pages ready: without that, a 128 KiB block read
    /// through a 32-page window faults at pages 0, 1, 2 and 16 only, its span looked like 17
    /// pages, and the next window covered half the next block (fio mmap 128k: 2.3 misses
    /// and 2.3 prefetches per block, 40% of the prefetched bytes wasted).
    pub fault_around: u64,
}

impl Config {
    /// Defaults for a page size: 1 MiB range, 16 KiB minimum, 8 MiB maximum window. (A 64 KiB
    /// minimum made fio's 16 KiB random reads 11-17% slower than without assist: every
    /// window read three blocks nobody asked for.)
    pub fn for_page_size(page: u64) -> Config {
        Config {
            sequential: true,
            stride: true,
            range: true,
            range_pages: (1 << 20) / page,
            min_window: ((16 << 10) / page).max(1),
            max_window: (8 << 20) / page,
            forward: true,
            seq_gap: 32,
            seq_min_run: 64,
            max_files: 4096,
            fault_around: ((64 << 10) / page).max(1),
        }
    }
}

/// One access to a page of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Identifies the access stream: use [`stream`] to give every process its own state per
    /// file (two processes reading one file at random would otherwise break each other's
    /// clusters — Lustre keeps this state per open file).
    pub file: u64,
    /// The page accessed.
    pub page: u64,
    /// The page was already cached.
    pub hit: bool,
    /// When, ns (any monotonic origin).
    pub t_ns: u64,
}

/// The stream key of `pid` reading file number `file`.
pub fn stream(file: u64, pid: u32) -> u64 {
    (file << 24) ^ pid as u64
}

/// Pages `[start, start + pages)` of `file` to prefetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The access stream it is for ([`Access::file`]).
    pub file: u64,
    /// First page.
    pub start: u64,
    /// Pages.
    pub pages: u64,
    /// Which detector proposed it.
    pub detector: Detector,
}

/// The predictor: one per watched process tree (or simulation).
#[derive(Debug, Clone)]
pub struct Predictor {
    cfg: Config,
    files: HashMap<u64, FileState>,
    tick: u64,
}

impl Predictor {
    /// A predictor with no history.
    pub fn new(cfg: Config) -> Predictor {
        Predictor {
            cfg,
            files: HashMap::new(),
            tick: 0,
        }
    }

    /// Its settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Files currently tracked.
    pub fn tracked_files(&self) -> usize {
        self.files.len()
    }

    /// Feeds one access; returns the windows to prefetch (empty on a hit).
    pub fn access(&mut self, a: Access) -> Vec<Window> {
        self.tick += 1;
        if !self.files.contains_key(&a.file) && self.files.len() >= self.cfg.max_files {
            // Bounded state: forget the least recently used file.
            if let Some((&old, _)) = self.files.iter().min_by_key(|(_, s)| s.last_use) {
                self.files.remove(&old);
            }
        }
        let cfg = &self.cfg;
        let st = self.files.entry(a.file).or_default();
        st.last_use = self.tick;
        st.track(a.page, a.hit, cfg);
        let mut out = Vec::new();
        st.predict(&a, cfg, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config::for_page_size(4096)
    }

    /// Feeds page accesses of one file; a page is a hit when an earlier window covered it or it
    /// was accessed before. Returns (hits, misses, windows).
    /// An access of stream `file` to `page` at `t_ns`.
    fn acc(file: u64, page: u64, hit: bool, t_ns: u64) -> Access {
        Access {
            file,
            page,
            hit,
            t_ns,
        }
    }

    fn drive(p: &mut Predictor, pages: &[u64]) -> (u64, u64, Vec<Window>) {
        let mut cached = std::collections::HashSet::new();
        let (mut hits, mut misses, mut all) = (0, 0, Vec::new());
        for (i, &pg) in pages.iter().enumerate() {
            let hit = cached.contains(&pg);
            if hit {
                hits += 1;
            } else {
                misses += 1;
                cached.insert(pg);
            }
            for w in p.access(acc(1, pg, hit, i as u64)) {
                cached.extend(w.start..w.start + w.pages);
                all.push(w);
            }
        }
        (hits, misses, all)
    }

    /// 32-page chunks (128 KiB) at scattered offsets, each read upwards one page at a time.
    fn chunks(n: u64) -> Vec<u64> {
        bases(12345, n, 32)
            .into_iter()
            .flat_map(|b| b..b + 32)
            .collect()
    }

    /// `n` scattered first pages of `len`-page chunks (aligned to `len`), from `seed`.
    fn bases(seed: u64, n: u64, len: u64) -> Vec<u64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 33) % 2_000_000 / len * len
            })
            .collect()
    }

    #[test]
    fn range_detector_prefetches_the_last_clusters_span_at_each_new_chunk() {
        let mut p = Predictor::new(cfg());
        let (hits, misses, ws) = drive(&mut p, &chunks(100));
        // First chunk: 32 misses (nothing learnt yet). Then one miss per chunk.
        assert_eq!(misses, 32 + 99, "hits {hits}");
        assert!(ws
            .iter()
            .all(|w| w.detector == Detector::Range && w.pages == 32));
        // Forward: every window starts at the chunk's first page, so none is wasted.
        let v = chunks(100);
        for (k, w) in ws.iter().enumerate() {
            assert_eq!(w.start, v[(k + 1) * 32]);
        }
    }

    /// One access of [`drive_faults`]: the windows it brings are cached, ready `delay` faults
    /// later.
    fn feed(
        p: &mut Predictor,
        ready_at: &mut std::collections::HashMap<u64, u64>,
        (page, hit, faults, delay): (u64, bool, u64, u64),
        all: &mut Vec<Window>,
    ) {
        let ws = p.access(acc(1, page, hit, faults));
        for w in &ws {
            for r in w.start..w.start + w.pages {
                ready_at.entry(r).or_insert(faults + delay);
            }
        }
        all.extend(ws);
    }

    /// Reads `blocks` of `len` pages at scattered offsets through a mapping, as the kernel
    /// shows it: a touch of a page not mapped yet is a fault; fault-around first maps the
    /// pages of its 16-page chunk that are cached and read, and when that covers the page the
    /// fault is served without the fault tracepoint (the assistant sees the chunk, cut to its
    /// windows, as accesses at both ends); else the fault is seen, a miss when the page is not
    /// cached. A window's read completes `delay` faults after it was issued. Returns (misses,
    /// windows).
    fn drive_faults(p: &mut Predictor, blocks: u64, len: u64, delay: u64) -> (u64, Vec<Window>) {
        let fa = p.config().fault_around;
        let mut ready_at: std::collections::HashMap<u64, u64> = Default::default();
        let mut mapped = std::collections::HashSet::new();
        let (mut faults, mut misses, mut all): (u64, u64, Vec<Window>) = (0, 0, Vec::new());
        for base in bases(4242, blocks, len) {
            for q in base..base + len {
                if mapped.contains(&q) {
                    continue;
                }
                faults += 1;
                let chunk = q / fa * fa..(q / fa + 1) * fa;
                let ready: Vec<u64> = chunk
                    .filter(|r| ready_at.get(r).is_some_and(|&t| t <= faults))
                    .collect();
                if ready.contains(&q) {
                    let windows: Vec<(u64, u64)> =
                        all.iter().map(|w| (w.start, w.start + w.pages)).collect();
                    let inside: Vec<u64> = ready
                        .iter()
                        .copied()
                        .filter(|r| windows.iter().any(|&(s, e)| s <= *r && *r < e))
                        .collect();
                    mapped.extend(ready.iter().copied());
                    if let (Some(&lo), Some(&hi)) = (inside.first(), inside.last()) {
                        feed(p, &mut ready_at, (lo, true, faults, delay), &mut all);
                        feed(p, &mut ready_at, (hi, true, faults, delay), &mut all);
                    }
                    continue;
                }
                let hit = ready_at.contains_key(&q);
                if !hit {
                    misses += 1;
                    ready_at.insert(q, faults);
                }
                feed(p, &mut ready_at, (q, hit, faults, delay), &mut all);
                mapped.insert(q);
                mapped.extend(ready);
            }
        }
        (misses, all)
    }

    #[test]
    fn blocks_read_through_a_mapping_get_whole_windows_despite_fault_around() {
        // 128 KiB blocks, reads completing two faults after their window: a block faults at
        // pages 0 (the miss), 1 and 2, and fault-around serves page 16 without a fault event;
        // its span is still 32 pages, so after the first blocks every window is a block.
        let mut p = Predictor::new(cfg());
        let (misses, ws) = drive_faults(&mut p, 200, 32, 2);
        assert!(misses <= 32 + 2 + 199, "one miss per block: {misses}");
        assert!(ws[2..].iter().all(|w| w.pages == 32), "{:?}", &ws[..6]);
        // 16 KiB blocks: the fault-around chunk does not stretch the window past the block.
        let mut p = Predictor::new(cfg());
        let (misses, ws) = drive_faults(&mut p, 200, 4, 2);
        assert!(ws.iter().all(|w| w.pages == 4), "{:?}", &ws[..3]);
        assert!(misses <= 4 + 199, "{misses}");
        // Reads complete before the next page is touched: a block shows its miss, then
        // fault-around only; windows stay whole blocks.
        let mut p = Predictor::new(cfg());
        let (misses, ws) = drive_faults(&mut p, 200, 32, 0);
        assert!(misses <= 32 + 2 + 199, "one miss per block: {misses}");
        assert!(ws[2..].iter().all(|w| w.pages == 32), "{:?}", &ws[..6]);
    }

    #[test]
    fn chunks_read_from_both_ends_get_one_window_each() {
        // glibc's memcpy of 1 MiB: the first page, then the last, then downwards.
        let mut v = Vec::new();
        for base in bases(99, 100, 256) {
            v.push(base);
            v.extend((base + 1..base + 256).rev());
        }
        let mut p = Predictor::new(cfg());
        let (_, misses, ws) = drive(&mut p, &v);
        assert!(misses <= 256 + 99 + 3, "one miss per chunk: {misses}");
        // Each window is one whole chunk (a chunk that lands within the cluster radius of the
        // one before joins its cluster, and its window may start elsewhere).
        let starts: std::collections::HashSet<u64> = v.chunks(256).map(|c| c[0]).collect();
        let exact = ws
            .iter()
            .filter(|w| w.pages == 256 && starts.contains(&w.start))
            .count();
        assert!(exact >= 95 && ws.len() <= 101, "{exact} of {}", ws.len());
    }

    #[test]
    fn cached_chunks_do_not_shrink_windows_and_misses_inside_a_cluster_follow_its_direction() {
        let mut p = Predictor::new(cfg());
        let a = |page, hit| acc(3, page, hit, 0);
        // Two 32-page chunks read upwards, each starting with a miss.
        for base in [0u64, 130_000] {
            p.access(a(base, false));
            for q in base + 1..base + 32 {
                p.access(a(q, true));
            }
        }
        // Four chunks that were cached already: one fault each, all hits.
        for base in [230_000u64, 410_000, 520_000, 777_000] {
            assert!(p.access(a(base, true)).is_empty());
        }
        let w = p.access(a(900_000, false));
        assert_eq!((w[0].start, w[0].pages), (900_000, 32), "{w:?}");
        // A chunk read downwards past its window: the next window goes down too.
        let w = p.access(a(1_100_000, false));
        assert_eq!(w[0].start, 1_100_000);
        let w = p.access(a(1_099_999, false));
        assert_eq!((w[0].start, w[0].pages), (1_099_999 - 31, 32), "{w:?}");
    }

    #[test]
    fn small_random_blocks_get_windows_of_their_size() {
        // 4-page chunks at scattered offsets (fio bs=16k): windows of 4 pages (not the 64 KiB
        // that read three blocks nobody asked for), one miss per block.
        let v: Vec<u64> = bases(777, 200, 4)
            .into_iter()
            .flat_map(|b| b..b + 4)
            .collect();
        let mut p = Predictor::new(cfg());
        let (_, misses, ws) = drive(&mut p, &v);
        assert!(ws.iter().all(|w| w.pages == 4), "{:?}", &ws[..3]);
        assert!(misses <= 4 + 199, "one miss per block: {misses}");
    }

    #[test]
    fn centred_range_windows_are_lustres_and_waste_half() {
        let mut c = cfg();
        c.forward = false;
        let mut p = Predictor::new(c);
        let (_, misses, ws) = drive(&mut p, &chunks(100));
        let v = chunks(100);
        assert_eq!(ws[0].start, v[32] - 16);
        assert_eq!(ws[0].pages, 32);
        // Each chunk: the first miss prefetches its lower half; the middle page misses again
        // and that window covers the rest.
        assert!(misses > 32 + 99 && misses < 32 + 3 * 99, "{misses}");
    }

    #[test]
    fn without_range_detector_random_chunks_get_nothing() {
        let mut c = cfg();
        c.range = false;
        let mut p = Predictor::new(c);
        let (hits, misses, ws) = drive(&mut p, &chunks(50));
        assert_eq!((hits, misses), (0, 50 * 32));
        assert!(ws.is_empty(), "{ws:?}");
    }

    #[test]
    fn sequential_stream_gets_growing_windows_ahead() {
        let mut p = Predictor::new(cfg());
        // Faults every 16 pages (fault-around maps the rest), 40 MiB.
        let pages: Vec<u64> = (0..640).map(|i| i * 16).collect();
        let (hits, misses, ws) = drive(&mut p, &pages);
        assert!(ws.iter().all(|w| w.detector == Detector::Sequential));
        assert!(ws.windows(2).all(|w| w[1].start >= w[0].start + w[0].pages));
        assert_eq!(ws.iter().map(|w| w.pages).max(), Some(2048));
        assert!(hits > 600, "hits {hits} misses {misses}");
    }

    #[test]
    fn stride_detector_prefetches_the_next_cluster() {
        let mut p = Predictor::new(cfg());
        // 8 pages every 4 MiB (1024 pages).
        let pages: Vec<u64> = (0..40u64).flat_map(|i| i * 1024..i * 1024 + 8).collect();
        let (hits, misses, ws) = drive(&mut p, &pages);
        assert!(ws.iter().any(|w| w.detector == Detector::Stride));
        // After the detector locks on, whole clusters are prefetched before they are read.
        assert!(misses < 3 * 8 + 10, "misses {misses} hits {hits}");
    }

    #[test]
    fn hits_never_prefetch_and_repeats_are_not_reissued() {
        let mut p = Predictor::new(cfg());
        let a = |page, hit| acc(9, page, hit, 0);
        p.access(a(0, false));
        p.access(a(1, false));
        p.access(a(100_000, false)); // closes a 2-page cluster
        assert!(p.access(a(250_000, true)).is_empty());
        let w = p.access(a(300_000, false));
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].pages, 4); // the 2-page cluster's span, at least min_window (16 KiB)
                                   // A second miss inside a window issued just now issues nothing new.
        assert!(p.access(a(300_001, false)).is_empty());
    }

    #[test]
    fn state_is_bounded() {
        let mut c = cfg();
        c.max_files = 10;
        let mut p = Predictor::new(c);
        for f in 0..1000 {
            p.access(acc(f, 1, false, f));
        }
        assert_eq!(p.tracked_files(), 10);
    }
}
