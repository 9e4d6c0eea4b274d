//! Against the kernel: contents byte for byte, file lengths, and what cachestat says is cached.

use super::*;
use crate::error::{Error, Op};
use std::io::Write;
use std::os::fd::AsFd;

const POLICIES: [CachePolicy; 3] = [
    CachePolicy::Direct,
    CachePolicy::DontCache,
    CachePolicy::DropBehind,
];

/// A scratch directory on a disk filesystem (the temporary directory unless it is tmpfs, else
/// next to the test binary).
fn scratch() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    if !sys::is_shmem(std::fs::File::open(tmp.path()).unwrap().as_fd()) {
        return tmp;
    }
    let exe = std::env::current_exe().unwrap();
    tempfile::tempdir_in(exe.parent().unwrap()).unwrap()
}

/// Deterministic bytes (xorshift), so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A file of `data`, written back and dropped from the cache.
fn cold_file(path: &Path, data: &[u8]) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
    sys::fadvise(f.as_fd(), 0, 0, Advice::DontNeed).unwrap();
    assert_eq!(cached(path), 0, "cold to start with");
}

/// Bytes of `path` in the page cache, per cachestat.
fn cached(path: &Path) -> u64 {
    let f = std::fs::File::open(path).unwrap();
    sys::cachestat(f.as_fd(), 0, 0).unwrap().cache * sys::page_size()
}

fn open(path: &Path, mode: OpenMode, policy: CachePolicy) -> DirectFile {
    let f = DirectFile::open(path, mode, policy).unwrap();
    // ext4 on this machine has O_DIRECT and RWF_DONTCACHE (Linux 6.14+): no fallback.
    assert_eq!(f.policy(), policy, "{:?}", f.notice());
    assert_eq!(f.notice(), None);
    f
}

fn rw() -> OpenMode {
    OpenMode {
        write: true,
        ..OpenMode::read()
    }
}

#[test]
fn errors_name_the_path_and_the_call() {
    let dir = scratch();
    let missing = dir.path().join("missing");
    match DirectFile::open(&missing, OpenMode::read(), CachePolicy::Direct).unwrap_err() {
        Error::Io { path, op, source } => {
            assert_eq!(path, missing);
            assert_eq!(op, Op::OpenDirect);
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
        }
        e => panic!("{e}"),
    }
    let e = DirectFile::open(dir.path(), OpenMode::read(), CachePolicy::Direct).unwrap_err();
    assert!(
        matches!(&e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EISDIR)),
        "{e}"
    );
    let p = dir.path().join("w");
    let mut f = open(&p, OpenMode::write(), CachePolicy::Direct);
    let e = f.read_at(&mut [0u8; 4], 0).unwrap_err();
    assert_eq!(errno(&e), Some(libc::EBADF));
    let d = failure(&e).unwrap();
    assert_eq!((d.path.as_path(), &d.op), (p.as_path(), &Op::Pread));
    assert_eq!(
        e.to_string(),
        format!(
            "{}: pread failed: Bad file descriptor (os error 9)",
            p.display()
        )
    );
    let x = DirectFile::open(
        &p,
        OpenMode::from_fopen("x").unwrap(),
        CachePolicy::DontCache,
    );
    assert!(
        matches!(x, Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::EEXIST))
    );
}

#[test]
fn alignment_comes_from_statx() {
    let dir = scratch();
    let p = dir.path().join("f");
    std::fs::write(&p, b"x").unwrap();
    let f = open(&p, OpenMode::read(), CachePolicy::Direct);
    let (mem, off) = sys::dio_align(f.as_fd()).expect("ext4 reports STATX_DIOALIGN");
    let a = f.alignment();
    assert_eq!((a.memory, a.offset), (mem as usize, off as usize));
    let b = f.aligned_buffer(1000).unwrap();
    assert_eq!(b.len(), a.offset.max(1000).div_ceil(a.offset) * a.offset);
    assert_eq!(b.as_ptr() as usize % a.memory, 0);
    let g = open(&p, OpenMode::read(), CachePolicy::DropBehind);
    assert_eq!(g.alignment().offset, sys::page_size() as usize);
}

/// Reads of every shape (aligned or not, in the window, straight, past the end) and writes of
/// every shape (inside the file, across its end, sparse, appending, from aligned buffers),
/// checked against a model after each request and at the end; nothing stays cached.
#[test]
fn random_requests_round_trip_byte_for_byte() {
    let dir = scratch();
    for (i, policy) in POLICIES.into_iter().enumerate() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 + i as u64);
        let p = dir.path().join(policy.name());
        let mut model = rng.bytes((1 << 20) + 777);
        cold_file(&p, &model);
        let mut f = open(&p, rw(), policy);
        let a = f.alignment().offset;
        let sizes = [
            1usize,
            3,
            511,
            512,
            4095,
            4096,
            4097,
            65541,
            300_000,
            (5 << 20) + 1,
        ];
        let mut cursor = 0u64;
        for step in 0..120 {
            let len = sizes[rng.below(sizes.len() as u64) as usize];
            let len = if len > (1 << 20) && rng.below(4) != 0 {
                7000
            } else {
                len
            };
            let off = match rng.below(4) {
                0 => cursor,
                1 => align_down(rng.below(model.len() as u64 + 9000), a),
                _ => rng.below(model.len() as u64 + 9000),
            };
            let aligned = rng.below(3) == 0;
            if rng.below(2) == 0 {
                let data = rng.bytes(len);
                let n = if aligned {
                    let mut b = f.aligned_buffer(len).unwrap();
                    b[..len].copy_from_slice(&data);
                    f.write_at(&b[..len], off).unwrap()
                } else {
                    f.write_at(&data, off).unwrap()
                };
                assert_eq!(n, len);
                let end = off as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
            } else {
                let mut b = f.aligned_buffer(len + 1).unwrap();
                let buf = if aligned {
                    &mut b[..len]
                } else {
                    &mut b[1..len + 1]
                };
                let n = f.read_at(buf, off).unwrap();
                let want = model.len().saturating_sub(off as usize).min(len);
                assert_eq!(n, want, "{policy} step {step}: read {len} at {off}");
                let from = (off as usize).min(model.len());
                assert!(
                    buf[..n] == model[from..from + n],
                    "{policy} step {step}: read {len} at {off}"
                );
            }
            cursor = off + len as u64;
            assert_eq!(f.len().unwrap(), model.len() as u64, "{policy} step {step}");
        }
        f.close().unwrap();
        let got = std::fs::read(&p).unwrap();
        assert_eq!(got.len(), model.len(), "{policy}");
        assert!(got == model, "{policy}: contents differ");
        // std::fs::read just cached it: drop that, then check what our file left.
        assert_eq!(
            cached_after_dropping_reader(&p, &got),
            0,
            "{policy}: nothing of ours cached"
        );
    }
}

/// The check above reads the file through the cache; the pages this test cached are dropped
/// again with a fresh descriptor (never through the file under test).
fn cached_after_dropping_reader(p: &Path, _data: &[u8]) -> u64 {
    let f = std::fs::File::open(p).unwrap();
    sys::fadvise(f.as_fd(), 0, 0, Advice::DontNeed).unwrap();
    cached(p)
}

#[test]
fn cold_reads_leave_nothing_cached_and_keep_what_was() {
    let dir = scratch();
    let mut rng = Rng(7);
    let data = rng.bytes((9 << 20) + 12345);
    for policy in POLICIES {
        let p = dir.path().join(format!("cold-{policy}"));
        cold_file(&p, &data);
        // Sequential reads of an unaligned size into an unaligned buffer, then one large read
        // into an aligned buffer (straight to the file).
        let mut f = open(&p, OpenMode::read(), policy);
        let mut got = Vec::with_capacity(data.len());
        let mut buf = vec![0u8; 100_001];
        loop {
            let n = f.read_at(&mut buf[1..], got.len() as u64).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[1..1 + n]);
        }
        assert!(got == data, "{policy}");
        let mut big = f.aligned_buffer(data.len()).unwrap();
        assert_eq!(f.read_at(&mut big, 0).unwrap(), data.len());
        assert!(big[..data.len()] == data[..]);
        assert_eq!(cached(&p), 0, "{policy}: read leaves no pages");
        drop(f);

        // Pages someone else had cached stay cached (the buffered policies drop only theirs).
        let pre = 1 << 20;
        let g = std::fs::File::open(&p).unwrap();
        sys::fadvise(g.as_fd(), 0, 0, Advice::Random).unwrap(); // no readahead beyond
        let mut head = vec![0u8; pre as usize];
        assert_eq!(sys::pread(g.as_fd(), &mut head, 0).unwrap(), head.len());
        assert_eq!(cached(&p), pre);
        let mut f = open(&p, OpenMode::read(), policy);
        let mut buf = vec![0u8; 3 << 20];
        assert_eq!(f.read_at(&mut buf, 12345).unwrap(), buf.len());
        assert!(buf[..] == data[12345..12345 + buf.len()]);
        // All of them but what the kernel itself may have taken meanwhile: DAMON pageout
        // runs on these machines and took 2 of these 256 pages once in CI (a policy that
        // dropped pages cached before would drop whole runs of them).
        let first = sys::cachestat(g.as_fd(), 0, pre).unwrap().cache * sys::page_size();
        assert!(
            first <= pre && first >= pre * 99 / 100,
            "{policy}: pages cached before stay: {first} of {pre}"
        );
        assert_eq!(cached(&p), first, "{policy}: and nothing else");
    }
}

/// Sequential writes of odd sizes: the file never holds more than what was written (no
/// padding, not even before close), and ends exactly at the written length, uncached.
#[test]
fn sequential_writes_leave_exactly_the_written_length() {
    let dir = scratch();
    let mut rng = Rng(11);
    for policy in POLICIES {
        let p = dir.path().join(format!("seq-{policy}"));
        let mut f = open(&p, OpenMode::write(), policy);
        let mut all = Vec::new();
        while all.len() < (9 << 20) + 3 {
            let n = 1 + rng.below(200_000) as usize;
            let piece = rng.bytes(n);
            assert_eq!(f.write_at(&piece, all.len() as u64).unwrap(), piece.len());
            all.extend_from_slice(&piece);
            let on_disk = sys::stat_path(&p, true).unwrap().size;
            assert!(
                on_disk <= all.len() as u64,
                "{policy}: {on_disk} > {}",
                all.len()
            );
        }
        // One more, of a few bytes, through sync: then on disk exactly.
        f.write_at(b"end", all.len() as u64).unwrap();
        all.extend_from_slice(b"end");
        f.sync().unwrap();
        assert_eq!(sys::stat_path(&p, true).unwrap().size, all.len() as u64);
        assert_eq!(cached(&p), 0, "{policy}: synced pages dropped");
        f.close().unwrap();
        assert_eq!(sys::stat_path(&p, true).unwrap().size, all.len() as u64);
        assert_eq!(cached(&p), 0, "{policy}: nothing cached after close");
        assert!(std::fs::read(&p).unwrap() == all, "{policy}");

        // Append mode writes at the end whatever the offset; set_len cuts.
        let mut f = open(&p, OpenMode::from_fopen("a").unwrap(), policy);
        f.write_at(b"+tail", 0).unwrap();
        assert_eq!(f.len().unwrap(), all.len() as u64 + 5);
        f.set_len(all.len() as u64 - 1000).unwrap();
        f.close().unwrap();
        let got = std::fs::read(&p).unwrap();
        assert!(got[..] == all[..all.len() - 1000], "{policy}");
        assert_eq!(cached_after_dropping_reader(&p, &got), 0);
    }
}

/// An unmounted-on-drop tmpfs in a temporary directory.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount() -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64m", "pagewise-dio-test"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting a tmpfs (tests run as root here)");
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

#[test]
fn tmpfs_falls_back_and_says_so() {
    let fs = Tmpfs::mount();
    let p = fs.0.path().join("f");
    let mut f =
        DirectFile::open(&p, OpenMode::from_fopen("w+").unwrap(), CachePolicy::Direct).unwrap();
    assert_eq!(f.policy(), CachePolicy::DropBehind);
    let n = f.notice().unwrap().to_string();
    assert!(!n.contains('\n'), "one line: {n}");
    for part in [
        p.to_str().unwrap(),
        "O_DIRECT refused",
        "RWF_DONTCACHE) refused",
        "drop-behind",
        "tmpfs keeps",
    ] {
        assert!(n.contains(part), "{part:?} in {n}");
    }
    let data = Rng(3).bytes(100_003);
    f.write_at(&data, 5).unwrap();
    let mut back = vec![0u8; data.len() + 10];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), data.len() + 5);
    assert!(back[5..data.len() + 5] == data[..] && back[..5] == [0; 5]);
    f.close().unwrap();
    let f = DirectFile::open(&p, OpenMode::read(), CachePolicy::DropBehind).unwrap();
    assert!(f.notice().unwrap().contains("tmpfs keeps"));
    assert!(!f.notice().unwrap().contains("refused"));
}

/// Writes that start past the end of the file, under every policy, on a disk filesystem and
/// on tmpfs: the gap reads as zeros (not as the end of the file) through the file itself, and
/// fstat gives the write's end at once, as after a plain pwrite; the bytes on disk agree.
#[test]
fn writes_past_the_end_leave_a_gap_of_zeros_and_the_size_at_once() {
    let disk = scratch();
    let shm = Tmpfs::mount();
    // (bytes in the file before, where the write starts, its length): unaligned and aligned
    // starts, a gap inside one block, short and staged writes, one aligned and straight.
    let cases: [(usize, u64, usize); 5] = [
        (0, 10_000, 4),
        (100, 200, 5),
        (5000, (3 << 20) + 17, 70_000),
        (0, 8192, 5000),
        (777, 1 << 20, 1 << 20),
    ];
    for (fs, dir) in [("disk", disk.path()), ("tmpfs", shm.0.path())] {
        for policy in POLICIES {
            for (i, &(before, at, len)) in cases.iter().enumerate() {
                let what = format!("{fs} {policy} case {i} ({before} bytes, write {len} at {at})");
                let p = dir.join(format!("gap-{policy}-{i}"));
                let mut rng = Rng(100 + i as u64);
                let head = rng.bytes(before);
                if fs == "disk" {
                    cold_file(&p, &head);
                } else {
                    std::fs::write(&p, &head).unwrap();
                }
                let mut f = DirectFile::open(&p, rw(), policy).unwrap();
                let data = rng.bytes(len);
                let mut src = f.aligned_buffer(len).unwrap();
                src[..len].copy_from_slice(&data);
                assert_eq!(f.write_at(&src[..len], at).unwrap(), len, "{what}");
                let end = at + len as u64;
                assert_eq!(sys::fstat(f.as_fd()).unwrap().size, end, "{what}: fstat");
                assert_eq!(f.len().unwrap(), end, "{what}");
                let mut back = vec![0xAAu8; at as usize];
                assert_eq!(f.read_at(&mut back, 0).unwrap(), at as usize, "{what}: gap");
                assert!(back[..before] == head[..], "{what}: head");
                assert!(back[before..].iter().all(|&b| b == 0), "{what}: zeros");
                let mut tail = vec![0u8; len + 10];
                assert_eq!(f.read_at(&mut tail, at).unwrap(), len, "{what}");
                assert!(tail[..len] == data[..], "{what}: data");
                f.close().unwrap();
                let mut want = head.clone();
                want.resize(at as usize, 0);
                want.extend_from_slice(&data);
                assert_eq!(sys::stat_path(&p, true).unwrap().size, end, "{what}");
                if fs == "disk" {
                    assert_eq!(cached(&p), 0, "{what}: nothing of ours cached");
                }
                assert!(std::fs::read(&p).unwrap() == want, "{what}: file");
                std::fs::remove_file(&p).unwrap();
            }
        }
    }
}

/// Offsets and lengths past what the kernel takes, huge buffers: errors naming the path and
/// the call, never a panic, an abort or a fallback to another policy.
#[test]
fn impossible_offsets_and_sizes_are_errors() {
    let dir = scratch();
    let p = dir.path().join("f");
    std::fs::write(&p, b"0123456789").unwrap();
    let max = i64::MAX as u64;
    for policy in POLICIES {
        let mut f = open(&p, rw(), policy);
        for (off, len) in [(u64::MAX, 1), (max, 1), (max - 3, 10), (1 << 63, 4096)] {
            let e = f.read_at(&mut vec![0u8; len], off).unwrap_err();
            assert_eq!(
                errno(&e),
                Some(libc::EINVAL),
                "{policy} read {len} at {off}: {e}"
            );
            assert_eq!(failure(&e).unwrap().op, Op::Pread);
            assert!(e.to_string().starts_with(p.to_str().unwrap()), "{e}");
            let e = f.write_at(&vec![7u8; len], off).unwrap_err();
            assert_eq!(
                errno(&e),
                Some(libc::EINVAL),
                "{policy} write {len} at {off}: {e}"
            );
            assert_eq!(failure(&e).unwrap().op, Op::Pwrite);
        }
        // At the limit itself a read is the end of the file; a write is too large for any
        // file (its last block would cross the limit).
        assert_eq!(f.read_at(&mut [0u8; 3], max - 3).unwrap(), 0);
        assert_eq!(f.read_at(&mut [0u8; 3], max - 5000).unwrap(), 0);
        let e = f.write_at(b"abc", max - 3).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EFBIG), "{e}");
        assert_eq!(failure(&e).unwrap().op, Op::Pwrite);
        let e = f.set_len(u64::MAX).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EINVAL), "{e}");
        let e = f.aligned_buffer(usize::MAX - 10).unwrap_err();
        assert_eq!(errno(&e), Some(libc::ENOMEM), "{e}");
        let e = f.aligned_buffer(1 << 62).unwrap_err();
        assert_eq!(errno(&e), Some(libc::ENOMEM), "{e}");
        assert_eq!(f.policy(), policy, "no fallback: {:?}", f.notice());
        f.close().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"0123456789");
    }
}
