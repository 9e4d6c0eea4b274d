//! The delay model: how long one request to the emulated disk takes.
//!
//! Plain functions of (model, head position, request), so they are unit-tested without FUSE.
//!
//! **hdd** (a 7,200 rpm SATA disk, one request at a time, in arrival order):
//!
//! ```text
//! d = offset - end of the previous request          (bytes, the head's distance)
//! d == 0                  -> 0                       (sequential: the next sector is under the head)
//! 0 < d <= track          -> d / rate                (short forward skip: wait while the gap
//!                                                     spins past, as a disk reading on does)
//! otherwise               -> seek(|d|) + rotation    (a real seek)
//! seek(x)  = min_seek + (full_stroke - min_seek) * sqrt(x / capacity), at most full_stroke
//! rotation = half a revolution on average = 30 / rpm s (4.17 ms at 7,200 rpm)
//! delay    = positioning + len / rate                (transfer)
//! ```
//!
//! Defaults: 7,200 rpm, min_seek 1.0 ms (track to track), full_stroke 14 ms (so the average
//! seek, a third of the stroke, is 8.5 ms as data sheets give), rate 120 MB/s, track 1 MiB
//! (120 MB/s / 120 rev/s), capacity 500 GB: the emulated image is the first SIZE bytes of a
//! 500 GB disk, so files a few GiB apart are a short seek away, as on a real disk.
//! (The sqrt law is the classic one for a seek dominated by the arm's acceleration: Ruemmler
//! & Wilkes, "An introduction to disk drive modeling", 1994.)
//!
//! **cloud** (a network block volume): position costs nothing; up to `depth` requests are in
//! flight at once, but the volume's limits are shared by all of them, as a provisioned cloud
//! volume's are:
//!
//! ```text
//! slot     = max(now, previous slot + 1 / iops)      (at most `iops` requests start per second)
//! transfer = [max(slot, link free), + len / rate)    (one shared link of `rate` bytes/s)
//! done     = end of transfer + latency               (the network round trip)
//! ```
//!
//! Alone on an idle volume a request takes `latency + len / rate`; 32 at once share the rate
//! (the volume's throughput is 250 MB/s in total, not per request). Defaults: 1 ms, 250 MB/s,
//! 3,000 IOPS, depth 32 (an AWS gp3 volume at its baseline 3,000 IOPS with 250 MB/s
//! provisioned: about 1 ms per small request). Before the shared caps, 32 requests each got
//! 250 MB/s: disk-order replay read 17 MiB in 18 ms (983 MB/s, 24x recorded order) on a
//! "250 MB/s" volume.
//!
//! **cloud-fast**: the same model at gp3's provisioned maximum: 1,000 MB/s, 16,000 IOPS, 1 ms,
//! depth 64. On this 2-CPU VM the FUSE daemon and loop device deliver ~770 MB/s of it to fio
//! O_DIRECT (1 MiB, queue depth 32).
use std::time::Duration;

/// The 7,200 rpm model's parameters (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct Hdd {
    pub rpm: f64,
    /// Seconds; a seek of one track.
    pub min_seek: f64,
    /// Seconds; a seek across the whole disk.
    pub full_stroke: f64,
    /// Bytes: the modelled disk's size, the distance of a full stroke.
    pub capacity: u64,
    /// Bytes per second, media transfer.
    pub rate: f64,
    /// Bytes a forward skip may span and still be read on rather than sought.
    pub track: u64,
}

impl Default for Hdd {
    fn default() -> Self {
        Hdd {
            rpm: 7200.0,
            min_seek: 1.0e-3,
            full_stroke: 14.0e-3,
            capacity: 500_000_000_000,
            rate: 120e6,
            track: 1 << 20,
        }
    }
}

impl Hdd {
    /// Seek time for a head movement of `distance` bytes (not the rotation).
    pub fn seek(&self, distance: u64) -> f64 {
        if distance == 0 {
            return 0.0;
        }
        let frac = (distance as f64 / self.capacity as f64).min(1.0);
        (self.min_seek + (self.full_stroke - self.min_seek) * frac.sqrt()).min(self.full_stroke)
    }

    /// Average rotational latency: half a revolution.
    pub fn rotation(&self) -> f64 {
        30.0 / self.rpm
    }

    /// Seconds to serve `len` bytes at `offset` when the previous request ended at `head`.
    pub fn delay(&self, head: u64, offset: u64, len: u64) -> f64 {
        let transfer = len as f64 / self.rate;
        let position = if offset == head {
            0.0
        } else if offset > head && offset - head <= self.track {
            (offset - head) as f64 / self.rate
        } else {
            self.seek(offset.abs_diff(head)) + self.rotation()
        };
        position + transfer
    }
}

/// The cloud volume's parameters (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct Cloud {
    /// Seconds per request (the round trip), on top of its transfer.
    pub latency: f64,
    /// Bytes per second: the volume's throughput, shared by the requests in flight.
    pub rate: f64,
    /// Requests started per second at most, shared likewise.
    pub iops: f64,
    /// Requests in flight at once.
    pub depth: usize,
}

impl Default for Cloud {
    fn default() -> Self {
        Cloud {
            latency: 1.0e-3,
            rate: 250e6,
            iops: 3000.0,
            depth: 32,
        }
    }
}

impl Cloud {
    /// A volume provisioned at gp3's maximum: 1,000 MB/s, 16,000 IOPS, the same 1 ms round
    /// trip, 64 requests in flight.
    pub fn fast() -> Cloud {
        Cloud {
            latency: 1.0e-3,
            rate: 1000e6,
            iops: 16000.0,
            depth: 64,
        }
    }

    /// Seconds to serve one request of `len` bytes alone on an idle volume (wherever it is).
    pub fn delay(&self, len: u64) -> f64 {
        self.latency + len as f64 / self.rate
    }
}

/// A profile: which model, with its parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Profile {
    Hdd(Hdd),
    Cloud(Cloud),
}

impl Profile {
    /// `hdd` or `cloud` with their defaults.
    pub fn named(name: &str) -> Option<Profile> {
        match name {
            "hdd" => Some(Profile::Hdd(Hdd::default())),
            "cloud" => Some(Profile::Cloud(Cloud::default())),
            "cloud-fast" => Some(Profile::Cloud(Cloud::fast())),
            _ => None,
        }
    }

    /// Requests the disk serves at once (the daemon's worker threads).
    pub fn depth(&self) -> usize {
        match self {
            Profile::Hdd(_) => 1,
            Profile::Cloud(c) => c.depth.max(1),
        }
    }
}

/// The disk's state: the model, where the head is (the end of the last request served), and
/// for the cloud volume when its next request slot and its shared link are free (seconds on
/// the caller's clock).
#[derive(Clone, Debug)]
pub struct Disk {
    pub profile: Profile,
    pub head: u64,
    next_slot: f64,
    link_free: f64,
}

impl Disk {
    pub fn new(profile: Profile) -> Disk {
        Disk {
            profile,
            head: 0,
            next_slot: 0.0,
            link_free: 0.0,
        }
    }

    /// Serves one request that starts being served at `now` (seconds, any fixed origin, not
    /// decreasing between calls): its delay from `now`, the head moved to its end. The hdd
    /// serves one request at a time (the caller's single worker) and ignores `now`.
    pub fn serve(&mut self, now: f64, offset: u64, len: u64) -> Duration {
        let s = match &self.profile {
            Profile::Hdd(h) => h.delay(self.head, offset, len),
            Profile::Cloud(c) => {
                let slot = now.max(self.next_slot);
                self.next_slot = slot + 1.0 / c.iops;
                let start = slot.max(self.link_free);
                self.link_free = start + len as f64 / c.rate;
                self.link_free + c.latency - now
            }
        };
        self.head = offset + len;
        Duration::from_secs_f64(s)
    }

    /// A request served without delay (the disk being filled): the head moves, nothing else.
    pub fn skip(&mut self, offset: u64, len: u64) {
        self.head = offset + len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn sequential_request_is_transfer_only() {
        let h = Hdd::default();
        // 128 KiB at 120 MB/s = 1.092 ms, no positioning.
        assert!(close(h.delay(4096, 4096, 131072), 131072.0 / 120e6));
    }

    #[test]
    fn short_forward_skip_waits_for_the_gap_to_spin_past() {
        let h = Hdd::default();
        let gap = 64 * 1024;
        assert!(close(
            h.delay(0, gap, 4096),
            gap as f64 / 120e6 + 4096.0 / 120e6
        ));
        // One byte beyond a track is a seek: min seek + a little + half a revolution.
        let far = h.delay(0, (1 << 20) + 1, 4096);
        assert!(far > 1.0e-3 + 30.0 / 7200.0, "{far}");
    }

    #[test]
    fn backward_request_seeks_and_waits_half_a_revolution() {
        let h = Hdd::default();
        let d = h.delay(8192, 0, 4096);
        let want = h.min_seek
            + (h.full_stroke - h.min_seek) * (8192.0f64 / 500e9).sqrt()
            + 30.0 / 7200.0
            + 4096.0 / 120e6;
        assert!(close(d, want), "{d} vs {want}");
    }

    #[test]
    fn seek_grows_with_sqrt_of_distance_and_is_capped() {
        let h = Hdd::default();
        assert_eq!(h.seek(0), 0.0);
        assert!(close(h.seek(h.capacity), h.full_stroke));
        assert!(close(h.seek(h.capacity * 4), h.full_stroke));
        // A third of the stroke: the data sheet's average seek, 8.5 ms.
        let third = h.seek(h.capacity / 3);
        assert!((third - 8.5e-3).abs() < 0.06e-3, "{third}");
        // Quadrupling the distance doubles the part above the minimum.
        let a = h.seek(1 << 30) - h.min_seek;
        let b = h.seek(4 << 30) - h.min_seek;
        assert!(close(b, 2.0 * a));
        // Half a revolution at 7,200 rpm: 4.17 ms.
        assert!(close(h.rotation(), 1.0 / 240.0));
    }

    #[test]
    fn disk_tracks_the_head_and_random_reads_cost_more_than_sorted_ones() {
        let mut d = Disk::new(Profile::named("hdd").unwrap());
        let first = d.serve(0.0, 1 << 30, 4096);
        assert_eq!(d.head, (1 << 30) + 4096);
        let next = d.serve(0.0, (1 << 30) + 4096, 4096);
        assert!(first > Duration::from_millis(5), "{first:?}");
        assert!(next < Duration::from_micros(50), "{next:?}");
        // 100 pages 256 KiB apart, shuffled vs ascending (ascending reads on, within a track).
        let offs: Vec<u64> = (0..100u64).map(|i| (i * 37 % 100) << 18).collect();
        let mut sorted = offs.clone();
        sorted.sort();
        let total = |o: &[u64]| {
            let mut d = Disk::new(Profile::named("hdd").unwrap());
            o.iter().map(|&x| d.serve(0.0, x, 4096)).sum::<Duration>()
        };
        assert!(total(&offs) > total(&sorted) * 2);
    }

    #[test]
    fn cloud_is_latency_plus_transfer_wherever_the_request_is() {
        let c = Cloud::default();
        assert!(close(c.delay(0), 1e-3));
        assert!(close(c.delay(1 << 20), 1e-3 + 1048576.0 / 250e6));
        let mut d = Disk::new(Profile::Cloud(c));
        // Alone on an idle volume (each a second after the last): the same wherever it is.
        assert_eq!(d.serve(0.0, 0, 4096), d.serve(1.0, 1 << 40, 4096));
        assert!(close(
            d.serve(2.0, 0, 4096).as_secs_f64(),
            1e-3 + 4096.0 / 250e6
        ));
        assert_eq!(d.profile.depth(), 32);
        assert_eq!(Profile::named("hdd").unwrap().depth(), 1);
        assert!(Profile::named("ssd").is_none());
    }

    #[test]
    fn cloud_requests_in_flight_share_the_volumes_throughput() {
        let c = Cloud::default();
        let mut d = Disk::new(Profile::Cloud(c.clone()));
        // 32 requests of 1 MiB arriving together: the link serves them one after the other at
        // 250 MB/s in total, each done a round trip after its transfer.
        let done: Vec<f64> = (0..32u64)
            .map(|i| d.serve(0.0, i << 20, 1 << 20).as_secs_f64())
            .collect();
        let one = 1048576.0 / 250e6;
        assert!(close(done[0], one + 1e-3), "{}", done[0]);
        assert!(close(done[31], 32.0 * one + 1e-3), "{}", done[31]);
        // 32 MiB in 134 ms + 1 ms: 250 MB/s for all of them together, not for each.
        let aggregate = 32.0 * 1048576.0 / done[31];
        assert!(aggregate < 250e6 && aggregate > 240e6, "{aggregate}");
        // Later, on an idle volume again, a request takes its lone time.
        assert!(close(d.serve(10.0, 0, 1 << 20).as_secs_f64(), one + 1e-3));
    }

    #[test]
    fn cloud_fast_is_the_same_volume_four_times_wider() {
        let mut d = Disk::new(Profile::named("cloud-fast").unwrap());
        assert_eq!(d.profile.depth(), 64);
        // 64 requests of 1 MiB together: 1,000 MB/s shared, the last a round trip after 64 MiB.
        let last = (0..64u64)
            .map(|i| d.serve(0.0, i << 20, 1 << 20).as_secs_f64())
            .fold(0.0, f64::max);
        assert!(close(last, 64.0 * 1048576.0 / 1000e6 + 1e-3), "{last}");
        // 1,600 small ones: at most 16,000 start per second.
        let last = (0..1600u64)
            .map(|i| d.serve(10.0, i * 4096, 512).as_secs_f64())
            .fold(0.0, f64::max);
        assert!(
            close(last, 1599.0 / 16000.0 + 512.0 / 1000e6 + 1e-3),
            "{last}"
        );
    }

    #[test]
    fn cloud_starts_at_most_iops_requests_per_second() {
        let c = Cloud::default();
        let mut d = Disk::new(Profile::Cloud(c.clone()));
        // 300 small requests at once: the last starts 299 / 3,000 s later (its transfer is
        // long over by then), then waits out its round trip.
        let last = (0..300u64)
            .map(|i| d.serve(0.0, i * 4096, 512).as_secs_f64())
            .last()
            .unwrap();
        assert!(close(last, 299.0 / 3000.0 + 512.0 / 250e6 + 1e-3), "{last}");
    }

    #[test]
    fn skipped_requests_move_the_head_and_queue_nothing() {
        let mut d = Disk::new(Profile::named("cloud").unwrap());
        for i in 0..10_000u64 {
            d.skip(i << 20, 1 << 20);
        }
        assert_eq!(d.head, 10_000 << 20);
        assert!(close(
            d.serve(0.0, 0, 4096).as_secs_f64(),
            1e-3 + 4096.0 / 250e6
        ));
    }
}
