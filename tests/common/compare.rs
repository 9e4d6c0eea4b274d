//! Comparing what a copy made with its source: cmp, rsync's own itemized differences, tree
//! listings, and temporaries left behind.

use super::*;
use std::path::PathBuf;

/// True when `cmp` finds the two files equal.
pub fn same(a: &Path, b: &Path) -> bool {
    Command::new("cmp")
        .arg(a)
        .arg(b)
        .status()
        .unwrap()
        .success()
}

/// Temporaries (`.NAME.pagewise-PID-N.tmp`) directly in `dir`.
pub fn leftovers(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".pagewise-"))
        .collect()
}

/// rsync's own comparison of two trees: every difference it would transfer or change,
/// content compared by checksum, hard links, ACLs, xattrs, devices and specials included.
pub fn rsync_differences(src: &Path, dst: &Path) -> String {
    let itemize = Command::new("rsync")
        .args(["-naHAXc", "--itemize-changes", "--specials", "--devices"])
        .arg(format!("{}/", src.display()))
        .arg(format!("{}/", dst.display()))
        .output()
        .unwrap();
    assert!(itemize.status.success(), "rsync: {itemize:?}");
    String::from_utf8_lossy(&itemize.stdout).into_owned()
}

/// Root (devices, capabilities: `why`), rsync to compare trees and setfacl to make ACLs.
pub fn can_compare_with_rsync(why: &str) -> bool {
    require_root(why)
        && have_rsync()
        && require(
            Command::new("setfacl").arg("--version").output().is_ok(),
            "setfacl (apt package acl)",
        )
}

/// Runs `args` (a tool and its options) on `p`; it must succeed.
pub fn tool(args: &[&str], p: &Path) {
    let st = Command::new(args[0])
        .args(&args[1..])
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success(), "{args:?} {}", p.display());
}

/// rsync is installed (the gate fails the test, naming it, when not).
pub fn have_rsync() -> bool {
    require(
        Command::new("rsync").arg("--version").output().is_ok(),
        "rsync (apt package rsync)",
    )
}

/// Temporaries (`.NAME.pagewise-PID-N.tmp`) anywhere below `dir`.
pub fn stray_temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut out = leftovers(dir);
    for e in fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(stray_temporaries(&e.path()));
        }
    }
    out
}

/// `ls -lR`-like listing with times to the nanosecond, to see that nothing changed.
pub fn tree_listing(dir: &Path) -> String {
    let out = Command::new("find")
        .arg(dir)
        .args(["-printf", "%p %s %T@ %m %y\n"])
        .output()
        .unwrap();
    let mut lines: Vec<_> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    lines.join("\n")
}
