//! Users and groups by name, from the system's databases (NSS: files, LDAP, ...).
#![allow(unsafe_code)]

/// The uid of the user named `name` in the system's user database (`getpwnam_r`, so NSS
/// sources count); None when there is no such user or the lookup fails.
pub fn user_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: passwd is plain data filled by getpwnam_r; buf outlives the call and its length
    // is passed; result points into pw or is null.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwnam_r(
            c.as_ptr(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        (rc == 0 && !result.is_null()).then_some(pw.pw_uid)
    }
}

/// The gid of the group named `name` in the system's group database (`getgrnam_r`); None
/// when there is no such group or the lookup fails.
pub fn group_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 64 << 10];
    // SAFETY: as in user_id, with struct group.
    unsafe {
        let mut gr: libc::group = std::mem::zeroed();
        let mut result: *mut libc::group = std::ptr::null_mut();
        let rc = libc::getgrnam_r(
            c.as_ptr(),
            &mut gr,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        (rc == 0 && !result.is_null()).then_some(gr.gr_gid)
    }
}
