//! Where a file's data lives: lseek(2) SEEK_DATA/SEEK_HOLE through rustix, and the ioctls
//! rustix has no API for (`FS_IOC_FIEMAP`, `BLKGETSIZE64`).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::fs::SeekFrom;

use super::super::cvt;

/// `off_t lseek(int fd, off_t offset, int whence)` with `SEEK_DATA` then `SEEK_HOLE` —
/// <https://man7.org/linux/man-pages/man2/lseek.2.html> (Linux 3.1), through rustix.
///
/// Data extents of `[off, end)` of a file, as (offset, length) pairs. Holes are skipped, so a
/// sparse 1 TiB file with 1 MiB of data yields one 1 MiB extent. Filesystems without support
/// report the whole file as data, which is still correct. Moves the file offset.
pub fn data_extents(fd: BorrowedFd<'_>, off: u64, end: u64) -> io::Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut pos = off;
    while pos < end {
        let d = match rustix::fs::seek(fd, SeekFrom::Data(pos)) {
            Ok(d) => d,
            Err(rustix::io::Errno::NXIO) => break, // no data after pos
            Err(e) => return Err(e.into()),
        };
        if d >= end {
            break;
        }
        let h = rustix::fs::seek(fd, SeekFrom::Hole(d))?.min(end);
        out.push((d, h - d));
        pos = h;
    }
    Ok(out)
}

/// One extent of a file as FIEMAP reports it: logical offset, physical offset, length (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Byte offset in the file (`fe_logical`).
    pub logical: u64,
    /// Byte offset on the device (`fe_physical`); 0 while delayed allocation has not placed it.
    pub physical: u64,
    /// Length in bytes (`fe_length`).
    pub length: u64,
}

/// `_IOWR('f', 11, struct fiemap)` of `<linux/fs.h>`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020660B;
/// `fe_flags` bit of the file's last extent.
const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// Extents asked for per ioctl.
const FIEMAP_BATCH: usize = 128;

/// `struct fiemap_extent` of `<linux/fiemap.h>`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

/// `struct fiemap` of `<linux/fiemap.h>`, with room for [`FIEMAP_BATCH`] extents.
#[repr(C)]
struct Fiemap {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fm_extents: [FiemapExtent; FIEMAP_BATCH],
}

const _: () = assert!(std::mem::size_of::<FiemapExtent>() == 56);
const _: () = assert!(std::mem::size_of::<Fiemap>() == 32 + 56 * FIEMAP_BATCH);

/// `int ioctl(int fd, FS_IOC_FIEMAP, struct fiemap *fiemap)` —
/// <https://docs.kernel.org/filesystems/fiemap.html> (Linux 2.6.28; not in rustix: own
/// wrapper).
///
/// Physical layout of `[off, off+len)` of a file, 128 extents per call. Filesystems without
/// FIEMAP fail with EOPNOTSUPP.
pub fn fiemap(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<Vec<Extent>> {
    let mut out = Vec::new();
    let end = off.saturating_add(len);
    let mut start = off;
    loop {
        let mut fm = Box::new(Fiemap {
            fm_start: start,
            fm_length: end - start,
            fm_flags: 0,
            fm_mapped_extents: 0,
            fm_extent_count: FIEMAP_BATCH as u32,
            fm_reserved: 0,
            fm_extents: [FiemapExtent::default(); FIEMAP_BATCH],
        });
        // SAFETY: fm is a valid struct fiemap with room for fm_extent_count extents.
        cvt(unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_FIEMAP as _, &mut *fm as *mut Fiemap) })?;
        let n = fm.fm_mapped_extents as usize;
        if n == 0 {
            break;
        }
        let mut last = false;
        for e in &fm.fm_extents[..n] {
            out.push(Extent {
                logical: e.fe_logical,
                physical: e.fe_physical,
                length: e.fe_length,
            });
            last |= e.fe_flags & FIEMAP_EXTENT_LAST != 0;
        }
        let l = fm.fm_extents[n - 1];
        start = l.fe_logical + l.fe_length;
        if last || start >= end {
            break;
        }
    }
    Ok(out)
}

/// `int ioctl(int fd, BLKGETSIZE64, uint64_t *size)` —
/// <https://man7.org/linux/man-pages/man2/ioctl.2.html>, `<linux/fs.h>` (not in rustix: own
/// wrapper).
///
/// Size in bytes of a block device (`stat` says 0 for devices). ENOTTY for anything else.
pub fn block_device_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    /// `_IOR(0x12, 114, size_t)`.
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 to the pointer given.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) })?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::{require, scratch_dir};
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileExt;

    const MIB: u64 = 1 << 20;

    /// 8 KiB of data at 0 and at 1 MiB, a hole between, 2 MiB long, written back.
    fn sparse_file(dir: &std::path::Path) -> std::fs::File {
        let f = std::fs::File::create_new(dir.join("sparse")).unwrap();
        f.write_all_at(&[1u8; 8192], 0).unwrap();
        f.write_all_at(&[2u8; 8192], MIB).unwrap();
        f.set_len(2 * MIB).unwrap();
        f.sync_all().unwrap();
        f
    }

    #[test]
    fn data_extents_skip_the_hole() {
        let dir = scratch_dir();
        let f = sparse_file(dir.path());
        assert_eq!(
            data_extents(f.as_fd(), 0, 2 * MIB).unwrap(),
            vec![(0, 8192), (MIB, 8192)]
        );
        // A range that starts in the hole and ends inside the second extent.
        assert_eq!(
            data_extents(f.as_fd(), 4 * 4096, MIB + 4096).unwrap(),
            vec![(MIB, 4096)]
        );
        assert_eq!(data_extents(f.as_fd(), MIB + 8192, 2 * MIB).unwrap(), []);
    }

    #[test]
    fn fiemap_maps_both_extents_of_a_sparse_file() {
        let dir = scratch_dir();
        let f = sparse_file(dir.path());
        let ext = match fiemap(f.as_fd(), 0, u64::MAX) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                require(false, "FIEMAP on the test's filesystem");
                return;
            }
            r => r.unwrap(),
        };
        let logical: Vec<(u64, u64)> = ext.iter().map(|e| (e.logical, e.length)).collect();
        assert_eq!(logical, vec![(0, 8192), (MIB, 8192)], "{ext:?}");
        assert!(ext.iter().all(|e| e.physical != 0), "written back: {ext:?}");
        // Only the second half of the file.
        let tail = fiemap(f.as_fd(), MIB, MIB).unwrap();
        assert_eq!(tail.len(), 1);
        assert_eq!(tail[0].logical, MIB);
    }

    #[test]
    fn block_device_size_matches_sysfs() {
        let f = tempfile::tempfile().unwrap();
        let e = block_device_size(f.as_fd()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
        // Any block device this machine has: /sys/block/NAME/size counts 512-byte sectors.
        for ent in std::fs::read_dir("/sys/block")
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = ent.file_name();
            let Ok(dev) = std::fs::File::open(std::path::Path::new("/dev").join(&name)) else {
                continue;
            };
            let sectors: u64 = std::fs::read_to_string(ent.path().join("size"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert_eq!(block_device_size(dev.as_fd()).unwrap(), sectors * 512);
            return;
        }
        require(false, "a block device to open (/sys/block, /dev)");
    }
}
