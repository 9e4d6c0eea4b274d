//! pagewise-slowdisk: serves one file, `disk.img`, over FUSE, each read and write taking as
//! long as the chosen disk model says (src/model.rs). `bench/slowdisk` attaches that file as a
//! loop device with direct I/O and puts ext4 on it, so the page cache, readahead, FIEMAP and
//! the tracepoints above it behave as on real hardware.
//!
//! ```text
//! pagewise-slowdisk --image BACKING --size BYTES [--profile hdd|cloud|cloud-fast] [--fast-flag PATH] [--log PATH] MOUNTDIR
//! ```
//!
//! - BACKING: a (sparse) file on a real filesystem holding the image's bytes; created and
//!   sized to BYTES when missing.
//! - The FUSE file is opened with FOPEN_DIRECT_IO, so the kernel keeps no page cache of it:
//!   every request the loop device sends reaches the model.
//! - Requests are served by `depth` worker threads (1 for hdd: one request at a time, in
//!   arrival order; the cloud profile's queue depth), each sleeping until its delay has passed
//!   since it started serving, then replying. The model is asked under one lock, in service
//!   order, with the time service started (the cloud volume's shared throughput and IOPS).
//! - While the file `--fast-flag` exists, delays are skipped (for filling the disk quickly).
//! - `--log PATH`: one line per request served, `start_s kind offset len delay_s` (start =
//!   seconds on the model's clock, kind R or W), to see what the disk was asked and in
//!   which order (written while the fast flag is absent only).
//! - Runs in the foreground until the mount is unmounted (or it is killed).
use fuser::{
    FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyData, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request,
};
use slowdisk::model::{Disk, Profile};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

const ROOT: u64 = 1;
const IMG: u64 = 2;
const NAME: &str = "disk.img";
const TTL: Duration = Duration::from_secs(3600);

enum Job {
    Read(u64, u32, ReplyData),
    Write(u64, Vec<u8>, ReplyWrite),
}

struct SlowDisk {
    size: u64,
    jobs: Sender<Job>,
    start: SystemTime,
}

impl SlowDisk {
    fn attr(&self, ino: u64) -> FileAttr {
        let (kind, perm, nlink, size) = if ino == ROOT {
            (FileType::Directory, 0o755, 2, 0)
        } else {
            (FileType::RegularFile, 0o644, 1, self.size)
        };
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.start,
            mtime: self.start,
            ctime: self.start,
            crtime: self.start,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl Filesystem for SlowDisk {
    fn init(&mut self, _req: &Request<'_>, config: &mut fuser::KernelConfig) -> Result<(), i32> {
        // Without FUSE_ASYNC_DIO the kernel sends one direct-I/O request at a time per
        // caller, and the loop device's queue reaches the daemon serialised: the cloud
        // profile measured 1.04x for depth 32 vs depth 1 before this.
        let _ = config.add_capabilities(fuser::consts::FUSE_ASYNC_DIO);
        let _ = config.set_max_background(256);
        let _ = config.set_congestion_threshold(192);
        let _ = config.set_max_write(1 << 20);
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if parent == ROOT && name == NAME {
            reply.entry(&TTL, &self.attr(IMG), 0);
        } else {
            reply.error(libc::ENOENT);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match ino {
            ROOT | IMG => reply.attr(&TTL, &self.attr(ino)),
            _ => reply.error(libc::ENOENT),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if ino == IMG {
            // FOPEN_DIRECT_IO: no page cache of the image in the kernel, every request is ours.
            reply.opened(0, fuser::consts::FOPEN_DIRECT_IO);
        } else {
            reply.error(libc::EISDIR);
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock: Option<u64>,
        reply: ReplyData,
    ) {
        let offset = offset.max(0) as u64;
        let size = (size as u64).min(self.size.saturating_sub(offset)) as u32;
        let _ = self.jobs.send(Job::Read(offset, size, reply));
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock: Option<u64>,
        reply: ReplyWrite,
    ) {
        let offset = offset.max(0) as u64;
        if offset + data.len() as u64 > self.size {
            reply.error(libc::ENOSPC);
            return;
        }
        let _ = self.jobs.send(Job::Write(offset, data.to_vec(), reply));
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _data: bool, reply: ReplyEmpty) {
        // The backing file's durability is not the emulated disk's: nothing to wait for.
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        reply.statfs(self.size / 4096, 0, 0, 2, 0, 4096, 255, 4096);
    }
}

/// One worker: takes the next request, asks the model for its delay (the head moves under
/// the lock, in service order), does the I/O on the backing file, sleeps out the rest of the
/// delay, replies.
fn worker(
    rx: Arc<Mutex<Receiver<Job>>>,
    disk: Arc<Mutex<Disk>>,
    image: Arc<File>,
    fast: Option<PathBuf>,
    log: Option<Arc<Mutex<std::io::BufWriter<File>>>>,
    epoch: Instant,
) {
    loop {
        let job = match rx.lock().unwrap().recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        let started = Instant::now();
        let (offset, len) = match &job {
            Job::Read(o, n, _) => (*o, *n as u64),
            Job::Write(o, d, _) => (*o, d.len() as u64),
        };
        let delay = if fast.as_ref().is_some_and(|p| p.exists()) {
            disk.lock().unwrap().skip(offset, len);
            Duration::ZERO
        } else {
            let now = (started - epoch).as_secs_f64();
            let delay = disk.lock().unwrap().serve(now, offset, len);
            if let Some(log) = &log {
                use std::io::Write;
                let mut l = log.lock().unwrap();
                let kind = if matches!(job, Job::Read(..)) {
                    'R'
                } else {
                    'W'
                };
                let _ = writeln!(
                    l,
                    "{:.6} {kind} {offset} {len} {:.6}",
                    now,
                    delay.as_secs_f64()
                );
                let _ = l.flush();
            }
            delay
        };
        match job {
            Job::Read(o, n, reply) => {
                let mut buf = vec![0u8; n as usize];
                let r = read_full(&image, &mut buf, o);
                sleep_until(started + delay);
                match r {
                    Ok(()) => reply.data(&buf),
                    Err(e) => reply.error(e.raw_os_error().unwrap_or(libc::EIO)),
                }
            }
            Job::Write(o, data, reply) => {
                let r = image.write_all_at(&data, o);
                sleep_until(started + delay);
                match r {
                    Ok(()) => reply.written(data.len() as u32),
                    Err(e) => reply.error(e.raw_os_error().unwrap_or(libc::EIO)),
                }
            }
        }
    }
}

/// Reads `buf.len()` bytes at `off`; past the backing file's end reads zeroes.
fn read_full(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64)? {
            0 => {
                buf[done..].fill(0);
                break;
            }
            n => done += n,
        }
    }
    Ok(())
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: pagewise-slowdisk --image BACKING --size BYTES [--profile hdd|cloud|cloud-fast] [--fast-flag PATH] [--log PATH] MOUNTDIR"
    );
    std::process::exit(2);
}

/// Closes every descriptor above stderr the daemon inherited: it outlives the script that
/// started it, and must not hold that script's locks or pipes (e.g. a benchmark's
/// `flock /tmp/lock bench/slowdisk up ...` would otherwise stay locked until `down`).
fn close_inherited() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // The directory's own descriptor is among them, already closed: EBADF, harmless.
        unsafe { libc::close(fd) };
    }
}

fn main() {
    close_inherited();
    let mut image = None;
    let mut size: Option<u64> = None;
    let mut profile = Profile::named("hdd").unwrap();
    let mut fast = None;
    let mut log_path = None;
    let mut mountdir = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.to_str() {
            Some("--image") => image = Some(PathBuf::from(val())),
            Some("--size") => size = val().to_str().and_then(|s| s.parse().ok()),
            Some("--profile") => {
                let v = val();
                profile = v.to_str().and_then(Profile::named).unwrap_or_else(|| {
                    eprintln!("pagewise-slowdisk: unknown profile {v:?} (hdd, cloud, cloud-fast)");
                    std::process::exit(2)
                })
            }
            Some("--fast-flag") => fast = Some(PathBuf::from(val())),
            Some("--log") => log_path = Some(PathBuf::from(val())),
            Some("-h" | "--help") => usage(),
            _ if mountdir.is_none() => mountdir = Some(PathBuf::from(a)),
            _ => usage(),
        }
    }
    let (Some(image), Some(size), Some(mountdir)) = (image, size, mountdir) else {
        usage()
    };
    // Never through a symlink, never a FIFO or device (bench/slowdisk keeps it in a directory
    // of root's own; a name planted there must not redirect root's writes).
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&image)
        .and_then(|f| match f.metadata()?.is_file() {
            true => Ok(f),
            false => Err(std::io::Error::other("not a regular file")),
        })
        .unwrap_or_else(|e| {
            eprintln!("pagewise-slowdisk: {}: open failed: {e}", image.display());
            std::process::exit(1)
        });
    if file.metadata().map(|m| m.len()).unwrap_or(0) < size {
        file.set_len(size).unwrap_or_else(|e| {
            eprintln!(
                "pagewise-slowdisk: {}: ftruncate failed: {e}",
                image.display()
            );
            std::process::exit(1)
        });
    }
    let depth = profile.depth();
    eprintln!("pagewise-slowdisk: {profile:?}, {size} bytes, {depth} worker(s)");
    let (tx, rx) = channel();
    let rx = Arc::new(Mutex::new(rx));
    let disk = Arc::new(Mutex::new(Disk::new(profile)));
    let file = Arc::new(file);
    let log = log_path.map(|p| {
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&p)
            .unwrap_or_else(|e| {
                eprintln!("pagewise-slowdisk: {}: open failed: {e}", p.display());
                std::process::exit(1)
            });
        Arc::new(Mutex::new(std::io::BufWriter::new(f)))
    });
    // The model's clock: seconds since now.
    let epoch = Instant::now();
    for _ in 0..depth {
        let (rx, disk, file, fast, log) = (
            rx.clone(),
            disk.clone(),
            file.clone(),
            fast.clone(),
            log.clone(),
        );
        thread::spawn(move || worker(rx, disk, file, fast, log, epoch));
    }
    let fs = SlowDisk {
        size,
        jobs: tx,
        start: SystemTime::now(),
    };
    let opts = [
        MountOption::FSName("pagewise-slowdisk".into()),
        MountOption::Subtype("pagewise-slowdisk".into()),
        MountOption::RW,
        MountOption::NoExec,
        MountOption::NoSuid,
        MountOption::NoDev,
    ];
    if let Err(e) = fuser::mount2(fs, &mountdir, &opts) {
        eprintln!(
            "pagewise-slowdisk: {}: mount failed: {e}",
            mountdir.display()
        );
        std::process::exit(1);
    }
}
