//! Per-cgroup page-cache traffic for the exporter (`cgroup_rates`): the bytes each memory
//! cgroup's processes added to, dirtied in and evicted from the page cache, followed through
//! the kernel's tracepoints by the same [`Sampler`] as `pagewise top`, kept as counters that
//! only grow (`pagewise_cgroup_added_bytes_total` ...), so `rate()` answers "who is filling
//! the cache right now" per container.
//!
//! The sampler runs for the exporter's life and is drained at each refresh. At most
//! [`MAX_GROUPS`] cgroups are kept; the traffic of others (and of events the sampler could
//! not put in a group) is counted under `id="other"`. Counts are cumulative since the
//! exporter started; a restart is a counter reset, as Prometheus expects.

use super::CgroupFilter;
use crate::cgroup::container::{self, Owner};
use crate::top::{Sampler, SamplerOptions, Views};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Cgroups kept with their own series.
pub const MAX_GROUPS: usize = 4096;

/// The `id` label of traffic not put in a group of its own.
pub const OTHER: &str = "other";

/// One cgroup's traffic since the exporter started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes added to the page cache.
    pub added_bytes: u64,
    /// Bytes made dirty.
    pub dirtied_bytes: u64,
    /// Bytes removed from the page cache.
    pub evicted_bytes: u64,
    /// Who the path names (container, pod, unit).
    pub owner: Owner,
}

/// What a snapshot carries of the traffic.
#[derive(Debug, Clone, Default)]
pub struct RatesSnapshot {
    /// Per cgroup path (`other` last), those the include/exclude regexes keep.
    pub groups: Vec<(String, Traffic)>,
    /// The kernel's dirtying tracepoint exists (else `dirtied` is not reported).
    pub dirtied_counted: bool,
    /// Events the kernel dropped (its ring full) since the start.
    pub lost_events: u64,
}

/// The running sampler and the totals.
pub struct CgroupRates {
    sampler: Mutex<Sampler>,
    totals: Mutex<(BTreeMap<String, Traffic>, u64, bool)>,
    /// What the sampler said at start (the route taken, tracepoints missing).
    pub notices: Vec<String>,
}

impl CgroupRates {
    /// Starts following the tracepoints (root, or CAP_PERFMON and tracefs readable: perf
    /// events; else tracefs writable: a tracefs instance): the reason when it cannot.
    pub fn start() -> Result<CgroupRates, String> {
        let options = SamplerOptions {
            views: Views {
                process: false,
                cgroup: true,
                file: false,
            },
            ..SamplerOptions::default()
        };
        let sampler = Sampler::start(&options).map_err(|e| e.to_string())?;
        Ok(CgroupRates {
            notices: sampler.notices.clone(),
            sampler: Mutex::new(sampler),
            totals: Mutex::new((BTreeMap::new(), 0, false)),
        })
    }

    /// Drains the sampler into the totals and returns what `filter` keeps of them.
    pub fn update(&self, filter: &CgroupFilter) -> RatesSnapshot {
        let interval = self.sampler.lock().unwrap().drain();
        let mut t = self.totals.lock().unwrap();
        let (groups, lost, dirtied) = &mut *t;
        *lost += interval.lost_events;
        *dirtied = interval.dirtied_counted;
        if let Some(rows) = interval.cgroups {
            for r in rows.rows {
                let key = r.cgroup.unwrap_or_else(|| OTHER.to_string());
                add(groups, key, &r.counts);
            }
            for c in [rows.other, rows.rest].into_iter().flatten() {
                add(groups, OTHER.to_string(), &c);
            }
        }
        RatesSnapshot {
            groups: groups
                .iter()
                .filter(|(k, _)| k.as_str() == OTHER || filter.keeps(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            dirtied_counted: *dirtied,
            lost_events: *lost,
        }
    }
}

/// Adds one interval's counts of `key` (into `other` once [`MAX_GROUPS`] are kept).
fn add(groups: &mut BTreeMap<String, Traffic>, key: String, c: &crate::top::Counts) {
    let key = match groups.contains_key(&key) || groups.len() < MAX_GROUPS {
        true => key,
        false => OTHER.to_string(),
    };
    let e = groups.entry(key).or_insert_with_key(|k| Traffic {
        owner: container::owner(k),
        ..Traffic::default()
    });
    e.added_bytes += c.added_bytes;
    e.dirtied_bytes += c.dirtied_bytes;
    e.evicted_bytes += c.evicted_bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_bounded_and_owned() {
        let mut g = BTreeMap::new();
        let c = crate::top::Counts {
            added_bytes: 4096,
            ..Default::default()
        };
        for i in 0..MAX_GROUPS + 10 {
            add(&mut g, format!("/g{i}"), &c);
        }
        add(&mut g, "/g0".into(), &c);
        assert!(g.len() <= MAX_GROUPS + 1);
        assert_eq!(g["/g0"].added_bytes, 8192);
        let spilled: u64 = g.values().map(|t| t.added_bytes).sum();
        assert_eq!(spilled, 4096 * (MAX_GROUPS as u64 + 11));
        add(&mut g, "/system.slice/nginx.service".into(), &c);
        assert!(!g.contains_key("/system.slice/nginx.service"));
    }
}
