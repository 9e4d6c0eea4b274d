//! One measurement of a range before or after its drop, and what it tells: the pages the
//! drop removed, and the parts of the range that may still hold pages.

use crate::residency::PageRange;

/// One measurement of a range: cached pages, and cached pages dirty or under writeback
/// (None: unknown, mmap+mincore cannot tell); with mincore, which pages (one bool each).
#[derive(Debug, Clone)]
pub(super) struct Measured {
    pub(super) cached: u64,
    pub(super) dirty: Option<u64>,
    pub(super) pages: Option<Vec<bool>>,
}

impl Measured {
    /// Pages cached in `self` (before a drop) and no longer in `after`.
    pub(super) fn dropped(&self, after: &Measured) -> u64 {
        match (&self.pages, &after.pages) {
            (Some(b), Some(a)) => b.iter().zip(a).filter(|(b, a)| **b && !**a).count() as u64,
            _ => self.cached.saturating_sub(after.cached),
        }
    }

    /// The parts of the page range `range` that may still hold pages after
    /// a drop, and how many pages they count. cachestat sees every page in the cache, read
    /// I/O in flight included: the pages still cached `after`. mincore sees a page only once
    /// it is up to date, and the events report pages as they are inserted, before their read
    /// completes: so a page unseen before the drop may be one still being read (DONTNEED
    /// leaves it); it stays pending with those seen after, and is tried again.
    pub(super) fn stayed(&self, after: &Measured, range: PageRange) -> (Vec<PageRange>, u64) {
        let (Some(b), Some(a)) = (&self.pages, &after.pages) else {
            return if after.cached > 0 {
                (vec![range], after.cached)
            } else {
                (Vec::new(), 0)
            };
        };
        let mut parts: Vec<PageRange> = Vec::new();
        let mut pages = 0;
        for (j, (b, a)) in b.iter().zip(a).enumerate() {
            if *b && !*a {
                continue;
            }
            pages += 1;
            let p = range.first + j as u64;
            match parts.last_mut() {
                Some(last) if last.end() == p => last.count += 1,
                _ => parts.push(PageRange::new(p, 1)),
            }
        }
        (parts, pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(pages: &[u8]) -> Measured {
        let pages: Vec<bool> = pages.iter().map(|&p| p == 1).collect();
        Measured {
            cached: pages.iter().filter(|p| **p).count() as u64,
            dirty: None,
            pages: Some(pages),
        }
    }

    fn counted(cached: u64) -> Measured {
        Measured {
            cached,
            dirty: Some(0),
            pages: None,
        }
    }

    #[test]
    fn page_by_page_the_drop_counts_only_pages_seen_before_and_gone_after() {
        let before = seen(&[1, 1, 0, 1, 1, 0]);
        let after = seen(&[0, 1, 0, 0, 1, 1]);
        assert_eq!(before.dropped(&after), 2);
        // Stayed: pages still cached, and pages unseen before (possibly still being read),
        // as runs of the range starting at page 10.
        let (parts, pages) = before.stayed(&after, PageRange::new(10, 6));
        assert_eq!(parts, vec![PageRange::new(11, 2), PageRange::new(14, 2)]);
        assert_eq!(pages, 4);
    }

    #[test]
    fn with_counts_only_the_whole_range_stays_while_anything_is_cached() {
        assert_eq!(counted(10).dropped(&counted(3)), 7);
        assert_eq!(counted(3).dropped(&counted(10)), 0);
        let r = PageRange::new(5, 8);
        assert_eq!(counted(10).stayed(&counted(3), r), (vec![r], 3));
        assert_eq!(counted(10).stayed(&counted(0), r), (Vec::new(), 0));
    }
}
