//! One interval's counts, by key, in bounded maps: at most `max_keys` distinct keys per view,
//! the rest counted under "other". Updated by the reader thread for every event, so the
//! maps hash with a multiply-and-rotate of the integer keys (std's SipHash costs ~20 ns a
//! lookup; four lookups an event at 100k events/s would be most of the CPU budget).

use super::events::Kind;
use crate::sys::FileId;
use serde::Serialize;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A hasher for integer keys (FxHash's round): keys here are process ids, inodes and small
/// indexes, never chosen by an attacker to collide in a table that is bounded anyway.
#[derive(Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64)
    }
}

/// A map hashed by [`IntHasher`].
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// Bytes added, dirtied and evicted, and which of them are lower bounds (events whose folio
/// size was not known, counted as one page).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Counts {
    /// Bytes added to the page cache (mm_filemap_add_to_page_cache).
    pub added_bytes: u64,
    /// Bytes made dirty (writeback_dirty_folio / writeback_dirty_page).
    pub dirtied_bytes: u64,
    /// Bytes removed from the page cache (mm_filemap_delete_from_page_cache).
    pub evicted_bytes: u64,
    /// Events counted.
    pub events: u64,
    /// `added_bytes` is a lower bound: the kernel's add record has no folio order (each
    /// folio counted as one page).
    pub added_lower_bound: bool,
    /// `dirtied_bytes` is a lower bound: some folios made dirty were not seen added, and the
    /// dirtying tracepoint does not carry a folio's size (each counted as one page).
    pub dirtied_lower_bound: bool,
    /// `evicted_bytes` is a lower bound: the kernel's delete record has no folio order and
    /// some folios removed were not seen added (each counted as one page).
    pub evicted_lower_bound: bool,
}

impl Counts {
    /// Adds `bytes` of `kind` (`exact`: the folio's size was known).
    #[inline]
    pub fn add(&mut self, kind: Kind, bytes: u64, exact: bool) {
        self.events += 1;
        match kind {
            Kind::Added => {
                self.added_bytes += bytes;
                self.added_lower_bound |= !exact;
            }
            Kind::Dirtied => {
                self.dirtied_bytes += bytes;
                self.dirtied_lower_bound |= !exact;
            }
            Kind::Evicted => {
                self.evicted_bytes += bytes;
                self.evicted_lower_bound |= !exact;
            }
        }
    }

    /// Adds another tally.
    pub fn merge(&mut self, o: &Counts) {
        self.added_bytes += o.added_bytes;
        self.dirtied_bytes += o.dirtied_bytes;
        self.evicted_bytes += o.evicted_bytes;
        self.events += o.events;
        self.added_lower_bound |= o.added_lower_bound;
        self.dirtied_lower_bound |= o.dirtied_lower_bound;
        self.evicted_lower_bound |= o.evicted_lower_bound;
    }

    /// Total bytes (the sort key of rows).
    pub fn total(&self) -> u64 {
        self.added_bytes + self.dirtied_bytes + self.evicted_bytes
    }
}

/// Counts by key, at most `cap` keys; the rest in `other`. Events of the same key in a row
/// (one process reading one file) are summed before the map is looked up: one lookup per
/// run of events instead of one per event.
#[derive(Debug, Clone)]
pub struct Bounded<K> {
    /// Counts of each key (after [`Bounded::flush`]).
    pub by_key: IntMap<K, Counts>,
    /// The key of the last events, and their counts not yet in `by_key`.
    pending: Option<(K, Counts)>,
    /// Counts of the keys past the cap.
    pub other: Counts,
    /// Distinct keys were refused (some may be counted in `other` more than once).
    pub overflowed: bool,
    cap: usize,
}

impl<K: std::hash::Hash + Eq> Bounded<K> {
    /// An empty tally of at most `cap` keys.
    pub fn new(cap: usize) -> Self {
        Bounded {
            by_key: IntMap::default(),
            pending: None,
            other: Counts::default(),
            overflowed: false,
            cap,
        }
    }

    /// Counts one event for `key`.
    #[inline]
    pub fn add(&mut self, key: K, kind: Kind, bytes: u64, exact: bool) {
        if let Some((k, c)) = &mut self.pending {
            if *k == key {
                c.add(kind, bytes, exact);
                return;
            }
        }
        self.flush();
        let mut c = Counts::default();
        c.add(kind, bytes, exact);
        self.pending = Some((key, c));
    }

    /// Moves the pending counts into `by_key` (or `other`, past the cap).
    pub fn flush(&mut self) {
        let Some((key, c)) = self.pending.take() else {
            return;
        };
        let len = self.by_key.len();
        match self.by_key.get_mut(&key) {
            Some(m) => m.merge(&c),
            None if len < self.cap => {
                self.by_key.insert(key, c);
            }
            None => {
                self.overflowed = true;
                self.other.merge(&c)
            }
        }
    }
}

/// A record's device: known, or the index (in [`super::names::Bdis::unresolved`]) of the bdi
/// a dirtying record named that could not be mapped to one filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevKey {
    /// A device number.
    Known {
        /// Major.
        major: u32,
        /// Minor.
        minor: u32,
    },
    /// An unresolved bdi, by its index.
    UnresolvedBdi(u32),
}

impl DevKey {
    /// From `s_dev` in the kernel's encoding (major << 20 | minor), as the tracepoints give it.
    #[inline]
    pub fn from_kernel(dev: u32) -> DevKey {
        DevKey::Known {
            major: dev >> 20,
            minor: dev & 0xf_ffff,
        }
    }
}

/// The key of a file in top's tables: its identity ([`FileId`], the one file key pagewise
/// matches files by) where its device is known, else its unresolved bdi and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKey {
    /// A file whose device is known.
    File(FileId),
    /// A file made dirty through a bdi that names no single filesystem.
    UnresolvedBdi {
        /// The bdi's index.
        bdi: u32,
        /// The inode.
        ino: u64,
    },
}

impl FileKey {
    /// The file `ino` on the device `dev`.
    #[inline]
    pub fn new(dev: DevKey, ino: u64) -> FileKey {
        match dev {
            DevKey::Known { major, minor } => FileKey::File(FileId(major, minor, ino)),
            DevKey::UnresolvedBdi(bdi) => FileKey::UnresolvedBdi { bdi, ino },
        }
    }
}

/// Two integer writes, as the (dev, inode) pair this key replaced: the reader hashes one or
/// two keys per event (see [`IntHasher`]).
impl Hash for FileKey {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        match *self {
            FileKey::File(FileId(major, minor, ino)) => {
                h.write_u64(((major as u64) << 32) | minor as u64);
                h.write_u64(ino);
            }
            FileKey::UnresolvedBdi { bdi, ino } => {
                h.write_u64((1 << 63) | bdi as u64);
                h.write_u64(ino);
            }
        }
    }
}

/// Large folios seen added, by (file, index) -> order: the size of a folio later made
/// dirty (that tracepoint has no size) or removed (where its record has no order). Order-0
/// folios are not kept (one page is what an unknown folio counts as). Bounded.
#[derive(Debug, Default)]
pub struct Folios {
    map: IntMap<(FileKey, u64), u8>,
}

/// Large folios remembered at most (~40 bytes each: 10 MiB).
pub const MAX_FOLIOS: usize = 1 << 18;

impl Folios {
    /// A folio of `order` added at `key`.
    #[inline]
    pub fn added(&mut self, key: (FileKey, u64), order: u8) {
        if order > 0 && self.map.len() < MAX_FOLIOS {
            self.map.insert(key, order);
        } else if order == 0 && !self.map.is_empty() {
            self.map.remove(&key);
        }
    }

    /// The order of the folio at `key`, when it was seen added.
    #[inline]
    pub fn order(&self, key: &(FileKey, u64)) -> Option<u8> {
        self.map.get(key).copied()
    }

    /// The folio at `key` left the page cache.
    #[inline]
    pub fn removed(&mut self, key: &(FileKey, u64)) {
        if !self.map.is_empty() {
            self.map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_past_the_cap_are_other() {
        let mut b = Bounded::new(2);
        for k in [1u32, 2, 1, 3, 4] {
            b.add(k, Kind::Added, 4096, true);
        }
        b.flush();
        assert_eq!(b.by_key[&1].added_bytes, 8192);
        assert_eq!(b.by_key.len(), 2);
        assert_eq!(b.other.added_bytes, 8192);
        assert!(b.overflowed);
        b.add(1, Kind::Dirtied, 4096, false);
        b.flush();
        assert!(b.by_key[&1].dirtied_lower_bound);
        assert!(!b.by_key[&1].evicted_lower_bound);
    }

    #[test]
    fn folio_orders_are_remembered_until_removed() {
        let mut f = Folios::default();
        let file = FileKey::new(DevKey::from_kernel((8 << 20) | 1), 2);
        f.added((file, 256), 8);
        f.added((file, 0), 0);
        assert_eq!(f.order(&(file, 256)), Some(8));
        assert_eq!(f.order(&(file, 0)), None);
        f.removed(&(file, 256));
        assert_eq!(f.order(&(file, 256)), None);
    }
}
