//! What a file opened for cache-neutral I/O (`crate::dio`) needs beyond the other families:
//! open(2) with every access and creation flag, fcntl(2) `F_SETFL` to turn O_DIRECT off and
//! on, fdatasync(2), ftruncate(2), and the logical block size of a filesystem's device (sysfs).
//! All through rustix.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// How [`open_file`] opens: access, creation, and whether with O_DIRECT. All false by default
/// (read-only, existing file, buffered).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileOpen {
    /// Open for reading.
    pub read: bool,
    /// Open for writing (with `read`: `O_RDWR`, else `O_WRONLY`).
    pub write: bool,
    /// `O_CREAT` with this mode (before the umask), when Some.
    pub create: Option<u32>,
    /// `O_EXCL`: with `create`, fail with EEXIST if the file exists.
    pub exclusive: bool,
    /// `O_TRUNC`: cut an existing file to length 0.
    pub truncate: bool,
    /// `O_DIRECT`: bypass the page cache (EINVAL where the filesystem has no direct I/O).
    pub direct: bool,
}

/// `int open(const char *path, int flags, mode_t mode)` —
/// <https://man7.org/linux/man-pages/man2/open.2.html>, through rustix.
///
/// Opens `path` as [`FileOpen`] says, always with `O_CLOEXEC`, and with `O_NONBLOCK` so that a
/// FIFO or device under the name never blocks the open (the caller checks the file type and
/// may clear it with [`set_nonblock`]). Neither `read` nor `write` means read-only.
pub fn open_file(path: &Path, how: FileOpen) -> io::Result<OwnedFd> {
    let mut flags = OFlags::CLOEXEC | OFlags::NONBLOCK;
    flags |= match (how.read, how.write) {
        (true, true) => OFlags::RDWR,
        (false, true) => OFlags::WRONLY,
        _ => OFlags::RDONLY,
    };
    if let Some(_mode) = how.create {
        flags |= OFlags::CREATE;
        if how.exclusive {
            flags |= OFlags::EXCL;
        }
    }
    if how.truncate {
        flags |= OFlags::TRUNC;
    }
    if how.direct {
        flags |= OFlags::DIRECT;
    }
    let mode = Mode::from_raw_mode(how.create.unwrap_or(0));
    Ok(rustix::fs::open(path, flags, mode)?)
}

/// `int fcntl(int fd, F_GETFL)` then `fcntl(fd, F_SETFL, flags ± O_DIRECT)` —
/// <https://man7.org/linux/man-pages/man2/fcntl.2.html>, through rustix.
///
/// Turns O_DIRECT on or off for the open file description `fd` (all descriptors sharing it).
/// EINVAL when turning it on where the filesystem has no direct I/O.
pub fn set_direct(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_flag(fd, OFlags::DIRECT, on)
}

/// [`set_direct`] for `O_NONBLOCK`.
pub fn set_nonblock(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_flag(fd, OFlags::NONBLOCK, on)
}

fn set_flag(fd: BorrowedFd<'_>, flag: OFlags, on: bool) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    if flags.contains(flag) == on {
        return Ok(());
    }
    let flags = if on { flags | flag } else { flags - flag };
    Ok(rustix::fs::fcntl_setfl(fd, flags)?)
}

/// `int fdatasync(int fd)` — <https://man7.org/linux/man-pages/man2/fdatasync.2.html>, through
/// rustix. Writes back the file's data and the metadata needed to read it, and flushes the
/// device's write cache; retries on EINTR.
pub fn fdatasync(fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::io::retry_on_intr(|| rustix::fs::fdatasync(fd))?)
}

/// `int ftruncate(int fd, off_t length)` —
/// <https://man7.org/linux/man-pages/man2/ftruncate.2.html>, through rustix. Cuts or extends
/// (with a hole) the file to `len` bytes.
pub fn ftruncate(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    Ok(rustix::fs::ftruncate(fd, len)?)
}

/// The text of `/sys/dev/block/MAJ:MIN/queue/NAME` for the block device `dev` (`st_dev` of a
/// file on it), or of the parent disk's queue for a partition. None without a block device
/// (tmpfs, NFS, overlay) or without sysfs.
fn queue_attr(dev: u64, name: &str) -> Option<String> {
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let base = format!("/sys/dev/block/{major}:{minor}");
    ["queue", "../queue"]
        .iter()
        .find_map(|q| std::fs::read_to_string(format!("{base}/{q}/{name}")).ok())
}

/// The I/O counters of a block device (`/sys/dev/block/MAJ:MIN/stat`; see the kernel's
/// Documentation/block/stat.rst).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockStat {
    /// Reads completed.
    pub reads: u64,
    /// Milliseconds reads spent, summed over the reads.
    pub read_ticks_ms: u64,
    /// Writes completed.
    pub writes: u64,
    /// Milliseconds writes spent.
    pub write_ticks_ms: u64,
    /// I/Os in flight now.
    pub in_flight: u64,
}

/// [`BlockStat`] from the text of a `stat` file: at least 11 numbers separated by spaces;
/// None otherwise.
pub fn parse_block_stat(text: &str) -> Option<BlockStat> {
    let f: Vec<u64> = text
        .split_ascii_whitespace()
        .take(17)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    (f.len() >= 11).then(|| BlockStat {
        reads: f[0],
        read_ticks_ms: f[3],
        writes: f[4],
        write_ticks_ms: f[7],
        in_flight: f[8],
    })
}

/// The counters of the block device `dev` (a partition's own), None without one.
pub fn block_stat(dev: u64) -> Option<BlockStat> {
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let text = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    parse_block_stat(&text)
}

/// The logical block size of the block device `dev` ([`queue_attr`] `logical_block_size`):
/// the smallest unit O_DIRECT may address there when statx(STATX_DIOALIGN) cannot say.
pub fn logical_block_size(dev: u64) -> Option<u32> {
    queue_attr(dev, "logical_block_size")?
        .trim()
        .parse()
        .ok()
        .filter(|&n: &u32| n.is_power_of_two())
}

/// The I/O scheduler in force on the block device `dev`: the bracketed name of
/// [`queue_attr`] `scheduler` — `none`, `mq-deadline`, `bfq`, `kyber`.
pub fn io_scheduler(dev: u64) -> Option<String> {
    let text = queue_attr(dev, "scheduler")?;
    let start = text.find('[')? + 1;
    let len = text[start..].find(']')?;
    Some(text[start..start + len].to_string())
}

#[cfg(test)]
mod stat_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_kernel_s_layout() {
        let t = "  123 4 5678 90 11 0 22 33 2 40 123 0 0 0 0 7 8\n";
        let s = parse_block_stat(t).unwrap();
        assert_eq!(
            (
                s.reads,
                s.read_ticks_ms,
                s.writes,
                s.write_ticks_ms,
                s.in_flight
            ),
            (123, 90, 11, 33, 2)
        );
        assert!(parse_block_stat("1 2 3").is_none());
        assert!(parse_block_stat("1 2 x 4 5 6 7 8 9 10 11").is_none());
    }

    proptest! {
        #[test]
        fn any_text_is_parsed_or_refused(s in "[0-9 \n]{0,200}|.{0,100}") {
            let _ = parse_block_stat(&s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::scratch_dir;
    use super::super::{dio_align, fstat};
    use super::*;
    use std::os::fd::AsFd;

    fn flags(fd: &OwnedFd) -> OFlags {
        rustix::fs::fcntl_getfl(fd).unwrap()
    }

    #[test]
    fn io_scheduler_is_the_bracketed_name_sysfs_gives() {
        use std::os::unix::fs::MetadataExt;
        let dir = scratch_dir();
        let dev = std::fs::metadata(dir.path()).unwrap().dev();
        let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
        let base = format!("/sys/dev/block/{major}:{minor}");
        let text = ["queue", "../queue"]
            .iter()
            .find_map(|q| std::fs::read_to_string(format!("{base}/{q}/scheduler")).ok());
        match (io_scheduler(dev), text) {
            (Some(s), Some(t)) => assert!(t.contains(&format!("[{s}]")), "{s} vs {t}"),
            (None, None) => {}
            (got, t) => panic!("{got:?} vs {t:?}"),
        }
    }

    #[test]
    fn open_file_honours_each_flag() {
        let dir = scratch_dir();
        let p = dir.path().join("f");
        let create = FileOpen {
            write: true,
            create: Some(0o600),
            exclusive: true,
            ..Default::default()
        };
        let fd = open_file(&p, create).unwrap();
        assert!(flags(&fd).contains(OFlags::WRONLY));
        let e = open_file(&p, create).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        std::fs::write(&p, b"abc").unwrap();
        let rw = FileOpen {
            read: true,
            write: true,
            truncate: true,
            direct: true,
            ..Default::default()
        };
        let fd = open_file(&p, rw).unwrap();
        assert!(flags(&fd).contains(OFlags::RDWR | OFlags::DIRECT));
        assert_eq!(fstat(fd.as_fd()).unwrap().size, 0, "truncated");
        set_direct(fd.as_fd(), false).unwrap();
        assert!(!flags(&fd).contains(OFlags::DIRECT));
        set_direct(fd.as_fd(), true).unwrap();
        assert!(flags(&fd).contains(OFlags::DIRECT));
        set_nonblock(fd.as_fd(), false).unwrap();
        assert!(!flags(&fd).contains(OFlags::NONBLOCK));
        ftruncate(fd.as_fd(), 12345).unwrap();
        fdatasync(fd.as_fd()).unwrap();
        assert_eq!(fstat(fd.as_fd()).unwrap().size, 12345);
        let e = open_file(&dir.path().join("missing"), FileOpen::default()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn logical_block_size_divides_the_dio_alignment() {
        let dir = scratch_dir();
        let f = std::fs::File::open(dir.path()).unwrap();
        let st = fstat(f.as_fd()).unwrap();
        // The scratch directory is on a disk filesystem here (ext4 on a virtio disk).
        let lbs = logical_block_size(st.dev).expect("a block device under the scratch dir");
        assert!((512..=65536).contains(&lbs), "{lbs}");
        std::fs::write(dir.path().join("x"), b"x").unwrap();
        let x = std::fs::File::open(dir.path().join("x")).unwrap();
        if let Some((_, off)) = dio_align(x.as_fd()) {
            assert_eq!(off % lbs, 0, "offset alignment {off} vs block {lbs}");
        }
        assert_eq!(logical_block_size(0), None, "no device 0:0");
    }

    /// The alignment used where statx(STATX_DIOALIGN) is missing (before 6.1) is accepted by
    /// real O_DIRECT reads and writes here.
    #[test]
    fn the_device_alignment_works_for_direct_io() {
        use super::super::super::{device_dio_align, AlignedBuf};
        let dir = scratch_dir();
        let p = dir.path().join("d");
        std::fs::write(&p, vec![5u8; 1 << 20]).unwrap();
        let fd = open_file(
            &p,
            FileOpen {
                read: true,
                write: true,
                direct: true,
                ..Default::default()
            },
        )
        .unwrap();
        let (mem, off) = device_dio_align(fd.as_fd()).unwrap();
        let mut buf = AlignedBuf::new(64 << 10, mem as usize);
        let n = rustix::io::pread(&fd, &mut buf[..], off as u64).unwrap();
        assert_eq!(n, 64 << 10);
        assert!(buf.iter().all(|&b| b == 5));
        rustix::io::pwrite(&fd, &buf[..off as usize], 2 * off as u64).unwrap();
    }
}
