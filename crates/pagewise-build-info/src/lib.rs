//! What each pagewise front end (the CLI, libpagewise, the Python extension) says it was built
//! from, computed once in their build scripts so the three agree:
//!
//! - `PAGEWISE_COMMIT`: the git commit (12 hex digits) of the source tree, from the
//!   `PAGEWISE_COMMIT` environment variable when set (release tarballs, sdists), else
//!   `git rev-parse HEAD` in the package's directory, else `unknown`;
//! - `PAGEWISE_BUILD_DATE`: the UTC date of the build, `YYYY-MM-DD`, from `SOURCE_DATE_EPOCH`
//!   when set (reproducible builds), else the clock when the build script ran;
//! - `PAGEWISE_TARGET`: the target triple;
//! - `PAGEWISE_BUILD_INFO`: the line all three print, e.g.
//!   `0.1.0 (commit 0123456789ab, built 2026-11-26, x86_64-unknown-linux-gnu)`.
//!
//! Use from a build script: `pagewise_build_info::emit();`, then `env!("PAGEWISE_BUILD_INFO")`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Sets the `PAGEWISE_*` compile-time variables for the crate whose build script calls it, and
/// asks cargo to rerun that build script when the commit or the overriding variables change.
pub fn emit() {
    println!("cargo:rerun-if-env-changed=PAGEWISE_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = match std::env::var("PAGEWISE_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().chars().take(40).collect(),
        _ => git_commit(&dir).unwrap_or_else(|| "unknown".to_string()),
    };
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    let date = civil_date(secs);
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_string());
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rustc-env=PAGEWISE_COMMIT={commit}");
    println!("cargo:rustc-env=PAGEWISE_BUILD_DATE={date}");
    println!("cargo:rustc-env=PAGEWISE_TARGET={target}");
    println!(
        "cargo:rustc-env=PAGEWISE_BUILD_INFO={}",
        line(&version, &commit, &date, &target)
    );
}

/// The line every front end prints after its name.
pub fn line(version: &str, commit: &str, date: &str, target: &str) -> String {
    format!("{version} (commit {commit}, built {date}, {target})")
}

/// HEAD's commit (12 hex digits), with a rerun of the build script when HEAD or the branch it
/// names moves; None outside a git checkout or without git.
fn git_commit(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let s = String::from_utf8(out.stdout).ok()?;
        let s = s.trim();
        (!s.is_empty()).then(|| s.to_string())
    };
    let git_dir = PathBuf::from(git(&["rev-parse", "--absolute-git-dir"])?);
    println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
    println!(
        "cargo:rerun-if-changed={}",
        git_dir.join("packed-refs").display()
    );
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        println!("cargo:rerun-if-changed={}", git_dir.join(r).display());
    }
    let full = git(&["rev-parse", "HEAD"])?;
    if full.len() < 12 || !full.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(full[..12].to_string())
}

/// `YYYY-MM-DD` of a Unix time, UTC (Howard Hinnant's days-to-civil).
fn civil_date(secs: i64) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date `(year, month, day)` of day `days` since 1970-01-01 (Howard
/// Hinnant's civil_from_days): what the build date and the CLI's UTC log times are written
/// with, no time-zone database needed.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(951_782_400), "2000-02-29");
        assert_eq!(civil_date(1_795_660_800), "2026-11-26");
        assert_eq!(civil_date(-86_400), "1969-12-31");
    }
}
