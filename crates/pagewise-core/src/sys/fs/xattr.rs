//! Extended attributes: flistxattr(2), fgetxattr(2), fsetxattr(2), through rustix.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::BorrowedFd;

use rustix::io::Errno;

/// `ssize_t flistxattr(int fd, char *list, size_t size)` and `ssize_t fgetxattr(int fd, const
/// char *name, void *value, size_t size)` —
/// <https://man7.org/linux/man-pages/man2/listxattr.2.html>,
/// <https://man7.org/linux/man-pages/man2/getxattr.2.html>, through rustix.
///
/// All extended attributes of an open file as (name, value) pairs. ENOTSUP yields none.
pub fn xattrs(fd: BorrowedFd<'_>) -> io::Result<Vec<(CString, Vec<u8>)>> {
    let mut names = vec![0u8; 4096];
    let n = loop {
        match rustix::fs::flistxattr(fd, &mut names[..]) {
            Ok(n) => break n,
            Err(Errno::RANGE) => names.resize(names.len() * 4, 0),
            Err(Errno::NOTSUP) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        }
    };
    let mut out = Vec::new();
    for name in names[..n].split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let cname = CString::new(name).expect("xattr names have no interior NUL");
        let mut val = vec![0u8; 256];
        loop {
            match rustix::fs::fgetxattr(fd, cname.as_c_str(), &mut val[..]) {
                Ok(n) => {
                    val.truncate(n);
                    break;
                }
                Err(Errno::RANGE) => val.resize(val.len() * 8, 0),
                Err(e) => return Err(e.into()),
            }
        }
        out.push((cname, val));
    }
    Ok(out)
}

/// `int fsetxattr(int fd, const char *name, const void *value, size_t size, int flags)` with
/// flags 0 (create or replace) — <https://man7.org/linux/man-pages/man2/setxattr.2.html>,
/// through rustix.
pub fn set_xattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> io::Result<()> {
    Ok(rustix::fs::fsetxattr(
        fd,
        name,
        value,
        rustix::fs::XattrFlags::empty(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::{require, scratch_dir};
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn xattrs_round_trip_small_and_large_values() {
        let dir = scratch_dir();
        let f = std::fs::File::create(dir.path().join("f")).unwrap();
        match set_xattr(f.as_fd(), c"user.pagewise.small", b"v") {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                require(false, "user xattrs on the test's filesystem");
                return;
            }
            r => r.unwrap(),
        }
        // Past the first 256-byte guess: the value buffer grows.
        let big: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        set_xattr(f.as_fd(), c"user.pagewise.big", &big).unwrap();
        set_xattr(f.as_fd(), c"user.pagewise.small", b"w").unwrap(); // replaces
        let mut got = xattrs(f.as_fd()).unwrap();
        got.retain(|(n, _)| n.to_bytes().starts_with(b"user.pagewise."));
        got.sort();
        assert_eq!(
            got,
            vec![
                (c"user.pagewise.big".to_owned(), big),
                (c"user.pagewise.small".to_owned(), b"w".to_vec()),
            ]
        );
    }

    #[test]
    fn a_file_without_xattrs_has_none() {
        let dir = scratch_dir();
        let f = std::fs::File::create(dir.path().join("f")).unwrap();
        let got = xattrs(f.as_fd()).unwrap();
        assert!(
            got.iter().all(|(n, _)| !n.to_bytes().starts_with(b"user.")),
            "{got:?}"
        );
        let e = set_xattr(f.as_fd(), c"nonamespace", b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP));
    }
}
