//! The Python package end to end, so `cargo test --workspace --profile ci` runs it: a fresh
//! virtualenv, the abi3 wheel built by maturin and installed into it with pip, then the
//! pytest suite in python/tests against that installed wheel (and against this build's CLI,
//! whose `--json` documents the reports' `to_dict()` must equal).
//!
//! Needs root, `python3` (>= 3.9, with venv; `PAGEWISE_PYTHON` names another) and PyPI for
//! maturin, pytest, numpy (`readinto` a numpy array), safetensors and ml-dtypes (the safetensors loader, BF16/F8)
//! and mypy
//! (its stubtest checks the extension's .pyi against the module built: python/tests/
//! test_stubs.py). The wheel's Rust build goes to `<target>/python` and is reused by later runs.
//! A skipped pytest test fails this test: nothing is skipped silently.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

/// The target directory this test was built in (`<target>/<profile>/deps/python-HASH`).
fn target_dir() -> PathBuf {
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t);
    }
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// Runs a step, failing the test with its output when it fails; returns the output.
fn step(what: &str, cmd: &mut Command) -> Output {
    let start = Instant::now();
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    eprintln!("{what}: {:.1} s", start.elapsed().as_secs_f64());
    if !out.status.success() {
        panic!(
            "{what} failed ({}): {cmd:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

#[test]
fn python_package_passes_its_suite_installed_from_a_wheel() {
    // Tracing (record, dropping) and tmpfs mounts (open's fallback) need root.
    if !common::require_root("the Python suite (tracing, tmpfs mounts)") {
        return;
    }
    let python = std::env::var("PAGEWISE_PYTHON").unwrap_or_else(|_| "python3".into());
    let has_venv = Command::new(&python)
        .args(["-c", "import ensurepip, venv"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !common::require(has_venv, &format!("{python} with venv (apt: python3-venv)")) {
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    // Readable by others: one test runs the installed package as nobody.
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let venv = work.path().join("venv");
    step(
        "python3 -m venv",
        Command::new(&python).args(["-m", "venv"]).arg(&venv),
    );
    let py = venv.join("bin/python");
    step(
        "pip install maturin pytest numpy safetensors ml-dtypes mypy",
        Command::new(&py)
            .args(["-m", "pip", "install", "-q"])
            .args([
                "maturin>=1.5,<2",
                "pytest",
                "numpy",
                "safetensors",
                "ml-dtypes",
                "mypy>=2.4,<3",
            ])
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    );
    let wheels = work.path().join("wheels");
    step(
        "maturin build --profile ci",
        Command::new(venv.join("bin/maturin"))
            .args(["build", "--profile", "ci", "-q", "-m"])
            .arg(repo.join("python/Cargo.toml"))
            .arg("-o")
            .arg(&wheels)
            .env("CARGO_TARGET_DIR", target_dir().join("python")),
    );
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("maturin wrote no wheel");
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.contains("-cp39-abi3-"),
        "{name}: expected one abi3 wheel for CPython >= 3.9"
    );
    step(
        "pip install the wheel",
        Command::new(&py)
            .args(["-m", "pip", "install", "-q", "--no-deps"])
            .arg(&wheel)
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    );
    // From the temporary directory, so `import pagewise` finds the installed wheel, never the
    // source folder; -rs lists skips, -p no:cacheprovider leaves the checkout clean.
    let out = Command::new(&py)
        .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
        .arg(repo.join("python/tests"))
        .current_dir(work.path())
        .env("PAGEWISE_BIN", env!("CARGO_BIN_EXE_pagewise"))
        .env("PAGEWISE_EXPECT_PREFIX", &venv)
        .env("PAGEWISE_TEST_DIR", common::tmp_root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Vec<&str> = stdout.lines().rev().take_while(|l| !l.is_empty()).collect();
    eprintln!(
        "pytest: {}",
        summary.iter().rev().cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(
        out.status.success(),
        "pytest failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = summary.first().copied().unwrap_or_default();
    assert!(
        last.contains("passed") && !last.contains("skipped"),
        "pytest skipped tests (nothing may be skipped silently):\n{stdout}"
    );
}
