//! Helpers shared by the end-to-end tests: the pagewise binary (and `copy` runs), temp dirs
//! on a real filesystem, files and small trees written and evicted, the kernel's view of the
//! cache (cachestat or mincore), a compiled toucher and C programs, the one capability gate
//! (`require`), and pagewise's output read back. Submodules: child processes (`process`),
//! mounts (`mount`), tables (`table`), comparing copies (`compare`), the gate (`require`,
//! also used by the C API's tests).
#![allow(dead_code)]

mod cgroup;
mod compare;
mod mount;
mod process;
mod require;
mod table;
// Each test binary uses some of these.
#[allow(unused_imports)]
pub use {cgroup::ChildCgroup, compare::*, mount::*, process::*, require::require, table::*};

use pagewise_core::sys;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// Bytes in a page (the x86-64 and arm64 page size the tests assume).
pub const PAGE: u64 = 4096;

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

/// True when page `page` of `p` is cached ([`resident_pages`]).
pub fn page_cached(p: &Path, page: u64) -> bool {
    let f = File::open(p).unwrap();
    resident_pages(&f, page * PAGE, PAGE) == 1
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

/// Tracing (record, run, assist) needs root and tracefs; on this project's machines both are
/// there, so the tests run. Elsewhere they fail or, under PAGEWISE_ALLOW_SKIP=1, say why.
pub fn can_trace() -> bool {
    require_root("tracing")
}

/// A file of `size` bytes of noise ([`write_file`]), written back and evicted (checked).
pub fn cold_file(p: &Path, size: usize) {
    write_file(p, size);
    sync_and_evict(p);
    assert_eq!(cached(p), 0, "setup: {} evicted", p.display());
}

/// A file of `pages` pages, each filled with its own byte, written back and evicted.
pub fn write_pages(p: &Path, pages: u64) {
    let mut f = File::create(p).unwrap();
    for i in 0..pages {
        f.write_all(&vec![(i % 251) as u8 + 1; PAGE as usize])
            .unwrap();
    }
    f.sync_all().unwrap();
    sys::fadvise(f.as_fd(), 0, 0, sys::Advice::DontNeed).unwrap();
}

/// A file's pages: written back and dropped, and none left cached (checked).
pub fn evict(p: &Path) {
    sync_and_evict(p);
    assert_eq!(cached(p), 0);
}

/// True when `cmd` is an executable file on $PATH.
pub fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

/// Records `cat FILE` into `trace` (its output to a file in `dir`: data, not a test log).
pub fn record_trace(dir: &Path, trace: &Path, file: &Path) {
    // cat's output goes to a file: it is data, not a test log.
    let sink = File::create(dir.join("cat.out")).unwrap();
    let mut cmd = bin();
    cmd.arg("record")
        .arg("-o")
        .arg(trace)
        .args(["--", "cat"])
        .arg(file)
        .stdout(sink);
    let out = output_logged(&mut cmd);
    assert!(out.status.success(), "record");
    assert!(trace.exists());
}

/// Runs `cmd` (its stdout as set up) and shows the command, its status and stderr in the
/// test's log.
pub fn output_logged(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    eprintln!(
        "--- {cmd:?}\nstatus {:?}\nstderr:\n{}",
        out.status,
        stderr(&out)
    );
    out
}

/// `pagewise copy ARGS SRC DST`.
pub fn run_copy(args: &[&str], src: &Path, dst: &Path) -> Output {
    run(bin().arg("copy").args(args).arg(src).arg(dst))
}

/// The directory `DIR/src` holding `f1` to `fN`, `size` bytes of noise each ([`write_file`]).
pub fn numbered_files(dir: &Path, n: usize, size: usize) -> std::path::PathBuf {
    let src = dir.join("src");
    fs::create_dir(&src).unwrap();
    for i in 1..=n {
        write_file(&src.join(format!("f{i}")), size);
    }
    src
}

/// The tree `DIR/src` with a directory `sub` and a file `data` of 10,000 bytes: (src, sub).
pub fn src_with_sub(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let src = dir.join("src");
    let sub = src.join("sub");
    fs::create_dir_all(&sub).unwrap();
    write_file(&src.join("data"), 10_000);
    (src, sub)
}

/// Removes every file directly in `dir`.
pub fn remove_files_in(dir: &Path) {
    for n in names_in(dir) {
        fs::remove_file(dir.join(std::ffi::OsStr::from_bytes(&n))).unwrap();
    }
}

/// The [`toucher`] command (built in `dir`) touching `pages` of `data`.
pub fn toucher_of(dir: &Path, data: &Path, pages: &[&str]) -> Vec<String> {
    let mut cmd = toucher(dir);
    cmd.push(data.to_string_lossy().into_owned());
    cmd.extend(pages.iter().map(|p| p.to_string()));
    cmd
}

/// pagewise's stdout as one JSON document (fails the test, showing it, when it is not).
pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// stdout as text (lossy).
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// stderr as text (lossy).
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Makes the directories above `p` traversable for others (the tmp root is under target/).
pub fn open_up_ancestors(p: &Path) {
    let mut a = p.to_path_buf();
    while let Some(parent) = a.parent() {
        let mode = fs::metadata(parent).unwrap().permissions().mode();
        if mode & 0o005 != 0o005 {
            let _ = fs::set_permissions(parent, fs::Permissions::from_mode(mode | 0o005));
        }
        a = parent.to_path_buf();
    }
}

/// The names in `dir`, as bytes, sorted.
pub fn names_in(dir: &Path) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_vec())
        .collect();
    v.sort();
    v
}

/// A TCP port on 127.0.0.1 free a moment ago (servers of the tests listen on loopback only).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
