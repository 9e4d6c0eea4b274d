//! What `load --lock` needs besides the locking itself: the [`LockSet`] a report keeps the
//! locked mappings in, the check before anything is read that the lock can be taken at all
//! (RLIMIT_MEMLOCK without CAP_IPC_LOCK), and the hint that explains a failed lock by the limit
//! that stood in the way.

use super::LoadOptions;
use crate::error::Op;
use crate::sys::{self, LockedMapping};

/// Locked mappings kept by `load --lock`; the pages stay resident until this is dropped.
#[derive(Default)]
pub struct LockSet {
    pub(super) maps: Vec<LockedMapping>,
}

impl std::fmt::Debug for LockSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LockSet({} mappings)", self.maps.len())
    }
}

impl LockSet {
    /// Number of locked mappings (one per file or range).
    pub fn len(&self) -> usize {
        self.maps.len()
    }
    /// True when nothing is locked.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }
}

/// `CAP_IPC_LOCK` of `<linux/capability.h>`: mlock(2) beyond RLIMIT_MEMLOCK.
const CAP_IPC_LOCK: u32 = 14;

/// With `lock`, refuses before anything is read when the lock cannot be taken: without
/// CAP_IPC_LOCK, mlock(2) may lock at most RLIMIT_MEMLOCK bytes in all, which is compared with
/// the bytes the roots' mappings would lock (whole pages of each range; of a sparse file its
/// allocated bytes) where that is known before walking: when every root is a regular file. A
/// limit of 0 refuses any lock. Trees are found out file by file (the first failure stops
/// further locks, and the report says it).
pub(super) fn check_lock_budget(options: &LoadOptions) -> Result<(), crate::Error> {
    if !options.lock || sys::has_capability(CAP_IPC_LOCK) {
        return Ok(());
    }
    let limit = sys::memlock_limit();
    if limit == u64::MAX {
        return Ok(());
    }
    let page = sys::page_size();
    let mut need = 0u64;
    // A tree (or a root the walk will report): known only file by file.
    let mut tree = false;
    for root in &options.roots {
        match sys::stat_path(root, true) {
            Ok(st) if st.is_file() => {
                let (_, len) = options.range.clamp(st.size);
                let len = match st.allocated < st.size {
                    true => len.min(st.allocated.div_ceil(page) * page),
                    false => len,
                };
                need = need.saturating_add(len);
            }
            _ => tree = true,
        }
    }
    if need <= limit && !(tree && limit == 0) {
        return Ok(());
    }
    Err(crate::Error::Invalid {
        what: "lock",
        message: format!(
            "locking {} needs CAP_IPC_LOCK or an RLIMIT_MEMLOCK at least that large (it is {limit} \
             bytes): run with CAP_IPC_LOCK or raise the limit (ulimit -l, LimitMEMLOCK= in a \
             unit); nothing was loaded",
            match need {
                0 => "anything".to_string(),
                n => format!("{n} bytes"),
            }
        ),
    })
}

/// Explains an mmap/mlock failure in terms of the limit that stood in the way.
pub(super) fn lock_failure_hint(op: &Op, e: &std::io::Error) -> String {
    let (maps, max) = crate::procfs::map_count_and_limit();
    match (op, e.raw_os_error()) {
        (Op::Mmap, Some(libc::ENOMEM)) | (Op::Mlock, Some(libc::ENOMEM)) if maps + 16 >= max => format!(
            " — vm.max_map_count ({max}) reached: each locked file needs one mapping; raise it (sysctl vm.max_map_count=N) or lock fewer files"
        ),
        (Op::Mlock, Some(libc::ENOMEM)) | (Op::Mlock, Some(libc::EPERM)) | (Op::Mlock, Some(libc::EAGAIN)) => {
            let l = sys::memlock_limit();
            let lim = if l == u64::MAX { "unlimited".to_string() } else { format!("{l} bytes") };
            format!(" — RLIMIT_MEMLOCK is {lim}: raise it (ulimit -l, LimitMEMLOCK= in a unit) or run with CAP_IPC_LOCK")
        }
        _ => String::new(),
    }
}
