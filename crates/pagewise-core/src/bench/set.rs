//! A command's read set as `bench` keeps it: traces merged file by file, the pages they name as
//! merged page ranges (to tell whether another recording found anything new), and the files
//! the user asked to leave out (`--keep`).

use crate::trace::{Trace, TraceFile};
use std::collections::HashMap;
use std::path::Path;

/// A file's identity in a trace: its device and inode, as the tracepoints give them.
type Key = (u32, u32, u64);

fn key(f: &TraceFile) -> Key {
    (f.dev_major, f.dev_minor, f.ino)
}

/// The pages a trace names, per file: sorted, merged `[first, end)` page ranges.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct PageSet {
    files: HashMap<Key, Vec<(u64, u64)>>,
}

impl PageSet {
    /// The pages of `trace`.
    pub fn of(trace: &Trace) -> PageSet {
        let mut raw: HashMap<Key, Vec<(u64, u64)>> = HashMap::new();
        for e in &trace.events {
            let Some(f) = trace.files.get(e.file as usize) else {
                continue;
            };
            let end = e.index.saturating_add(u64::from(e.pages.max(1)));
            raw.entry(key(f)).or_default().push((e.index, end));
        }
        for ranges in raw.values_mut() {
            *ranges = merged(std::mem::take(ranges));
        }
        PageSet { files: raw }
    }

    /// Pages in the set.
    pub fn pages(&self) -> u64 {
        self.files
            .values()
            .flat_map(|r| r.iter().map(|(a, b)| b - a))
            .sum()
    }

    /// Pages of `self` that `other` does not have.
    pub fn pages_not_in(&self, other: &PageSet) -> u64 {
        let mut n = 0;
        for (k, mine) in &self.files {
            let theirs = other.files.get(k).map(Vec::as_slice).unwrap_or(&[]);
            n += mine.iter().map(|&r| uncovered(r, theirs)).sum::<u64>();
        }
        n
    }
}

impl PageSet {
    /// The byte spans `spans` (sorted `(offset, length)`) of the file `key`, less the pages of
    /// this set (`page` bytes each).
    pub fn subtract(&self, key: Key, spans: &[(u64, u64)], page: u64) -> Vec<(u64, u64)> {
        let Some(pages) = self.files.get(&key) else {
            return spans.to_vec();
        };
        let mut out = Vec::new();
        for &(off, len) in spans {
            let mut at = off;
            let end = off + len;
            let first = pages.partition_point(|r| r.1.saturating_mul(page) <= at);
            for &(a, b) in &pages[first..] {
                let (a, b) = (a.saturating_mul(page), b.saturating_mul(page));
                if a >= end {
                    break;
                }
                if a > at {
                    out.push((at, a - at));
                }
                at = at.max(b);
            }
            if at < end {
                out.push((at, end - at));
            }
        }
        out
    }
}

/// `ranges` sorted and merged where they touch or overlap.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Pages of `(a, b)` that none of `sorted` (merged, sorted) covers.
fn uncovered((a, b): (u64, u64), sorted: &[(u64, u64)]) -> u64 {
    let start = sorted.partition_point(|r| r.1 <= a);
    let mut covered = 0;
    for &(c, d) in &sorted[start..] {
        if c >= b {
            break;
        }
        covered += d.min(b) - c.max(a);
    }
    (b - a) - covered
}

/// Adds `other`'s files and events to `into` (files matched by device and inode; a file new
/// to `into` is appended with its path). Times stay each recording's own.
pub(crate) fn merge(into: &mut Trace, other: &Trace) {
    let mut index: HashMap<Key, u32> = into
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| (key(f), i as u32))
        .collect();
    let map: Vec<u32> = other
        .files
        .iter()
        .map(|f| {
            *index.entry(key(f)).or_insert_with(|| {
                into.files.push(f.clone());
                (into.files.len() - 1) as u32
            })
        })
        .collect();
    for e in &other.events {
        if let Some(&f) = map.get(e.file as usize) {
            let mut e = *e;
            e.file = f;
            into.events.push(e);
        }
    }
    into.lost_events = into.lost_events.saturating_add(other.lost_events);
}

/// `trace` without the files under any of `keep` (a file named by a path, or everything under
/// a directory), and the bytes of the pages left out.
pub(crate) fn without(trace: &Trace, keep: &[impl AsRef<Path>]) -> (Trace, u64) {
    use std::os::unix::ffi::OsStrExt;
    without_where(trace, |_, f| {
        f.path_bytes.as_deref().is_some_and(|p| {
            let p = Path::new(std::ffi::OsStr::from_bytes(p));
            keep.iter().any(|k| p.starts_with(k.as_ref()))
        })
    })
}

/// `trace` without the files `out(index, file)` picks, and the bytes of their pages.
pub(crate) fn without_where(
    trace: &Trace,
    out: impl Fn(usize, &TraceFile) -> bool,
) -> (Trace, u64) {
    let mut kept = Trace {
        files: Vec::new(),
        events: Vec::new(),
        ..trace.clone()
    };
    let mut map = Vec::with_capacity(trace.files.len());
    for (i, f) in trace.files.iter().enumerate() {
        if out(i, f) {
            map.push(None);
        } else {
            kept.files.push(f.clone());
            map.push(Some((kept.files.len() - 1) as u32));
        }
    }
    let page = u64::from(trace.page_size.max(1));
    let mut left_out = 0u64;
    for e in &trace.events {
        match map.get(e.file as usize).copied().flatten() {
            Some(f) => {
                let mut e = *e;
                e.file = f;
                kept.events.push(e);
            }
            None => left_out += u64::from(e.pages.max(1)) * page,
        }
    }
    (kept, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Event;

    fn file(ino: u64, path: &str) -> TraceFile {
        TraceFile {
            dev_major: 8,
            dev_minor: 1,
            ino,
            size: 1 << 20,
            path: Some(path.into()),
            path_bytes: Some(path.as_bytes().to_vec()),
            deleted: false,
            handle: None,
        }
    }

    fn ev(file: u32, index: u64, pages: u32) -> Event {
        Event {
            ts_ns: 0,
            file,
            pid: 1,
            index,
            pages,
        }
    }

    fn trace(files: Vec<TraceFile>, events: Vec<Event>) -> Trace {
        Trace {
            files,
            events,
            ..Trace::default()
        }
    }

    #[test]
    fn page_sets_merge_and_count_what_is_new() {
        let a = trace(
            vec![file(1, "/a")],
            vec![ev(0, 0, 4), ev(0, 2, 4), ev(0, 10, 1)],
        );
        let b = trace(
            vec![file(2, "/b"), file(1, "/a")],
            vec![ev(1, 5, 1), ev(1, 9, 4), ev(0, 0, 2)],
        );
        let (sa, sb) = (PageSet::of(&a), PageSet::of(&b));
        assert_eq!(sa.pages(), 7); // 0..6 and 10
        assert_eq!(sb.pages(), 7); // /a 5, 9..13; /b 0..2
        assert_eq!(sb.pages_not_in(&sa), 3 + 2); // /a 9, 11, 12 (5 and 10 are in a); /b 0..2
        assert_eq!(sa.pages_not_in(&sb), 5); // /a 0..5 (5 and 10 are in b)
        let mut u = a.clone();
        merge(&mut u, &b);
        assert_eq!(u.files.len(), 2, "/a matched by device and inode");
        let su = PageSet::of(&u);
        assert_eq!(su.pages_not_in(&sa) + sa.pages(), su.pages());
        assert_eq!(sb.pages_not_in(&su), 0);
        assert_eq!(sa.pages_not_in(&su), 0);
    }

    #[test]
    fn subtracting_pages_from_byte_spans() {
        let t = trace(vec![file(1, "/a")], vec![ev(0, 2, 2), ev(0, 8, 1)]);
        let s = PageSet::of(&t);
        let k = (8, 1, 1);
        // Cached 0..40 KiB: pages 2, 3 and 8 were added, so 0..8K, 16K..32K, 36K..40K stay.
        assert_eq!(
            s.subtract(k, &[(0, 40960)], 4096),
            [(0, 8192), (16384, 16384), (36864, 4096)]
        );
        assert_eq!(s.subtract(k, &[(8192, 8192)], 4096), []);
        assert_eq!(s.subtract((8, 1, 9), &[(0, 5)], 4096), [(0, 5)]);
    }

    #[test]
    fn keep_leaves_out_files_under_a_path_and_counts_their_bytes() {
        let t = trace(
            vec![
                file(1, "/data/out/x"),
                file(2, "/data/in"),
                file(3, "/data/outside"),
            ],
            vec![ev(0, 0, 2), ev(1, 0, 1), ev(2, 0, 1), ev(0, 8, 1)],
        );
        let (kept, left) = without(&t, &["/data/out"]);
        assert_eq!(left, 3 * 4096);
        let names: Vec<_> = kept.files.iter().map(|f| f.path.clone().unwrap()).collect();
        assert_eq!(
            names,
            ["/data/in", "/data/outside"],
            "a path prefix, not a string one"
        );
        assert_eq!(kept.events.len(), 2);
        assert!(kept.check().is_ok());
        let (same, none) = without(&t, &[] as &[&str]);
        assert_eq!((same.events.len(), none), (4, 0));
    }
}
