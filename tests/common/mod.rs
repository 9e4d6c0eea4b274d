//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use pagewise_core::sys;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Output};

/// The pagewise binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pagewise"))
}

/// A temp dir on the build's real filesystem (not tmpfs, whose pages cannot be evicted).
pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
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

/// The kernel's view: cachestat of the whole file.
pub fn cs(p: &Path) -> sys::CacheStat {
    let f = File::open(p).unwrap();
    sys::cachestat(f.as_fd(), 0, 0).unwrap()
}

/// Cached pages of the whole file, from cachestat.
pub fn cached(p: &Path) -> u64 {
    cs(p).cache
}

/// Writes the file back and drops it from the cache (test setup, not the code under test).
pub fn sync_and_evict(p: &Path) {
    let f = File::open(p).unwrap();
    f.sync_all().unwrap();
    sys::fadvise(f.as_fd(), 0, 0, sys::Advice::DontNeed).unwrap();
}
