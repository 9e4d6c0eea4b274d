//! The state the predictor keeps per file — the current cluster of accesses, the spans and
//! shapes of the last ones, the sequential run, the windows issued recently — and the three
//! detectors that read it on a miss (sequential, stride, range; see the parent module).

use super::{Access, Config, Detector, Window};

#[derive(Debug, Clone, Default)]
pub(super) struct FileState {
    pub(super) last_use: u64,
    /// Previous access.
    last: Option<u64>,
    /// Current cluster: lowest, highest and first page, the access before the last one
    /// (None when the last one opened the cluster), and its misses.
    cl_lo: u64,
    cl_hi: u64,
    cl_first: u64,
    cl_prev: Option<u64>,
    cl_misses: u32,
    /// The last closed cluster's span.
    last_span: u64,
    /// Spans of the last four closed clusters (the window is the largest: a cluster whose
    /// later pages were prefetched in time shows fewer faults, hence a shorter span, and
    /// windows sized on it alone would shrink and grow in turn).
    spans: [u64; 4],
    /// Shapes of the same clusters: pages below and above their first access.
    shapes: [(u64, u64); 4],
    /// First pages of the last three clusters (for stride).
    starts: [Option<u64>; 3],
    /// Sequential run: first page, and where the last sequential window ended.
    run_start: u64,
    seq_until: u64,
    seq_window: u64,
    /// Windows issued recently (start, end), a small ring.
    recent: [(u64, u64); 8],
    recent_pos: usize,
}

impl FileState {
    /// The last page the current cluster used: its highest fault, or as far as fault-around
    /// mapped past it without a fault (to the end of that fault's fault-around chunk, but not
    /// past the end of the window we issued that made those pages ready).
    fn extent_hi(&self, cfg: &Config) -> u64 {
        let hi = self.cl_hi;
        let fa = cfg.fault_around.max(1);
        let chunk_end = (hi / fa + 1) * fa;
        self.recent
            .iter()
            .filter(|&&(s, e)| s <= hi && hi < e)
            .map(|&(_, e)| chunk_end.min(e) - 1)
            .max()
            .unwrap_or(hi)
            .max(hi)
    }

    fn covered(&self, start: u64, end: u64) -> bool {
        self.recent.iter().any(|&(s, e)| s <= start && end <= e)
    }

    /// Trims the part of `[start, end)` that a recent window already covers at its front.
    fn trim(&self, mut start: u64, end: u64) -> u64 {
        let mut moved = true;
        while moved && start < end {
            moved = false;
            for &(s, e) in &self.recent {
                if s <= start && start < e {
                    start = e;
                    moved = true;
                }
            }
        }
        start
    }

    fn remember(&mut self, start: u64, end: u64) {
        self.recent[self.recent_pos] = (start, end);
        self.recent_pos = (self.recent_pos + 1) % self.recent.len();
    }
}

impl FileState {
    /// Cluster tracking sees every access, hits included. A cluster without a miss (a chunk
    /// that was cached and mapped already shows one or two faults), or of one fault only,
    /// leaves the spans and shapes as they were: it says nothing of the chunk size. The
    /// kernel serves a fault on a page that is cached and read by fault-around, without the
    /// fault tracepoint, so a chunk whose window was read in time shows its first miss and
    /// nothing else (measured: most of fio's 128 KiB blocks); sized on those, windows shrank
    /// to one page's worth and grew back in turn.
    pub(super) fn track(&mut self, p: u64, hit: bool, cfg: &Config) {
        match self.last {
            Some(prev) if p.abs_diff(prev) <= cfg.range_pages => {
                self.cl_prev = Some(prev);
                self.cl_misses += u32::from(!hit);
                self.cl_lo = self.cl_lo.min(p);
                self.cl_hi = self.cl_hi.max(p);
                if p < prev || p - prev > cfg.seq_gap {
                    self.run_start = p;
                    self.seq_window = 0;
                }
            }
            prev => {
                if prev.is_some() && self.cl_misses > 0 && self.cl_prev.is_some() {
                    let hi = self.extent_hi(cfg);
                    self.last_span = hi - self.cl_lo + 1;
                    self.spans = [self.spans[1], self.spans[2], self.spans[3], self.last_span];
                    let shape = (self.cl_first - self.cl_lo, hi - self.cl_first);
                    self.shapes = [self.shapes[1], self.shapes[2], self.shapes[3], shape];
                }
                if prev.is_some() {
                    self.starts = [self.starts[1], self.starts[2], Some(self.cl_first)];
                }
                self.cl_prev = None;
                self.cl_misses = u32::from(!hit);
                self.cl_lo = p;
                self.cl_hi = p;
                self.cl_first = p;
                self.run_start = p;
                self.seq_window = 0;
            }
        }
        self.last = Some(p);
    }

    /// The windows for access `a` (after [`FileState::track`]), into `out`.
    pub(super) fn predict(&mut self, a: &Access, cfg: &Config, out: &mut Vec<Window>) {
        let p = a.page;
        let run = p - self.run_start.min(p);
        if cfg.sequential && run >= cfg.seq_min_run && run >= 2 * self.last_span {
            self.sequential(a, cfg, out);
            return;
        }
        let recent = self.spans.iter().copied().max().unwrap_or(0);
        let span = recent.max(cfg.min_window).min(cfg.max_window);
        if cfg.stride && self.stride(a, span, out) {
            return;
        }
        // A hit, or a miss on a page a window already covers (still in flight): nothing to do.
        if a.hit || self.recent.iter().any(|&(s, e)| s <= p && p < e) {
            return;
        }
        // Range.
        if cfg.range && self.last_span > 0 {
            let (start, pages) = if cfg.forward {
                match self.cl_prev {
                    // A miss further into a cluster: the window goes the way it is read.
                    Some(prev) if p < prev => {
                        let below = (span - 1).min(p);
                        (p - below, below + 1)
                    }
                    Some(_) => (p, span),
                    None => self.shaped(p, span, cfg),
                }
            } else {
                (p.saturating_sub(span / 2), span)
            };
            self.push(out, a.file, start, pages, Detector::Range);
        }
    }

    /// The range window for a miss on page `p` placed as the last clusters lay around their
    /// first access: as many pages below `p` as the most any of them had below theirs, as many
    /// above as the most above (`span` pages at least, `max_window` at most). A chunk read
    /// upwards gives the window `[p, p + span)`; one read from both ends (glibc's memcpy of
    /// 1 MiB touches the first page, then the last, then goes down) gives the same, where a
    /// window centred on the first page read half a chunk nobody asked for, and the miss at
    /// the other end read another (fio mmap 1m: 3.5 windows of 1 MiB per block).
    fn shaped(&self, p: u64, span: u64, cfg: &Config) -> (u64, u64) {
        let below = self.shapes.iter().map(|s| s.0).max().unwrap_or(0);
        let above = self.shapes.iter().map(|s| s.1).max().unwrap_or(0);
        let below = below.min(p).min(cfg.max_window.saturating_sub(1));
        let pages = (below + above + 1).max(span).min(cfg.max_window);
        (p - below, pages)
    }

    /// Sequential: started by a miss, then kept ahead like the kernel's async readahead: the
    /// next window goes out once half of the last one has been consumed, hit or not.
    fn sequential(&mut self, a: &Access, cfg: &Config, out: &mut Vec<Window>) {
        let p = a.page;
        let due = if self.seq_window == 0 {
            !a.hit
        } else {
            p + self.seq_window / 2 >= self.seq_until
        };
        if !due {
            return;
        }
        let start = if self.seq_window == 0 {
            p
        } else {
            self.seq_until.max(p)
        };
        self.seq_window = if self.seq_window == 0 {
            (cfg.min_window * 4).max(64).min(cfg.max_window)
        } else {
            (self.seq_window * 2).min(cfg.max_window)
        };
        let w = self.seq_window;
        self.seq_until = start + w;
        self.push(out, a.file, start, w, Detector::Sequential);
    }

    /// Stride: this access starts a cluster, and cluster starts are evenly spaced. Once locked
    /// on, the next cluster is prefetched at each new one, hit or miss. True when locked on.
    fn stride(&mut self, a: &Access, span: u64, out: &mut Vec<Window>) -> bool {
        let p = a.page;
        let new_cluster = self.cl_first == p && self.cl_lo == p && self.cl_hi == p;
        if !new_cluster || self.last_span == 0 {
            return false;
        }
        let [Some(a0), Some(a1), Some(a2)] = self.starts else {
            return false;
        };
        let d1 = a1 as i128 - a0 as i128;
        let d2 = a2 as i128 - a1 as i128;
        let d3 = p as i128 - a2 as i128;
        let next = p as i128 + d3;
        if !(d1 == d2 && d2 == d3 && d1 != 0 && next >= 0) {
            return false;
        }
        if !a.hit {
            self.push(out, a.file, p, span, Detector::Stride);
        }
        self.push(out, a.file, next as u64, span, Detector::Stride);
        true
    }

    /// Adds the window `[start, start + pages)` to `out`, unless a recent window covers it
    /// (what one covers at its front is trimmed off).
    fn push(&mut self, out: &mut Vec<Window>, file: u64, start: u64, pages: u64, d: Detector) {
        let end = start.saturating_add(pages);
        if self.covered(start, end) {
            return;
        }
        let s = self.trim(start, end);
        if s < end {
            self.remember(s, end);
            out.push(Window {
                file,
                start: s,
                pages: end - s,
                detector: d,
            });
        }
    }
}
