//! The kernel matrix inside `cargo test`: boots Debian's stock kernels in a VM
//! (tests/kernels/run: virtme-ng over QEMU, emulated where KVM is missing) and runs the set of
//! tests/kernels/set there, each check asserting on the guest kernel's own counters.
//!
//! PAGEWISE_KERNELS names the kernels (default `6.1`, the oldest the fleets run; `6.1 6.12`
//! for both; `none` skips, saying so); the checks marked `ci` run, or every check with
//! PAGEWISE_KERNEL_SET=all. Needs root (mounts, tracing in the guest) and Debian's packages (qemu, kmod) and
//! PyPI (virtme-ng), which the script installs when missing. Its table is printed.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn every_checked_verb_passes_or_says_why_on_the_kernels_users_run() {
    if !common::require_root("the kernel matrix (a VM, mounts and tracing in it)") {
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let deps = std::env::current_exe().unwrap();
    let kernels = std::env::var("PAGEWISE_KERNELS").unwrap_or_else(|_| "6.1".into());
    if kernels == "none" {
        eprintln!("skipped: PAGEWISE_KERNELS=none");
        return;
    }
    let set = match std::env::var("PAGEWISE_KERNEL_SET").as_deref() {
        Ok("all") => "",
        _ => "ci",
    };
    for k in kernels.split_whitespace() {
        let start = std::time::Instant::now();
        let out = Command::new("bash")
            .arg(repo.join("tests/kernels/run"))
            .arg(k)
            .env("NO_BUILD", "1")
            .env("SET", set)
            .env("PAGEWISE_TEST_DEPS", deps.parent().unwrap())
            .output()
            .unwrap();
        eprintln!(
            "--- kernel {k} ({:.0} s)\n{}\n{}",
            start.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "kernel {k}: a check failed or the guest did not run (target/kernels/{k}/logs):\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
