//! Which memory cgroup a file's cached pages are charged to: `/proc/self/pagemap` of a mapping
//! of the file gives each resident page's frame (PFN), `/proc/kpagecgroup` the inode of the
//! memory cgroup each frame is charged to.
//!
//! - pagemap(5) — <https://www.kernel.org/doc/html/latest/admin-guide/mm/pagemap.html>: one
//!   u64 per virtual page; bit 63 "present", bits 0-54 the PFN (zeroed without
//!   CAP_SYS_ADMIN since Linux 4.2).
//! - `/proc/kpagecgroup` (Linux 4.3, CONFIG_MEMCG): one u64 per PFN, the inode of the memory
//!   cgroup the page is charged to (the cgroup directory's st_ino; 0 when none). Root only.
//!
//! Only pages already in the page cache are looked at: mincore(2) finds them, and
//! `madvise(MADV_POPULATE_READ)` maps just those runs into the mapping's page tables (minor
//! faults, no I/O). A page evicted between the two would be read in again by the populate and
//! charged to the caller's cgroup; the window is microseconds and the figure says so.
#![allow(unsafe_code)]

use super::cache::Mapping;
use super::cvt;
use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;

/// Pages looked at per mapping window: 64 MiB of file, a 128 KiB pagemap read.
const WINDOW_PAGES: u64 = 16384;

/// The kernel files read by [`page_cgroups`], opened once.
pub struct KpageFiles {
    pagemap: File,
    kpagecgroup: File,
}

impl KpageFiles {
    /// Opens `/proc/self/pagemap` and `/proc/kpagecgroup` (root only).
    pub fn open() -> Result<KpageFiles, (&'static str, io::Error)> {
        let pagemap = File::open("/proc/self/pagemap").map_err(|e| ("/proc/self/pagemap", e))?;
        let kpagecgroup = File::open("/proc/kpagecgroup").map_err(|e| ("/proc/kpagecgroup", e))?;
        Ok(KpageFiles {
            pagemap,
            kpagecgroup,
        })
    }
}

/// For each cached page of `[0, len)` of `fd`, calls `each(memcg_inode)` with the inode of the
/// memory cgroup its frame is charged to (0: charged to none). Returns the cached pages whose
/// frame could not be found (evicted meanwhile, or not mappable).
///
/// Fails with `PermissionDenied` when pagemap hides frame numbers (no CAP_SYS_ADMIN).
pub fn page_cgroups(
    fd: BorrowedFd<'_>,
    len: u64,
    files: &KpageFiles,
    each: &mut dyn FnMut(u64),
) -> io::Result<u64> {
    let mut unresolved = 0;
    page_cgroups_in(fd, 0, len, files, &mut |_, ino| match ino {
        Some(i) => each(i),
        None => unresolved += 1,
    })?;
    Ok(unresolved)
}

/// For each cached page of `[off, off+len)` of `fd` (`off` page aligned), calls
/// `each(page_offset, memcg_inode)`: the page's byte offset in the file and the inode of the
/// memory cgroup its frame is charged to (`Some(0)`: charged to none; `None`: its frame could
/// not be found, evicted meanwhile or not mappable). As [`page_cgroups`], over a part of the
/// file, telling where each page is (so a file's partial last page can count its bytes only).
pub fn page_cgroups_in(
    fd: BorrowedFd<'_>,
    start: u64,
    len: u64,
    files: &KpageFiles,
    each: &mut dyn FnMut(u64, Option<u64>),
) -> io::Result<()> {
    let page = super::page_size();
    let mut vec: Vec<u8> = Vec::new();
    let mut entries: Vec<u8> = Vec::new();
    let mut off = start;
    let end = start.saturating_add(len);
    while off < end {
        let win = (end - off).min(WINDOW_PAGES * page);
        let map = Mapping::new(fd, off, win)?;
        let pages = win.div_ceil(page) as usize;
        vec.clear();
        vec.resize(pages, 0);
        // SAFETY: map spans `win` bytes of a live mapping and vec has one byte per page.
        cvt(unsafe { libc::mincore(map.addr, map.len, vec.as_mut_ptr()) })?;
        // Map the runs of cached pages (no I/O: they are in the cache).
        let mut i = 0;
        while i < pages {
            if vec[i] & 1 == 0 {
                i += 1;
                continue;
            }
            let start = i;
            while i < pages && vec[i] & 1 == 1 {
                i += 1;
            }
            let run_len = ((i - start) as u64 * page).min(win - start as u64 * page);
            // SAFETY: `start` pages from the mapping's start stay inside the live mapping.
            let run = unsafe { (map.addr as *const u8).add(start * page as usize) };
            // Before 5.14 each cached page is faulted in a byte at a time (a minor fault: the
            // page is in the cache, mincore said so); without that, 5.10 found no frame.
            let _ = super::populate_mapped(run, run_len as usize);
        }
        entries.clear();
        entries.resize(pages * 8, 0);
        files
            .pagemap
            .read_exact_at(&mut entries, map.addr as u64 / page * 8)?;
        for (p, e) in entries.chunks_exact(8).enumerate() {
            if vec[p] & 1 == 0 {
                continue;
            }
            let at = off + p as u64 * page;
            let mut raw = [0u8; 8];
            raw.copy_from_slice(e);
            let e = u64::from_le_bytes(raw);
            let present = e >> 63 & 1 == 1;
            let pfn = e & ((1 << 55) - 1);
            if !present {
                each(at, None);
                continue;
            }
            if pfn == 0 {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
            let mut ino = [0u8; 8];
            files.kpagecgroup.read_exact_at(&mut ino, pfn * 8)?;
            each(at, Some(u64::from_le_bytes(ino)));
        }
        off += win;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cold_file, require, scratch_dir};
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn cached_pages_are_charged_to_a_memory_cgroup_directory() {
        let files = match KpageFiles::open() {
            Ok(files) => files,
            Err((what, e)) => {
                require(false, &format!("{what} (root, CONFIG_MEMCG): {e}"));
                return;
            }
        };
        let dir = scratch_dir();
        let f = cold_file(dir.path(), "f", 8);
        let mut buf = [0u8; 4096];
        f.read_exact_at(&mut buf, 0).unwrap();
        f.read_exact_at(&mut buf, 4 * 4096).unwrap();
        let cached = super::super::cachestat(f.as_fd(), 0, 0).unwrap().cache;
        let mut inodes = Vec::new();
        let unresolved =
            page_cgroups(f.as_fd(), 8 * 4096, &files, &mut |i| inodes.push(i)).unwrap();
        assert_eq!(inodes.len() as u64 + unresolved, cached);
        // Our own memory cgroup, whose directory has that inode.
        let own = crate::cgroup::own_memory_cgroup().unwrap();
        let ino = std::fs::metadata(own).unwrap().ino();
        assert!(inodes.iter().all(|&i| i == ino), "{inodes:?} vs {ino}");
    }

    /// The pre-5.14 route (no MADV_POPULATE_READ): touching maps every cached page (the
    /// pagemap's present bit, visible to any user), and pages past the end of a file
    /// truncated meanwhile give no SIGBUS.
    #[test]
    fn touching_maps_cached_pages_and_survives_a_truncated_file() {
        let dir = scratch_dir();
        let page = super::super::page_size();
        let f = cold_file(dir.path(), "f", 16);
        let mut buf = vec![0u8; 16 * page as usize];
        f.read_exact_at(&mut buf, 0).unwrap();
        let map = Mapping::new(f.as_fd(), 0, 16 * page).unwrap();
        f.set_len(4 * page).unwrap();
        super::super::touch_pages(map.addr as *const u8, 16, page as usize);
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut e = vec![0u8; 16 * 8];
        pagemap
            .read_exact_at(&mut e, map.addr as u64 / page * 8)
            .unwrap();
        let present: Vec<bool> = e
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()) >> 63 == 1)
            .collect();
        assert_eq!(&present[..4], &[true; 4], "{present:?}");
        assert!(present[4..].iter().all(|p| !p), "{present:?}");
    }
}
