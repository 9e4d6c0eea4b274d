//! Opening a [`DirectFile`]: the open(2) with its fallbacks (no read access, O_DIRECT refused),
//! the checks of what was opened, and the policy and alignment in force.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use super::read::Window;
use super::requests::{Behind, Io};
use super::write::Stage;
use super::{Alignment, CachePolicy, DirectFile, OpenMode, READAHEAD_MIN};
use crate::error::{Error, Op};
use crate::sys::{self, FileOpen, Stat};

impl DirectFile {
    /// Opens `path` for cache-neutral I/O under `policy`, falling back as the module doc says
    /// ([`policy`](Self::policy) tells the one in force, [`notice`](Self::notice) why).
    ///
    /// A file opened for writing is opened for reading too where permissions allow (O_DIRECT
    /// writes of a partial block read the rest of it). Only regular files and block devices.
    pub fn open(
        path: impl AsRef<Path>,
        mode: OpenMode,
        policy: CachePolicy,
    ) -> Result<DirectFile, Error> {
        mode.validate()?;
        let path = path.as_ref();
        let io_err = |op: Op, source: io::Error| Error::Io {
            path: path.to_path_buf(),
            op,
            source,
        };
        let how = FileOpen {
            read: true,
            write: mode.write,
            create: mode.create.then_some(mode.permissions),
            exclusive: mode.exclusive,
            truncate: mode.truncate,
            direct: policy == CachePolicy::Direct,
        };
        let (fd, how, notice) = open_with_fallbacks(path, mode, how)?;
        let st = sys::fstat(fd.as_fd()).map_err(|e| io_err(Op::Fstat, e))?;
        check_kind(&st).map_err(|e| io_err(Op::Open, e))?;
        sys::set_nonblock(fd.as_fd(), false).map_err(|e| io_err(Op::Open, e))?;
        let page = sys::page_size() as usize;
        let mut io = Io {
            shmem: sys::is_shmem(fd.as_fd()),
            fd,
            path: path.to_path_buf(),
            policy: CachePolicy::Direct,
            notice,
            proven: false,
            align: Alignment {
                memory: page,
                offset: page,
            },
            behind: Behind::default(),
        };
        settle_policy(&mut io, how.direct, policy, &st).map_err(|e| io_err(Op::OpenDirect, e))?;
        if io.shmem {
            let note = "tmpfs keeps the file's pages in memory whatever the policy";
            io.notice = Some(match io.notice.take() {
                Some(n) => format!("{n} ({note})"),
                None => format!("{}: {note}", path.display()),
            });
        }
        Ok(DirectFile {
            io,
            mode,
            window: Window {
                ahead: READAHEAD_MIN,
                ..Window::default()
            },
            stage: Stage::default(),
            closed: false,
        })
    }
}

/// open(2) with `how`, falling back where the file cannot be opened so: without read access
/// (a file we may write but not read), without O_DIRECT where it is refused (the notice says
/// so). The descriptor, the flags it was opened with, and the notice.
fn open_with_fallbacks(
    path: &Path,
    mode: OpenMode,
    mut how: FileOpen,
) -> Result<(OwnedFd, FileOpen, Option<String>), Error> {
    let mut notice = None;
    loop {
        match sys::open_file(path, how) {
            Ok(fd) => return Ok((fd, how, notice)),
            // A file we may write but not read: O_DIRECT then cannot complete a partial
            // block (reads of it fail with EBADF).
            Err(e) if e.raw_os_error() == Some(libc::EACCES) && how.read && !mode.read => {
                how.read = false;
            }
            Err(e) if how.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                notice = Some(format!(
                    "{}: open(O_DIRECT) refused ({e}): falling back to dontcache",
                    path.display()
                ));
                how.direct = false;
                // The refused open may have created the file already (the check comes
                // after creation): it is ours, so no O_EXCL this time.
                how.exclusive = false;
            }
            Err(e) => {
                let op = if how.direct { Op::OpenDirect } else { Op::Open };
                return Err(Error::Io {
                    path: path.to_path_buf(),
                    op,
                    source: e,
                });
            }
        }
    }
}

/// Only regular files and block devices: EISDIR for a directory, EINVAL for anything else.
fn check_kind(st: &Stat) -> io::Result<()> {
    if st.is_file() || st.is_block_device() {
        return Ok(());
    }
    Err(if st.is_dir() {
        io::Error::from_raw_os_error(libc::EISDIR)
    } else {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a {}, not a regular file or block device", st.kind()),
        )
    })
}

/// The policy in force once opened (`direct`: opened with O_DIRECT): on tmpfs, O_DIRECT falls
/// back; with O_DIRECT, the alignment from statx (else the device's logical block size, else
/// 4096); O_DIRECT refused at open becomes dontcache; a buffered policy is taken as asked.
fn settle_policy(io: &mut Io, direct: bool, policy: CachePolicy, st: &Stat) -> io::Result<()> {
    if direct && io.shmem {
        io.fall_back(
            "O_DIRECT",
            "tmpfs has no direct I/O: its O_DIRECT is buffered I/O over its own pages",
        )?;
    } else if direct {
        io.align = match sys::dio_align(io.fd.as_fd()) {
            Some((mem, off)) => Alignment {
                memory: (mem as usize).next_power_of_two(),
                offset: (off as usize).next_power_of_two(),
            },
            None => {
                let a = sys::logical_block_size(st.dev).map_or(4096, |b| b as usize);
                Alignment {
                    memory: a,
                    offset: a,
                }
            }
        };
    } else if policy == CachePolicy::Direct {
        // O_DIRECT refused at open (the notice says so).
        io.become_buffered(CachePolicy::DontCache);
    } else {
        io.become_buffered(policy);
    }
    Ok(())
}
