//! Directory entries: getdents64(2) through rustix's `RawDir`.

use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::BorrowedFd;

use rustix::fs::{FileType, RawDir};

/// `d_type` values of getdents64(2) that matter to the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirentType {
    /// `DT_REG`: a regular file.
    File,
    /// `DT_DIR`: a directory.
    Dir,
    /// `DT_LNK`: a symbolic link.
    Symlink,
    /// FIFO, socket, device: never opened unless named explicitly.
    Special,
    /// The filesystem did not say (DT_UNKNOWN): the caller must fstatat.
    Unknown,
}

impl From<FileType> for DirentType {
    fn from(t: FileType) -> Self {
        match t {
            FileType::RegularFile => DirentType::File,
            FileType::Directory => DirentType::Dir,
            FileType::Symlink => DirentType::Symlink,
            FileType::Unknown => DirentType::Unknown,
            _ => DirentType::Special,
        }
    }
}

/// One entry read by [`DirReader`].
#[derive(Debug)]
pub struct Dirent {
    /// Inode number (`d_ino`).
    pub ino: u64,
    /// File type as the directory says it (`d_type`).
    pub kind: DirentType,
    /// The entry's name, without any directory.
    pub name: CString,
}

/// Bytes read from the directory per getdents64 call: about a thousand entries.
const DIR_BUF: usize = 32 * 1024;

/// `ssize_t getdents64(int fd, void *dirp, size_t count)` —
/// <https://man7.org/linux/man-pages/man2/getdents64.2.html>, through rustix's `RawDir`.
///
/// Streams the entries of a directory, skipping `.` and `..`. Cheaper than readdir(3): one
/// 32 KiB buffer per directory, no per-entry allocation besides the name (which the caller
/// keeps). Each buffer's entries are taken out at once (rustix's `RawDir` lends them only
/// until its next call), then handed out one by one.
pub struct DirReader<'a> {
    fd: BorrowedFd<'a>,
    /// Empty, with room for [`DIR_BUF`] bytes: its spare capacity is what getdents64 fills,
    /// so it is never initialised by hand.
    buf: Vec<u8>,
    batch: VecDeque<Dirent>,
    eof: bool,
}

impl<'a> DirReader<'a> {
    /// Reads the directory open as `fd` from its current position.
    pub fn new(fd: BorrowedFd<'a>) -> Self {
        DirReader {
            fd,
            buf: Vec::with_capacity(DIR_BUF),
            batch: VecDeque::new(),
            eof: false,
        }
    }

    /// Reads one buffer of entries into `batch` (none at the end of the directory).
    fn fill(&mut self) -> io::Result<()> {
        let mut raw = RawDir::new(self.fd, self.buf.spare_capacity_mut());
        loop {
            let ent = match raw.next() {
                None => {
                    self.eof = true;
                    return Ok(());
                }
                Some(r) => r?,
            };
            let name = ent.file_name();
            if name != c"." && name != c".." {
                self.batch.push_back(Dirent {
                    ino: ent.ino(),
                    kind: ent.file_type().into(),
                    name: name.to_owned(),
                });
            }
            if raw.is_buffer_empty() {
                return Ok(());
            }
        }
    }
}

impl Iterator for DirReader<'_> {
    type Item = io::Result<Dirent>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(d) = self.batch.pop_front() {
                return Some(Ok(d));
            }
            if self.eof {
                return None;
            }
            if let Err(e) = self.fill() {
                self.eof = true;
                return Some(Err(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{fstatat, name_os, open_path, OpenFlags};
    use super::*;
    use std::os::fd::AsFd;

    fn open_dir(p: &std::path::Path) -> std::os::fd::OwnedFd {
        let dir = OpenFlags {
            directory: true,
            ..Default::default()
        };
        open_path(p, dir).unwrap()
    }

    #[test]
    fn dir_reader_lists_a_temp_dirs_entries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("c")).unwrap();
        let fd = open_dir(dir.path());
        let mut got: Vec<(String, DirentType)> = DirReader::new(fd.as_fd())
            .map(|e| {
                let e = e.unwrap();
                let kind = match e.kind {
                    // DT_UNKNOWN: ask fstatat, as the walk does.
                    DirentType::Unknown => {
                        let st = fstatat(Some(fd.as_fd()), &e.name, false).unwrap();
                        if st.is_dir() {
                            DirentType::Dir
                        } else if st.is_symlink() {
                            DirentType::Symlink
                        } else {
                            DirentType::File
                        }
                    }
                    k => k,
                };
                (name_os(&e.name).to_string_lossy().into_owned(), kind)
            })
            .collect();
        got.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            got,
            vec![
                ("a".to_string(), DirentType::File),
                ("b".to_string(), DirentType::Dir),
                ("c".to_string(), DirentType::Symlink),
            ]
        );
    }

    #[test]
    fn dir_reader_reads_past_one_buffer_and_names_inodes() {
        // 3000 entries of ~100-byte names fill ten 32 KiB buffers.
        let dir = tempfile::tempdir().unwrap();
        let mut want: Vec<(String, u64)> = (0..3000)
            .map(|i| {
                let name = format!("{i:0>96}");
                std::fs::write(dir.path().join(&name), b"").unwrap();
                let st = super::super::stat_path(&dir.path().join(&name), false).unwrap();
                (name, st.ino)
            })
            .collect();
        let fd = open_dir(dir.path());
        let mut got: Vec<(String, u64)> = DirReader::new(fd.as_fd())
            .map(|e| {
                let e = e.unwrap();
                (e.name.into_string().unwrap(), e.ino)
            })
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn dir_reader_reports_a_file_that_is_not_a_directory() {
        let f = tempfile::tempfile().unwrap();
        let got: Vec<_> = DirReader::new(f.as_fd()).collect();
        assert_eq!(got.len(), 1, "one error, then the end");
        let e = got.into_iter().next().unwrap().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
    }
}
