//! The textfile directory of `exporter --textfile DIR`: opened without following a symlink,
//! written atomically, locked between runs, and the counters kept there between runs — only
//! files this user provably made are used (the directory may be writable by others).

use super::super::exit::CliError;
use pagewise_core::exporter;
use pagewise_core::exporter::state::TextfileState;
use pagewise_core::shared_dir::SharedDir;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Writes `text` to `name` in `dir` atomically: a temporary beside it (a dot name, not
/// `*.prom`: node_exporter reads only those), fsync, renameat, so node_exporter never reads half
/// a file. The directory may be writable by others (node_exporter's often is): the temporary
/// is created O_CREAT|O_EXCL|O_NOFOLLOW relative to the directory's descriptor (a name planted
/// there is never written through; another name is taken) and renamed over `name` itself.
pub(super) fn write_atomically(
    dir: &SharedDir,
    name: &str,
    text: &str,
) -> Result<PathBuf, CliError> {
    let dest = dir.path().join(name);
    let mut tmp = dir.create_temp(OsStr::new(name), 0o644).map_err(|e| {
        CliError::file(
            dir.path().join(format!(".{name}.*")).display().to_string(),
            "create",
            e,
        )
    })?;
    let res = (|| {
        tmp.file.write_all(text.as_bytes())?;
        tmp.file.sync_all()
    })();
    if let Err(e) = res {
        return Err(CliError::file(tmp.path().display().to_string(), "write", e));
    }
    dir.replace(tmp, OsStr::new(name))
        .map_err(|e| CliError::file(dest.display().to_string(), "rename", e))?;
    Ok(dest)
}

/// Writes `text` to `dir/pagewise.prom` atomically.
pub(super) fn write_textfile(dir: &SharedDir, text: &str) -> Result<PathBuf, CliError> {
    write_atomically(dir, "pagewise.prom", text)
}

/// The textfile state's name in the directory (node_exporter reads only `*.prom`).
pub(super) const STATE: &str = ".pagewise.state";

/// The lock's name in the directory.
pub(super) const LOCK: &str = ".pagewise.lock";

/// Opens the textfile directory `dir` (O_DIRECTORY|O_NOFOLLOW): every name in it is then
/// resolved relative to it.
pub(super) fn open_textfile_dir(dir: &Path) -> Result<SharedDir, CliError> {
    SharedDir::open(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => {
            CliError::Message(format!("exporter: --textfile {}: {e}", dir.display()))
        }
        _ => CliError::file(dir.display().to_string(), "open", e),
    })
}

/// Holds `dir/.pagewise.lock` (flock) until dropped, so that two runs on one directory (a
/// timer and a person) do not lose each other's counts; waits up to 30 s for another run.
/// The lock is never opened through a symlink, nor used when it is not a regular file of this
/// user (someone else planted it): refused, naming it.
pub(super) fn lock_textfile_dir(dir: &SharedDir) -> Result<std::fs::File, CliError> {
    use std::os::fd::AsFd;
    let p = dir.path().join(LOCK);
    let f = dir
        .open_own(OsStr::new(LOCK), 0o644)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied if e.raw_os_error().is_none() => {
                CliError::Message(format!(
                    "exporter: {}: {e}; remove it if it is not pagewise's",
                    p.display()
                ))
            }
            _ => CliError::file(p.display().to_string(), "open", e),
        })?;
    let start = std::time::Instant::now();
    loop {
        match pagewise_core::sys::try_lock_exclusive(f.as_fd()) {
            Ok(true) => return Ok(f),
            Ok(false) if start.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Ok(false) => {
                return Err(CliError::Message(format!(
                    "exporter: {}: held by another run for 30 s",
                    p.display()
                )))
            }
            Err(e) => return Err(CliError::file(p.display().to_string(), "flock", e)),
        }
    }
}

/// The counters of the previous runs in `dir` (0 when there were none, or when the state
/// cannot be used: said on stderr, and Prometheus sees a counter reset). A state that is not a
/// regular file of this user is not read.
pub(super) fn read_state(dir: &SharedDir) -> TextfileState {
    let p = dir.path().join(STATE);
    match dir.read_own(OsStr::new(STATE), exporter::state::MAX_STATE as u64) {
        Ok(None) => TextfileState::default(),
        Err(e) => {
            eprintln!(
                "pagewise exporter: {}: read failed: {e}; counting from 0",
                p.display()
            );
            TextfileState::default()
        }
        Ok(Some(bytes)) => TextfileState::parse(&bytes).unwrap_or_else(|e| {
            eprintln!("pagewise exporter: {}: {e}; counting from 0", p.display());
            TextfileState::default()
        }),
    }
}
