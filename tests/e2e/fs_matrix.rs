//! The file-system and environment matrix: every measuring verb on each file system users run
//! (ext4, XFS, btrfs and btrfs compress=zstd, tmpfs, overlayfs lower-only / copied-up / new,
//! squashfs, erofs, FUSE through bindfs), each on a loop device or mount made here and undone on
//! drop (also when a check fails), and `run` in Docker's default capability set and without
//! any capability. Every figure pagewise prints is held against the kernel's for the real
//! file: cachestat(2) on a descriptor of the file that holds the pages (overlayfs: the upper
//! or lower file; FUSE: the backing file bindfs reads).
//!
//! The table it prints (`cargo test --test fs_matrix -- --nocapture`) is docs/filesystems.md's support
//! table. A cell is `ok`, or `ok (unknown)` where pagewise says it cannot know (FUSE) — never
//! a figure the kernel does not give.

use crate::common::*;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Size of each test file: 16 MiB (4096 pages; 1% is 41 pages).
const SIZE: usize = 16 << 20;

/// Something made for one file system, undone on drop in reverse order.
enum Undo {
    Umount(PathBuf),
    Detach(String),
}

impl Drop for Undo {
    fn drop(&mut self) {
        match self {
            Undo::Umount(p) => {
                // io_uring rings (load's reads) release their files on a kernel worker after
                // the process exits: the mount can be busy for a moment.
                for _ in 0..40 {
                    let ok = Command::new("umount")
                        .arg(&*p)
                        .stderr(std::process::Stdio::null())
                        .status()
                        .is_ok_and(|s| s.success());
                    if ok {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                eprintln!("{} still busy after 2 s: detached lazily", p.display());
                let _ = Command::new("umount").arg("-l").arg(&*p).status();
            }
            Undo::Detach(d) => {
                let _ = Command::new("losetup").args(["-d", d.as_str()]).status();
            }
        }
    }
}

/// One file system under test: the file pagewise is pointed at, and the file whose pages the
/// kernel really holds (the same file but on overlayfs and FUSE).
struct Case {
    name: &'static str,
    /// The file the verbs are given.
    file: PathBuf,
    /// The file holding the pages (cachestat's ground truth).
    real: PathBuf,
    /// pagewise must say `unknown` here (the pages sit where it cannot see them).
    unknown: bool,
    /// tmpfs: the pages are the file itself (no backing store): nothing can evict them.
    shmem: bool,
    /// Mounts and loop devices, undone last-first.
    undo: Vec<Undo>,
}

impl Drop for Case {
    fn drop(&mut self) {
        while let Some(u) = self.undo.pop() {
            drop(u);
        }
    }
}

fn ok(c: &mut Command) -> bool {
    c.output().is_ok_and(|o| o.status.success())
}

fn sh(cmd: &str) -> bool {
    ok(Command::new("sh").args(["-c", cmd]))
}

/// A loop device over `img`, and its undo.
fn attach(img: &Path) -> (String, Undo) {
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(img)
        .output()
        .expect("losetup");
    assert!(out.status.success(), "losetup -f --show {}", img.display());
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (dev.clone(), Undo::Detach(dev))
}

fn mount(args: &[&str], at: &Path) -> Undo {
    fs::create_dir_all(at).unwrap();
    let st = Command::new("mount").args(args).arg(at).output().unwrap();
    assert!(
        st.status.success(),
        "mount {args:?} {}: {}",
        at.display(),
        String::from_utf8_lossy(&st.stderr)
    );
    Undo::Umount(at.to_path_buf())
}

/// A block file system made by `mkfs` on an image in `dir`, mounted with `opts`.
fn block_fs(dir: &Path, name: &'static str, mkfs: &[&str], opts: &str) -> Case {
    let img = dir.join(format!("{name}.img"));
    File::create(&img).unwrap().set_len(400 << 20).unwrap();
    let (prog, args) = mkfs.split_first().unwrap();
    assert!(
        ok(Command::new(prog).args(args).arg(&img)),
        "{prog} {args:?} (install-deps installs it)"
    );
    let (dev, detach) = attach(&img);
    let mnt = dir.join(name);
    let m = mount(&["-o", opts, &dev], &mnt);
    let file = mnt.join("f");
    write_file(&file, SIZE);
    Case {
        name,
        real: file.clone(),
        file,
        unknown: false,
        shmem: false,
        undo: vec![detach, m],
    }
}

/// A read-only image file system (squashfs, erofs) holding `f`, built by `build SRC IMG`.
fn image_fs(dir: &Path, name: &'static str, build: &[&str], fstype: &str) -> Case {
    let src = dir.join(format!("{name}-src"));
    fs::create_dir_all(&src).unwrap();
    write_file(&src.join("f"), SIZE);
    let img = dir.join(format!("{name}.img"));
    let (prog, args) = build.split_first().unwrap();
    let mut c = Command::new(prog);
    if *prog == "mkfs.erofs" {
        c.args(args).arg(&img).arg(&src);
    } else {
        c.arg(&src).arg(&img).args(args);
    }
    assert!(ok(&mut c), "{prog} (install-deps installs it)");
    let (dev, detach) = attach(&img);
    let mnt = dir.join(name);
    let m = mount(&["-t", fstype, "-o", "ro", &dev], &mnt);
    let file = mnt.join("f");
    Case {
        name,
        real: file.clone(),
        file,
        unknown: false,
        shmem: false,
        undo: vec![detach, m],
    }
}

/// overlayfs over directories of `dir` (on the test's own disk): `which` says where `f` is —
/// only in the lower layer, copied up (written through the overlay), or new in the overlay.
fn overlay(dir: &Path, name: &'static str, which: &str) -> Case {
    let base = dir.join(name);
    let (lower, upper, work, merged) = (
        base.join("lower"),
        base.join("upper"),
        base.join("work"),
        base.join("merged"),
    );
    for d in [&lower, &upper, &work] {
        fs::create_dir_all(d).unwrap();
    }
    if which != "new" {
        write_file(&lower.join("f"), SIZE);
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    let m = mount(&["-t", "overlay", "overlay", "-o", &opts], &merged);
    let file = merged.join("f");
    let real = match which {
        "lower" => lower.join("f"),
        "copied-up" => {
            // A metadata change copies the whole file up (data too, without metacopy).
            assert!(sh(&format!("chmod 644 '{}'", file.display())));
            upper.join("f")
        }
        _ => {
            write_file(&file, SIZE);
            upper.join("f")
        }
    };
    Case {
        name,
        file,
        real,
        unknown: false,
        shmem: false,
        undo: vec![m],
    }
}

/// tmpfs: a file whose pages are its only copy.
fn tmpfs(dir: &Path) -> Case {
    let mnt = dir.join("tmpfs");
    let m = mount(&["-t", "tmpfs", "-o", "size=64M", "tmpfs"], &mnt);
    let file = mnt.join("f");
    write_file(&file, SIZE);
    Case {
        name: "tmpfs",
        real: file.clone(),
        file,
        unknown: false,
        shmem: true,
        undo: vec![m],
    }
}

/// tmpfs's row: stat measures it, evict refuses with the reason before acting (and the pages
/// stay: they are the file), load and a copy out of it work, and the copy is cold.
fn shmem_checks(c: &Case, scratch: &Path) -> Vec<(&'static str, Result<&'static str, String>)> {
    let mut row = Vec::new();
    let all = SIZE as u64;
    row.push((
        "stat",
        match stat_cached(&c.file) {
            Some(n) if n == all && truth(c) == all => Ok("ok"),
            g => Err(format!("said {g:?}, kernel {}", truth(c))),
        },
    ));
    let out = bin().arg("evict").arg(&c.file).output().unwrap();
    let said = format!("{}{}", stdout(&out), stderr(&out));
    row.push((
        "evict",
        if said.contains("tmpfs/shmem") && truth(c) == all {
            Ok("refused: tmpfs pages are the file")
        } else {
            Err(format!("evict said: {said}; kernel {}", truth(c)))
        },
    ));
    let out = bin().arg("load").arg(&c.file).output().unwrap();
    row.push((
        "load",
        if out.status.success() && truth(c) == all {
            Ok("ok")
        } else {
            Err(format!("exit {:?}", out.status))
        },
    ));
    let dst = scratch.join("tmpfs-copy");
    let _ = fs::remove_file(&dst);
    let out = bin().arg("copy").arg(&c.file).arg(&dst).output().unwrap();
    row.push((
        "copy",
        if out.status.success()
            && truth(c) == all
            && cached(&dst) * PAGE <= all / 100
            && same(&c.file, &dst)
        {
            Ok("ok")
        } else {
            Err(format!(
                "exit {:?}, dst {}: {}",
                out.status,
                cached(&dst) * PAGE,
                stderr(&out)
            ))
        },
    ));
    let _ = fs::remove_file(&dst);
    row
}

/// FUSE: bindfs mirroring a directory; the data's pages sit in the backing file bindfs reads.
fn fuse(dir: &Path) -> Case {
    let back = dir.join("fuse-back");
    fs::create_dir_all(&back).unwrap();
    write_file(&back.join("f"), SIZE);
    let mnt = dir.join("fuse");
    fs::create_dir_all(&mnt).unwrap();
    assert!(
        ok(Command::new("bindfs").arg(&back).arg(&mnt)),
        "bindfs (install-deps installs it)"
    );
    Case {
        name: "fuse (bindfs)",
        file: mnt.join("f"),
        real: back.join("f"),
        unknown: true,
        shmem: false,
        undo: vec![Undo::Umount(mnt)],
    }
}

/// The kernel's figure for the case's real file, bytes: its pages within its size (squashfs
/// also caches the pages past the end of a file's last block, which are no data of it).
fn truth(c: &Case) -> u64 {
    resident_pages(&File::open(&c.real).unwrap(), 0, SIZE as u64) * PAGE
}

fn evict_real(c: &Case) {
    // fsync where the file system has it (squashfs and erofs say EINVAL: nothing to write).
    let f = File::open(&c.real).unwrap();
    let _ = f.sync_all();
    use std::os::fd::AsFd;
    // DONTNEED skips a page someone holds at that moment (reclaim or DAMON scanning it): a
    // full run once left one page of the overlay's lower file. A few passes, briefly apart.
    for pause in [0, 5, 20, 80] {
        std::thread::sleep(std::time::Duration::from_millis(pause));
        let advice = pagewise_core::sys::Advice::DontNeed;
        pagewise_core::sys::fadvise(f.as_fd(), 0, 0, advice).unwrap();
        if truth(c) == 0 {
            break;
        }
    }
    assert_eq!(truth(c), 0, "{}: setup evicts the real file", c.name);
}

/// Reads the whole file, then waits for the readahead still in flight to land (a page under
/// read I/O can be neither dropped nor seen by mincore).
fn read_all(p: &Path) {
    let _ = fs::read(p).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
}

/// pagewise's cached figure for `p` from `stat --json` (None: unknown).
fn stat_cached(p: &Path) -> Option<u64> {
    let out = run(bin().args(["stat", "--json"]).arg(p));
    let t = &json(&out)["total"];
    if t["unknown_files"].as_u64() != Some(0) {
        return None;
    }
    t["cached_bytes"].as_u64()
}

/// Within 1% of the file.
fn close(a: u64, b: u64) -> bool {
    a.abs_diff(b) <= SIZE as u64 / 100
}

/// `pagewise run OPTIONS --report FILE -- COMMAND` (its stdout dropped): how it ended, and its
/// report (null when it wrote none).
fn run_reported(
    c: &Case,
    scratch: &Path,
    tag: &str,
    options: &[&str],
    command: &[String],
) -> (std::process::Output, serde_json::Value) {
    let rep = scratch.join(format!("{}-{tag}.json", c.name.replace(' ', "_")));
    let out = bin()
        .arg("run")
        .args(options)
        .arg("--report")
        .arg(&rep)
        .arg("--")
        .args(command)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let r = serde_json::from_slice(&fs::read(&rep).unwrap_or_default()).unwrap_or_default();
    (out, r)
}

/// One row of checks; each returns Ok, or what differed.
fn checks(c: &Case, scratch: &Path) -> Vec<(&'static str, Result<&'static str, String>)> {
    if c.shmem {
        return shmem_checks(c, scratch);
    }
    let mut row = Vec::new();
    let unknown_ok = |got: Option<u64>| -> Result<&'static str, String> {
        match got {
            None => Ok("ok (unknown)"),
            Some(n) => Err(format!("said {n} B where it cannot know (FUSE)")),
        }
    };

    // stat after a full read.
    evict_real(c);
    read_all(&c.file);
    let got = stat_cached(&c.file);
    row.push((
        "stat",
        if c.unknown {
            unknown_ok(got)
        } else {
            match got {
                Some(n) if close(n, truth(c)) => Ok("ok"),
                g => Err(format!("said {g:?}, kernel {}", truth(c))),
            }
        },
    ));

    // evict.
    let out = bin().arg("evict").arg(&c.file).output().unwrap();
    row.push((
        "evict",
        if c.unknown {
            let said = format!("{}{}", stdout(&out), stderr(&out));
            if said.contains("unknown") {
                Ok("ok (unknown)")
            } else {
                Err(format!("evict did not say unknown: {said}"))
            }
        } else if out.status.success() && truth(c) == 0 {
            Ok("ok")
        } else {
            Err(format!("exit {:?}, kernel {} left", out.status, truth(c)))
        },
    ));

    // load.
    if !c.unknown {
        evict_real(c);
        let out = bin().arg("load").arg(&c.file).output().unwrap();
        row.push((
            "load",
            if out.status.success() && truth(c) >= SIZE as u64 * 99 / 100 {
                Ok("ok")
            } else {
                Err(format!("exit {:?}, kernel {}", out.status, truth(c)))
            },
        ));
    }

    // run -- cat f: what cat brought in is dropped again.
    if !c.unknown {
        evict_real(c);
        let cat = vec!["cat".to_string(), c.file.display().to_string()];
        let (out, r) = run_reported(c, scratch, "run", &[], &cat);
        let left = truth(c);
        row.push((
            "run",
            if out.status.success()
                && left <= SIZE as u64 * 2 / 100
                && r["left_bytes"].as_u64().is_some_and(|l| close(l, left))
            {
                Ok("ok")
            } else {
                Err(format!(
                    "exit {:?}, kernel {left} left, report {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ))
            },
        ));
    }

    // record (cold) -> load --trace -> evict --trace.
    if !c.unknown {
        evict_real(c);
        let trace = scratch.join(format!("{}.trace", c.name.replace(' ', "_")));
        let rec = bin()
            .arg("record")
            .arg("-o")
            .arg(&trace)
            .args(["--", "cat"])
            .arg(&c.file)
            .stdout(std::process::Stdio::null())
            .output()
            .unwrap();
        // replay (disk order) reads the traced pages into the cache again.
        let replay = bin().arg("replay").arg(&trace).output().unwrap();
        let replayed = truth(c);
        evict_real(c);
        let load = bin()
            .args(["load", "--trace"])
            .arg(&trace)
            .output()
            .unwrap();
        let loaded = truth(c);
        let ev = bin()
            .args(["evict", "--trace"])
            .arg(&trace)
            .output()
            .unwrap();
        let left = truth(c);
        row.push((
            "record/replay/trace",
            if rec.status.success()
                && replay.status.success()
                && replayed >= SIZE as u64 * 99 / 100
                && load.status.success()
                && ev.status.success()
                && loaded >= SIZE as u64 * 99 / 100
                && left == 0
            {
                Ok("ok")
            } else {
                Err(format!(
                    "record {:?} replay {:?} ({replayed}) load {:?} ({loaded}) evict {:?} ({left}): {}{}",
                    rec.status.code(),
                    replay.status.code(),
                    load.status.code(),
                    ev.status.code(),
                    String::from_utf8_lossy(&load.stderr),
                    String::from_utf8_lossy(&ev.stderr)
                ))
            },
        ));
    }

    // copy of a half-cached source: the pages cached before stay, the destination is cold.
    if !c.unknown {
        // Half cached: all read, the second half dropped again.
        evict_real(c);
        read_all(&c.file);
        let real = File::open(&c.real).unwrap();
        use std::os::fd::AsFd;
        let half = SIZE as u64 / 2;
        pagewise_core::sys::fadvise(
            real.as_fd(),
            half,
            half,
            pagewise_core::sys::Advice::DontNeed,
        )
        .unwrap();
        let before = truth(c);
        assert!(
            close(before, half),
            "{}: setup half cached: {before}",
            c.name
        );
        let dst = scratch.join(format!("{}-copy", c.name.replace(' ', "_")));
        let _ = fs::remove_file(&dst);
        let out = bin().arg("copy").arg(&c.file).arg(&dst).output().unwrap();
        let after = truth(c);
        row.push((
            "copy",
            if out.status.success()
                && after * 100 >= before * 99
                && cached(&dst) * PAGE <= SIZE as u64 / 100
                && same(&c.file, &dst)
            {
                Ok("ok")
            } else {
                Err(format!(
                    "exit {:?}, source {before} -> {after}, dst {}: {}",
                    out.status.code(),
                    cached(&dst) * PAGE,
                    String::from_utf8_lossy(&out.stderr)
                ))
            },
        ));
        let _ = fs::remove_file(&dst);
    }

    // sync (rsync's layout: the file into a directory, rsync -a's attributes) of a cold
    // source: exact, and neither side left cached.
    if !c.unknown {
        evict_real(c);
        let into = scratch.join(format!("{}-sync", c.name.replace(' ', "_")));
        let _ = fs::remove_dir_all(&into);
        let mut dir_arg = into.clone().into_os_string();
        dir_arg.push("/");
        let out = bin()
            .args(["sync", "-a"])
            .arg(&c.file)
            .arg(&dir_arg)
            .output()
            .unwrap();
        let dst = into.join(c.file.file_name().unwrap());
        let left = truth(c);
        row.push((
            "sync",
            if out.status.success()
                && left <= SIZE as u64 / 100
                && dst.exists()
                && cached(&dst) * PAGE <= SIZE as u64 / 100
                && same(&c.file, &dst)
            {
                Ok("ok")
            } else {
                Err(format!(
                    "exit {:?}, source left {left}, dst {}: {}",
                    out.status.code(),
                    if dst.exists() { cached(&dst) * PAGE } else { 0 },
                    String::from_utf8_lossy(&out.stderr)
                ))
            },
        ));
        let _ = fs::remove_dir_all(&into);
    }

    // run --assist: an mmap reader touching every 16th page, no readahead of its own; what
    // was prefetched for it is dropped too.
    if !c.unknown {
        evict_real(c);
        let mut reader = toucher(scratch);
        reader.push(c.file.display().to_string());
        reader.extend((0..SIZE as u64 / PAGE).step_by(16).map(|p| p.to_string()));
        let (out, r) = run_reported(c, scratch, "assist", &["--assist"], &reader);
        let left = truth(c);
        let prefetches = r["assist"]["prefetches"].as_u64().unwrap_or(0);
        row.push((
            "run --assist",
            if out.status.success() && left <= SIZE as u64 * 2 / 100 && prefetches > 0 {
                Ok("ok")
            } else {
                Err(format!(
                    "exit {:?}, {prefetches} prefetches, kernel {left} left: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ))
            },
        ));
    }

    // load --lock: locked for a second, then left cached.
    if !c.unknown {
        evict_real(c);
        let out = bin()
            .args(["load", "--lock", "--for", "1s"])
            .arg(&c.file)
            .output()
            .unwrap();
        let got = truth(c);
        row.push((
            "load --lock",
            if out.status.success() && got >= SIZE as u64 * 99 / 100 {
                Ok("ok")
            } else {
                Err(format!(
                    "exit {:?}, kernel {got}: {}",
                    out.status,
                    stderr(&out)
                ))
            },
        ));
    }

    // copy as uid 65534 of a cold source it does not own: cachestat refuses it (EPERM) and
    // mincore would lie, so what it reads is dropped behind as if nothing was cached before;
    // the summary says the residency is unknown.
    if !c.unknown {
        evict_real(c);
        let dir = scratch.join(format!("{}-nobody", c.name.replace(' ', "_")));
        fs::create_dir_all(&dir).unwrap();
        assert!(sh(&format!("chown 65534 '{}'", dir.display())));
        open_up_ancestors(&dir);
        let out = as_nobody()
            .arg("copy")
            .arg(&c.file)
            .arg(dir.join("f"))
            .output()
            .unwrap();
        let left = truth(c);
        let said = stderr(&out);
        row.push((
            "copy as 65534",
            if out.status.success() && left <= SIZE as u64 / 100 && said.contains("unknown") {
                Ok("ok (source unknown, dropped)")
            } else {
                Err(format!("exit {:?}, kernel {left} left: {said}", out.status))
            },
        ));
        let _ = fs::remove_dir_all(&dir);
    }

    // top: a reader holding the file open while top counts an interval; the file's row is
    // named (through the inode, or through the reader's /proc/PID/fd where the inode number
    // alone cannot: XFS, btrfs) and its added bytes are the file's.
    if !c.unknown {
        evict_real(c);
        let top = bin()
            .args([
                "top",
                "--by",
                "file",
                "--once",
                "--interval",
                "2s",
                "--json",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let reader = format!(
            "import time\nf = open({:?}, 'rb')\nf.read()\ntime.sleep(2.5)\n",
            c.file.display().to_string()
        );
        let mut r = Command::new("python3")
            .args(["-c", &reader])
            .spawn()
            .unwrap();
        let out = top.wait_with_output().unwrap();
        let _ = r.wait();
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let names = [c.file.display().to_string(), c.real.display().to_string()];
        let added: u64 = j["intervals"][0]["files"]["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| {
                r["path"]
                    .as_str()
                    .is_some_and(|p| names.iter().any(|n| n == p))
            })
            .filter_map(|r| r["added_bytes"].as_u64())
            .sum();
        row.push((
            "top",
            if out.status.success() && close(added, SIZE as u64) {
                Ok("ok")
            } else {
                Err(format!(
                    "exit {:?}, {added} added under its name: {}",
                    out.status,
                    stderr(&out)
                ))
            },
        ));
    }

    // stat as uid 65534: a file it owns is measured; one it neither owns nor may write is
    // `unknown` (cachestat refuses it, mincore would call it all cached) — never a number.
    if !c.unknown {
        evict_real(c);
        read_all(&c.file);
        // Not through overlayfs: a chown there copies a lower file up, and the pages with it.
        let owned = !c.name.starts_with("ovl")
            && sh(&format!("chown 65534 '{}' 2>/dev/null", c.file.display()));
        open_up_ancestors(&c.file);
        let out = as_nobody()
            .args(["stat", "--json"])
            .arg(&c.file)
            .output()
            .unwrap();
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let t = &j["total"];
        let unknown = t["unknown_files"].as_u64() == Some(1);
        let said = t["cached_bytes"].as_u64();
        row.push((
            "stat as 65534",
            match (owned, unknown, said) {
                (true, false, Some(n)) if close(n, truth(c)) => Ok("ok"),
                (false, true, _) => Ok("ok (unknown: not its file)"),
                _ => Err(format!(
                    "owned {owned}, unknown {unknown}, said {said:?}, kernel {}: {}",
                    truth(c),
                    stderr(&out)
                )),
            },
        ));
        let _ = sh(&format!("chown 0 '{}' 2>/dev/null", c.file.display()));
    }
    row
}

/// `run -- cat f` on XFS in an environment: Docker's default capability set (setpriv's
/// bounding set; io_uring is not used by run), no capabilities at all.
fn env_run(c: &Case, name: &str, caps: &str) -> Result<&'static str, String> {
    evict_real(c);
    let out = Command::new("setpriv")
        .args(["--inh-caps=-all", &format!("--bounding-set=-all{caps}")])
        .arg(env!("CARGO_BIN_EXE_pagewise"))
        .args(["run", "--", "cat"])
        .arg(&c.file)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let left = truth(c);
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() && left <= SIZE as u64 * 2 / 100 {
        Ok("ok")
    } else if !out.status.success() && err.contains("tracing") && left == SIZE as u64 {
        // A documented refusal before acting: no tracing without privileges.
        Ok("refused: no tracing")
    } else {
        Err(format!(
            "{name}: exit {:?}, kernel {left} left: {err}",
            out.status
        ))
    }
}

/// Makes one file system's case.
type Maker<'a> = Box<dyn Fn() -> Case + 'a>;

const DOCKER_CAPS: &str = ",+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,\
+net_bind_service,+net_raw,+sys_chroot,+mknod,+audit_write,+setfcap";

#[test]
fn every_verb_agrees_with_the_kernel_on_every_file_system() {
    if !require_root("loop devices and mounts") || !can_trace() {
        return;
    }
    for tool in [
        "mkfs.xfs",
        "mkfs.btrfs",
        "mksquashfs",
        "mkfs.erofs",
        "bindfs",
        "losetup",
    ] {
        if !require(
            on_path(tool),
            &format!("{tool} (./install-deps --deps-only installs it)"),
        ) {
            return;
        }
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let scratch = dir.path().join("scratch");
    fs::create_dir(&scratch).unwrap();
    let d = dir.path();
    let makers: Vec<(&str, Maker)> = vec![
        (
            "ext4",
            Box::new(|| block_fs(d, "ext4", &["mkfs.ext4", "-q", "-F"], "rw")),
        ),
        (
            "xfs",
            Box::new(|| block_fs(d, "xfs", &["mkfs.xfs", "-q", "-f"], "rw")),
        ),
        (
            "btrfs",
            Box::new(|| block_fs(d, "btrfs", &["mkfs.btrfs", "-q", "-f"], "rw")),
        ),
        (
            "btrfs zstd",
            Box::new(|| {
                block_fs(
                    d,
                    "btrfs-zstd",
                    &["mkfs.btrfs", "-q", "-f"],
                    "compress=zstd",
                )
            }),
        ),
        (
            "overlay lower",
            Box::new(|| overlay(d, "ovl-lower", "lower")),
        ),
        (
            "overlay copied-up",
            Box::new(|| overlay(d, "ovl-up", "copied-up")),
        ),
        ("overlay new", Box::new(|| overlay(d, "ovl-new", "new"))),
        (
            "squashfs",
            Box::new(|| {
                image_fs(
                    d,
                    "squashfs",
                    &["mksquashfs", "-quiet", "-noappend"],
                    "squashfs",
                )
            }),
        ),
        (
            "erofs",
            Box::new(|| image_fs(d, "erofs", &["mkfs.erofs", "--quiet"], "erofs")),
        ),
        ("tmpfs", Box::new(|| tmpfs(d))),
        ("fuse (bindfs)", Box::new(|| fuse(d))),
    ];
    let mut table = vec![];
    let mut failed = vec![];
    for (name, make) in &makers {
        let c = make();
        for (verb, r) in checks(&c, &scratch) {
            match r {
                Ok(cell) => table.push((name.to_string(), verb.to_string(), cell.to_string())),
                Err(why) => {
                    table.push((name.to_string(), verb.to_string(), "FAIL".into()));
                    failed.push(format!("{name} {verb}: {why}"));
                }
            }
        }
        if *name == "xfs" {
            for (env, caps) in [("docker caps", DOCKER_CAPS), ("no caps", "")] {
                match env_run(&c, env, caps) {
                    Ok(cell) => table.push((format!("xfs, {env}"), "run".into(), cell.into())),
                    Err(why) => {
                        table.push((format!("xfs, {env}"), "run".into(), "FAIL".into()));
                        failed.push(why);
                    }
                }
            }
        }
    }
    eprintln!("\nfile system         verb          result");
    for (fs, verb, cell) in &table {
        eprintln!("{fs:<19} {verb:<13} {cell}");
    }
    assert!(failed.is_empty(), "matrix failures:\n{}", failed.join("\n"));
}
