//! Output files a verb writes when it is done (`record -o`, `run --report`): opened before
//! the command starts, so a bad path is found before the command runs (and its trace or its
//! exit status is never lost to it); written beside and renamed into place, so a reader never
//! sees half a file.

use super::exit::CliError;
use super::render::path_text;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Where the output goes.
enum Target {
    Stdout,
    /// An existing non-regular file (/dev/null, a FIFO, a device): renaming over it would
    /// replace it, so it is written to directly.
    Direct(File),
    /// A regular file: a temporary beside it, renamed over it when complete.
    Temp {
        file: Option<File>,
        tmp: PathBuf,
        target: PathBuf,
    },
}

/// An output file opened ahead of time.
pub struct Output {
    shown: PathBuf,
    target: Target,
}

impl Output {
    /// Opens `out` ('-' for stdout), or creates its temporary. A symlink is followed: the file
    /// it names is replaced, the link stays (a dangling one: what it names is created) —
    /// unless it is another user's in a directory others can write to (see [`trusted`]),
    /// which is refused, as is another user's FIFO or device there.
    pub fn open(out: &Path) -> Result<Output, CliError> {
        use std::os::unix::fs::MetadataExt;
        let shown = out.to_path_buf();
        if out.as_os_str() == "-" {
            return Ok(Output {
                shown,
                target: Target::Stdout,
            });
        }
        if let Ok(l) = std::fs::symlink_metadata(out) {
            if l.file_type().is_symlink() {
                trusted(out, l.uid(), "a symlink")?;
            }
        }
        let meta = std::fs::metadata(out).ok();
        if let Some(m) = meta.as_ref().filter(|m| !m.is_file()) {
            if m.is_dir() {
                return Err(CliError::Message(format!(
                    "{}: is a directory",
                    path_text(out)
                )));
            }
            let kind = pagewise_core::sys::Stat::kind_of(m.mode());
            let resolved = std::fs::canonicalize(out).unwrap_or_else(|_| out.to_path_buf());
            trusted(&resolved, m.uid(), &format!("a {kind}"))?;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(out)
                .map_err(|e| CliError::file(path_text(out), "open", e))?;
            // What was opened is what was checked (not swapped meanwhile).
            let got = f
                .metadata()
                .map_err(|e| CliError::file(path_text(out), "fstat", e))?;
            if (got.dev(), got.ino()) != (m.dev(), m.ino()) {
                return Err(CliError::Message(format!(
                    "{}: replaced while it was opened: not written",
                    path_text(out)
                )));
            }
            return Ok(Output {
                shown,
                target: Target::Direct(f),
            });
        }
        let target = if let Ok(p) = std::fs::canonicalize(out) {
            p
        } else if let Ok(l) = std::fs::read_link(out) {
            out.parent().map_or(l.clone(), |d| d.join(&l))
        } else {
            out.to_path_buf()
        };
        let (file, tmp) = create_temp(&target).map_err(|(tmp, e)| {
            CliError::Message(format!(
                "{}: cannot create the output (open {} failed: {e})",
                path_text(out),
                path_text(&tmp)
            ))
        })?;
        Ok(Output {
            shown,
            target: Target::Temp {
                file: Some(file),
                tmp,
                target,
            },
        })
    }

    /// Writes the content and puts it in place.
    pub fn write(
        mut self,
        content: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), CliError> {
        let shown = path_text(&self.shown);
        let fail = |e: std::io::Error| CliError::file(shown.clone(), "write", e);
        match &mut self.target {
            Target::Stdout => {
                let mut w = std::io::stdout().lock();
                content(&mut w).and_then(|_| w.flush()).map_err(fail)
            }
            Target::Direct(f) => {
                let mut w = BufWriter::new(f);
                content(&mut w).and_then(|_| w.flush()).map_err(fail)
            }
            Target::Temp { file, tmp, target } => {
                let mut w = BufWriter::new(file.take().expect("written once"));
                content(&mut w).and_then(|_| w.flush()).map_err(fail)?;
                drop(w);
                std::fs::rename(&*tmp, &*target)
                    .map_err(|e| CliError::file(shown.clone(), "rename", e))?;
                // In place: nothing left to remove.
                tmp.clear();
                Ok(())
            }
        }
    }
}

/// Refuses `path` — a symlink to follow, or a FIFO or device to write to, owned by `owner` —
/// when it may have been planted: it is neither this user's nor root's nor its directory
/// owner's, and the directory is writable by others (group or world). The kernel's
/// fs.protected_symlinks and protected_fifos make the same rule for sticky world-writable
/// directories only, and only where they are switched on.
fn trusted(path: &Path, owner: u32, what: &str) -> Result<(), CliError> {
    use std::os::unix::fs::MetadataExt;
    let me = pagewise_core::sys::euid();
    if owner == me || owner == 0 {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let shared = std::fs::metadata(dir).map_or(true, |d| d.uid() != owner && d.mode() & 0o022 != 0);
    if !shared {
        return Ok(());
    }
    Err(CliError::Message(format!(
        "{}: is {what} of uid {owner} in a directory others can write to: not used (remove it, \
         or name a path of your own)",
        path_text(path)
    )))
}

/// A new file beside `target`, created exclusively and never through a symlink (a name
/// planted in a shared directory cannot redirect the write); a fresh name on a clash.
fn create_temp(target: &Path) -> Result<(File, PathBuf), (PathBuf, std::io::Error)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut attempt = 0u32;
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut tmp = target.as_os_str().to_owned();
        tmp.push(format!(".pagewise-{}-{nanos:x}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(pagewise_core::sys::O_NOFOLLOW)
            .mode(0o644)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                attempt += 1
            }
            Err(e) => return Err((tmp, e)),
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let Target::Temp { tmp, .. } = &self.target {
            if !tmp.as_os_str().is_empty() {
                let _ = std::fs::remove_file(tmp);
            }
        }
    }
}
