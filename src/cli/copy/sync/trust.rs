//! The paths the operator names (the destination, --link-dest, --compare-dest, --copy-dest,
//! --backup-dir, --files-from, --log-file), resolved as rsync 3.5 resolves them: a symlink
//! on the way is followed only when root or the running user owns it
//! ([`pagewise_core::operator_path`]); `--insecure-links` follows any, as rsync before 3.5.
//! The walked, symlink-free path replaces the one given, so what opens it later (never
//! following a last-component symlink) opens what the walk found.

use super::args::SyncArgs;
use crate::cli::exit::CliError;
use pagewise_core::operator_path;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `a` with each operator path replaced by the physical path walked, or the first refusal
/// (before anything is done). The destination argument itself stays as given (names are
/// shown under it); its directory is walked, and anchors the relative basis and backup
/// directories as rsync's (relative to the destination directory). A basis directory
/// (--link-dest, --compare-dest, --copy-dest) that is refused is left out with a warning,
/// as rsync's: the copy goes on without it.
pub(super) fn operator_paths(mut a: SyncArgs) -> Result<SyncArgs, CliError> {
    let any = a.insecure_links;
    let cwd =
        std::env::current_dir().map_err(|e| CliError::Usage(format!("getcwd failed: {e}")))?;
    let walk = |what: &str, p: &Path, anchor: &Path| {
        operator_path::resolve(p, anchor, any)
            .map_err(|e| CliError::Usage(format!("{what} {}: {e}", p.display())))
    };
    let Some(dest) = a.paths.last().filter(|_| a.paths.len() > 1) else {
        return Ok(a);
    };
    // The destination's directory: DEST itself when it is (or is to be) a directory (see
    // `plan::many_entries`: `sync -a . ../new`).
    let sources = &a.paths[..a.paths.len() - 1];
    let relative = a.relative || a.files_from.is_some();
    let dir_like = dest.as_os_str().as_bytes().ends_with(b"/")
        || dest.is_dir()
        || super::plan::many_entries(sources, relative);
    let dest_dir = match dir_like {
        true => dest.clone(),
        false => dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
    };
    let anchor = walk("the destination", &dest_dir, &cwd)?;
    for (what, dirs) in [
        ("--link-dest", &mut a.link_dest),
        ("--compare-dest", &mut a.compare_dest),
        ("--copy-dest", &mut a.copy_dest),
    ] {
        let given = std::mem::take(dirs);
        for d in given {
            match walk(what, &d, &anchor) {
                Ok(p) => dirs.push(p),
                Err(CliError::Usage(m)) if !a.quiet => eprintln!("pagewise sync: {m}; left out"),
                Err(_) => {}
            }
        }
    }
    if let Some(d) = &mut a.backup_dir {
        *d = walk("--backup-dir", d, &anchor)?;
    }
    if let Some(d) = &mut a.temp_dir {
        *d = walk("--temp-dir", d, &anchor)?;
    }
    if let Some(f) = a.files_from.as_mut().filter(|f| f.as_os_str() != "-") {
        *f = walk("--files-from", f, &cwd)?;
    }
    if let Some(f) = &mut a.log_file {
        *f = walk("--log-file", f, &cwd)?;
    }
    Ok(a)
}
