//! Users and groups by name and by id, from the system's databases (NSS: files, LDAP, ...).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr};

/// One reentrant lookup (`getpwnam_r` and its kin): `call(entry, buf, buflen, result)` fills
/// `entry` with strings in `buf`; `take` reads what is wanted while `buf` is alive. None when
/// there is no such entry or the lookup fails.
fn look_up<T, R>(
    buf_len: usize,
    call: impl FnOnce(*mut T, *mut c_char, usize, *mut *mut T) -> c_int,
    take: impl FnOnce(&T) -> Option<R>,
) -> Option<R> {
    let mut buf = vec![0u8; buf_len];
    // SAFETY: T is a C struct of plain data (passwd, group) that the call fills; buf outlives
    // the call and `take`, and its length is passed; result points into entry or is null.
    unsafe {
        let mut entry: T = std::mem::zeroed();
        let mut result: *mut T = std::ptr::null_mut();
        let rc = call(&mut entry, buf.as_mut_ptr().cast(), buf.len(), &mut result);
        (rc == 0 && !result.is_null())
            .then(|| take(&entry))
            .flatten()
    }
}

/// A name field of an entry, copied out (None when null).
fn name_of(p: *const c_char) -> Option<Vec<u8>> {
    // SAFETY: a non-null name of an entry just filled is a C string in the lookup's buffer,
    // which is alive while `take` runs.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
}

/// The uid of the user named `name` in the system's user database (`getpwnam_r`, so NSS
/// sources count); None when there is no such user or the lookup fails.
pub fn user_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY (of the call): the pointers come from look_up, valid for the call.
    look_up::<libc::passwd, _>(
        16 << 10,
        |e, b, n, r| unsafe { libc::getpwnam_r(c.as_ptr(), e, b, n, r) },
        |pw| Some(pw.pw_uid),
    )
}

/// The name of the user `uid` (`getpwuid_r`); None when it has none or the lookup fails.
pub fn user_name(uid: u32) -> Option<Vec<u8>> {
    // SAFETY (of the call): as in user_id.
    look_up::<libc::passwd, _>(
        16 << 10,
        |e, b, n, r| unsafe { libc::getpwuid_r(uid, e, b, n, r) },
        |pw| name_of(pw.pw_name),
    )
}

/// The gid of the group named `name` in the system's group database (`getgrnam_r`); None
/// when there is no such group or the lookup fails.
pub fn group_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY (of the call): as in user_id.
    look_up::<libc::group, _>(
        64 << 10,
        |e, b, n, r| unsafe { libc::getgrnam_r(c.as_ptr(), e, b, n, r) },
        |gr| Some(gr.gr_gid),
    )
}

/// The name of the group `gid` (`getgrgid_r`); None when it has none or the lookup fails.
pub fn group_name(gid: u32) -> Option<Vec<u8>> {
    // SAFETY (of the call): as in user_id.
    look_up::<libc::group, _>(
        64 << 10,
        |e, b, n, r| unsafe { libc::getgrgid_r(gid, e, b, n, r) },
        |gr| name_of(gr.gr_name),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_both_ways() {
        assert_eq!(user_id("root"), Some(0));
        assert_eq!(user_name(0).as_deref(), Some(&b"root"[..]));
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_name(0).as_deref(), Some(&b"root"[..]));
        assert_eq!(user_id("no such user here"), None);
        assert_eq!(user_id("a\0b"), None);
        assert_eq!(user_name(4_000_000_123), None);
    }
}
