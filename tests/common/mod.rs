//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use pagewise_core::sys;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Output};

/// The pagewise binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pagewise"))
}

/// Where tests keep their files: the build's real filesystem (not tmpfs, whose pages cannot be
/// evicted), or PAGEWISE_TEST_TMPDIR (the kernel matrix's ext4 disk inside a guest, where the
/// build's directory is a read-only 9p mount).
pub fn tmp_root() -> std::path::PathBuf {
    std::env::var_os("PAGEWISE_TEST_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_TARGET_TMPDIR").into())
}

/// A temp dir under [`tmp_root`].
pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(tmp_root()).unwrap()
}

/// The first line a child process writes to this pipe (blocks until it does).
pub fn first_line(r: impl std::io::Read) -> String {
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(r), &mut line).unwrap();
    line
}

/// Writes `size` bytes of xorshift noise (distinct per size), freshly dirty in the cache.
pub fn write_file(p: &Path, size: usize) {
    let mut f = File::create(p).unwrap();
    let mut x: u64 = 0x9E3779B97F4A7C15 ^ size as u64;
    let mut buf = Vec::with_capacity(size + 8);
    while buf.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf.extend_from_slice(&x.to_le_bytes());
    }
    buf.truncate(size);
    f.write_all(&buf).unwrap();
}

/// Makes a FIFO at `p` (mkfifo(1)) and returns its path.
pub fn mkfifo(p: &Path) -> std::path::PathBuf {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
    p.to_path_buf()
}

/// Runs a command, echoing what it printed (shown when a test fails).
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    eprintln!(
        "--- {:?}\nstatus {:?}\nstdout:\n{}\nstderr:\n{}",
        cmd,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The kernel's view: cachestat of the whole file (Linux 6.5+; fails the test elsewhere: use
/// [`cached`] / [`resident_pages`] for residency, [`dirty_pages`] where dirty counts may be
/// unknown).
pub fn cs(p: &Path) -> sys::CacheStat {
    let f = File::open(p).unwrap();
    sys::cachestat(f.as_fd(), 0, 0).unwrap()
}

/// True when this kernel has cachestat(2) (6.5+).
pub fn has_cachestat() -> bool {
    let f = File::open("/proc/self/exe").unwrap();
    !matches!(sys::cachestat(f.as_fd(), 0, 1), Err(e) if e.raw_os_error() == Some(libc::ENOSYS))
}

/// Cached pages of `[off, off+len)` of an open file (`len` 0: to the end) as the kernel shows
/// them: cachestat, or mmap+mincore where the kernel has no cachestat (before 6.5). `off` must
/// be page aligned. Tests run as root or as the file's owner, so mincore tells the truth.
pub fn resident_pages(f: &File, off: u64, len: u64) -> u64 {
    match sys::cachestat(f.as_fd(), off, len) {
        Ok(c) => c.cache,
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            let size = f.metadata().unwrap().len();
            let end = if len == 0 {
                size
            } else {
                (off + len).min(size)
            };
            if end <= off {
                return 0;
            }
            sys::mincore_count(f.as_fd(), off, end - off, None).unwrap()
        }
        Err(e) => panic!("cachestat: {e}"),
    }
}

/// Cached pages of the whole file, as the kernel shows them ([`resident_pages`]).
pub fn cached(p: &Path) -> u64 {
    resident_pages(&File::open(p).unwrap(), 0, 0)
}

/// Dirty pages of the whole file from cachestat; None where the kernel has no cachestat.
pub fn dirty_pages(p: &Path) -> Option<u64> {
    let f = File::open(p).unwrap();
    match sys::cachestat(f.as_fd(), 0, 0) {
        Ok(c) => Some(c.dirty),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => None,
        Err(e) => panic!("cachestat: {e}"),
    }
}

/// Writes the file back and drops it from the cache (test setup, not the code under test).
pub fn sync_and_evict(p: &Path) {
    let f = File::open(p).unwrap();
    f.sync_all().unwrap();
    sys::fadvise(f.as_fd(), 0, 0, sys::Advice::DontNeed).unwrap();
}

/// A helper that maps a file with MADV_RANDOM (no readahead) and touches the given pages:
/// compiled from C when a compiler is there, else the same in Python.
pub fn toucher(dir: &Path) -> Vec<String> {
    let src = dir.join("touch.c");
    fs::write(
        &src,
        r#"#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDONLY);
    struct stat st; fstat(fd, &st);
    volatile unsigned char *m = mmap(0, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    madvise((void *)m, st.st_size, MADV_RANDOM);
    unsigned s = 0;
    for (int i = 2; i < argc; i++) s += m[atol(argv[i]) * 4096];
    return s == 12345678 ? 1 : 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("touch");
    let ok = Command::new("cc")
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        return vec![exe.to_string_lossy().into_owned()];
    }
    eprintln!("note: no C compiler; using the Python toucher");
    let py = dir.join("touch.py");
    fs::write(
        &py,
        "import mmap,sys\nf=open(sys.argv[1],'rb')\nm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\nm.madvise(mmap.MADV_RANDOM)\ns=sum(m[int(p)*4096] for p in sys.argv[2:])\n",
    )
    .unwrap();
    vec!["python3".into(), py.to_string_lossy().into_owned()]
}

/// Compiles a small C program (statically when `static_link`); None without a C compiler.
pub fn compile_c(
    dir: &Path,
    name: &str,
    src: &str,
    static_link: bool,
) -> Option<std::path::PathBuf> {
    let c = dir.join(format!("{name}.c"));
    fs::write(&c, src).unwrap();
    let exe = dir.join(name);
    let mut cmd = Command::new("cc");
    cmd.arg("-O2");
    if static_link {
        cmd.arg("-static");
    }
    let ok = cmd
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(exe)
}

/// The capability gate every test uses: true when `ok`. When not, the test fails, naming what
/// is missing (`./install-deps` installs it; root is needed for tracing, mounts and setpriv) —
/// unless PAGEWISE_ALLOW_SKIP=1 is set, when it prints `skipped: WHY` and the caller returns.
/// A machine set up by the README runs every test: nothing is skipped silently.
pub fn require(ok: bool, why: &str) -> bool {
    if ok {
        return true;
    }
    if std::env::var_os("PAGEWISE_ALLOW_SKIP").is_some_and(|v| v == "1") {
        eprintln!("skipped: {why}");
        return false;
    }
    panic!("cannot run: {why} (run ./install-deps as root, or set PAGEWISE_ALLOW_SKIP=1 to skip)");
}

/// Gate for tests that need root (tracing, mounts, switching users).
pub fn require_root(what: &str) -> bool {
    require(sys::euid() == 0, &format!("{what} needs root"))
}

/// Runs pagewise as user nobody (65534) with setpriv(1).
pub fn as_nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        env!("CARGO_BIN_EXE_pagewise"),
    ]);
    c
}
