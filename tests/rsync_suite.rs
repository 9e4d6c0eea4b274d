//! rsync's own test suite as the oracle of `pagewise sync`: rsync 3.5.0's source (Debian's
//! orig tarball, checked against its SHA-256) is fetched once into target/rsync-suite, its
//! helper programs built (tls, getgroups, ...: runtests.py needs them), and runtests.py runs
//! the local-transfer tests listed in tests/rsync-suite/expected.txt with `pagewise sync` as
//! $RSYNC (`--expect-result`: each test must end as listed — pass, skip, or a known fail).
//! The table of outcomes is printed; docs/sync.md keeps it with the reasons.

use std::path::{Path, PathBuf};
use std::process::Command;

const TARBALL: &str = "rsync_3.5.0+ds1.orig.tar.xz";
const URL: &str = "http://deb.debian.org/debian/pool/main/r/rsync/rsync_3.5.0+ds1.orig.tar.xz";
const SHA256: &str = "d5de0c8a95b00e0f50038ba04526bcbd5fe4f3ff97b4035bb97b084398bfbb60";
const HELPERS: [&str; 8] = [
    "tls",
    "trimslash",
    "t_unsafe",
    "t_chmod_secure",
    "t_secure_relpath",
    "wildtest",
    "getgroups",
    "getfsdev",
];

fn sh(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// rsync's source with its helpers built, under `dir` (made once, reused after).
fn rsync_source(dir: &Path) -> PathBuf {
    let src = dir.join("rsync-3.5.0");
    if HELPERS.iter().all(|h| src.join(h).exists()) {
        return src;
    }
    std::fs::create_dir_all(dir).unwrap();
    let tarball = dir.join(TARBALL);
    if !tarball.exists() {
        let part = dir.join(format!("{TARBALL}.part"));
        sh(
            Command::new("curl")
                .args(["-sSfL", "-o"])
                .arg(&part)
                .arg(URL),
            "downloading rsync's source (curl)",
        );
        std::fs::rename(&part, &tarball).unwrap();
    }
    let sum = Command::new("sha256sum").arg(&tarball).output().unwrap();
    let sum = String::from_utf8_lossy(&sum.stdout);
    assert!(
        sum.starts_with(SHA256),
        "{}: SHA-256 {} is not {SHA256} (remove it to fetch again)",
        tarball.display(),
        sum.split_whitespace().next().unwrap_or("?")
    );
    let _ = std::fs::remove_dir_all(&src);
    sh(
        Command::new("tar")
            .arg("-xf")
            .arg(&tarball)
            .current_dir(dir),
        "unpacking rsync's source",
    );
    // Debian's repacked source leaves out the bundled zlib and popt; configure still names
    // their directories (the system's libraries are used: zlib1g-dev, libpopt-dev).
    for d in ["zlib", "popt"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
        std::fs::write(src.join(d).join("dummy.in"), "").unwrap();
    }
    sh(
        Command::new("sh")
            .args([
                "./configure",
                "--disable-openssl",
                "--disable-xxhash",
                "--disable-zstd",
                "--disable-lz4",
                "--disable-md2man",
                "--without-included-popt",
            ])
            .current_dir(&src),
        "configuring rsync's source (install-deps installs libpopt-dev and zlib1g-dev)",
    );
    sh(
        Command::new("make")
            .arg("-j2")
            .args(HELPERS)
            .current_dir(&src),
        "building rsync's test helpers",
    );
    src
}

#[test]
fn rsync_s_own_local_tests_end_as_listed() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let work = root.join("target/rsync-suite");
    let src = rsync_source(&work);
    let wrapper = work.join("pagewise-as-rsync");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec '{}' sync \"$@\"\n",
            env!("CARGO_BIN_EXE_pagewise")
        ),
    )
    .unwrap();
    sh(
        Command::new("chmod").arg("755").arg(&wrapper),
        "chmod the wrapper",
    );
    let expected = root.join("tests/rsync-suite/expected.txt");
    let scratch = work.join("scratch");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let out = Command::new("python3")
        .arg("runtests.py")
        .arg(format!("--rsync-bin={}", wrapper.display()))
        .arg(format!("--expect-result={}", expected.display()))
        .args(["-j2", "--timeout", "120", "--race-timeout", "1"])
        .env("scratchbase", &scratch)
        .current_dir(&src)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // The table: one line per test with its outcome, then the totals.
    let table: Vec<&str> = text
        .lines()
        .filter(|l| {
            ["PASS", "FAIL", "SKIP", "XFAIL"]
                .iter()
                .any(|p| l.starts_with(p))
                || l.contains(" passed")
                || l.contains(" failed")
                || l.contains(" skipped")
                || l.contains("mismatch")
                || l.contains("UNEXPECTED")
        })
        .collect();
    eprintln!(
        "rsync 3.5.0's local tests with pagewise sync:\n{}",
        table.join("\n")
    );
    assert!(
        out.status.success(),
        "a test ended otherwise than tests/rsync-suite/expected.txt says ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
