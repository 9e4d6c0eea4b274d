//! Every external tool a test calls is installed by the suite's own set-up: `./install-deps
//! --deps-only` lists it (`need TOOL PACKAGE`), or it belongs to what every Debian or Ubuntu
//! system has (the Essential set), or the test that calls it installs it itself (the kernel
//! matrix: tests/kernels/run). The README's test command once failed on a fresh machine
//! because a tool only the developer's machine had (busybox) was never installed; this check
//! fails instead, naming the tool and the file that calls it.
//!
//! Tools are found as literals: `Command::new("TOOL")`, `on_path("TOOL")` and `require`d
//! names in tests/ and its folders (this file excepted) and the crates' tests.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// Commands of Debian's Essential packages (coreutils, bash, dash, diffutils, findutils,
/// grep, sed, tar, gzip, dpkg, libc-bin, util-linux's essential part), present everywhere.
const ESSENTIAL: &[&str] = &[
    "sh",
    "bash",
    "cat",
    "cp",
    "mv",
    "rm",
    "ln",
    "ls",
    "mkdir",
    "chmod",
    "chown",
    "true",
    "false",
    "sleep",
    "sync",
    "stat",
    "truncate",
    "dd",
    "head",
    "tail",
    "sort",
    "env",
    "test",
    "sha256sum",
    "chroot",
    "mkfifo",
    "cmp",
    "diff",
    "find",
    "xargs",
    "grep",
    "sed",
    "tar",
    "gzip",
    "dpkg",
    "dpkg-deb",
    "ldd",
    "uname",
    "id",
    "nproc",
    "timeout",
    "tee",
];

/// Tools the test binary that calls them installs itself.
const SELF_INSTALLED: &[(&str, &str)] = &[
    // tests/vm_kernels.rs runs tests/kernels/run, whose install_deps installs these.
    ("qemu-system-x86_64", "tests/kernels/run"),
    ("busybox", "tests/kernels/run"),
    ("vng", "tests/kernels/run"),
];

/// `need TOOL PACKAGE` lines of install-deps.
fn installed_by_setup(repo: &Path) -> Vec<String> {
    fs::read_to_string(repo.join("install-deps"))
        .unwrap()
        .lines()
        // `need TOOL PACKAGE`, or `# installs TOOL` above a block that installs it otherwise.
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("need ")
                .or_else(|| l.strip_prefix("# installs "))
        })
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The quoted literal after each occurrence of `prefix` in `text`.
fn literals_after<'t>(text: &'t str, prefix: &str) -> Vec<&'t str> {
    text.match_indices(prefix)
        .filter_map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            let end = rest.find('"')?;
            Some(&rest[..end])
        })
        .filter(|t| !t.is_empty() && !t.contains(char::is_whitespace))
        .collect()
}

/// Tool name -> the first test file calling it.
fn tools_called(repo: &Path) -> BTreeMap<String, String> {
    let mut files = Vec::new();
    let mut dirs = vec![repo.join("tests"), repo.join("crates/pagewise-capi/tests")];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("setup_tools.rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(
        files.iter().any(|p| p.ends_with("tests/e2e/main.rs")),
        "the end-to-end tests were not found: {files:?}"
    );
    let mut out = BTreeMap::new();
    for p in files {
        let text = fs::read_to_string(&p).unwrap();
        let shown = p.strip_prefix(repo).unwrap().display().to_string();
        for prefix in ["Command::new(\"", "on_path(\""] {
            for t in literals_after(&text, prefix) {
                out.entry(t.to_string()).or_insert_with(|| shown.clone());
            }
        }
    }
    out
}

#[test]
fn every_tool_a_test_calls_is_installed_by_the_setup() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let setup = installed_by_setup(repo);
    assert!(
        setup.len() > 20,
        "install-deps lists {} tools: parsing broke",
        setup.len()
    );
    let called = tools_called(repo);
    assert!(
        called.len() > 20,
        "found {} tools: parsing broke",
        called.len()
    );
    let missing: Vec<String> = called
        .iter()
        .filter(|(t, _)| {
            !setup.iter().any(|s| s == *t)
                && !ESSENTIAL.contains(&t.as_str())
                && !SELF_INSTALLED.iter().any(|(s, _)| s == t)
        })
        .map(|(t, f)| format!("{t} (called in {f})"))
        .collect();
    assert!(
        missing.is_empty(),
        "tools the tests call that ./install-deps --deps-only does not install: {}\n\
         add `need TOOL PACKAGE` to install-deps",
        missing.join(", ")
    );
}
