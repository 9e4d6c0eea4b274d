//! The boundary: errors as negative errno plus a per-thread message, panics caught, C strings
//! and arrays read, versioned structs read and written, a C progress callback as an Observer.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pagewise_core::{Error, Observer};

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
    static LAST_NOTICES: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// A C string from any text: NUL bytes (which a path cannot hold, but a message might quote)
/// become `\0`.
fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).expect("no NUL left")
}

pub(crate) fn set_last_error(message: &str) {
    LAST_ERROR.with(|e| *e.borrow_mut() = Some(c_string(message)));
}

pub(crate) fn last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ref().map_or(std::ptr::null(), |s| s.as_ptr()))
}

pub(crate) fn set_last_notices(notices: &[String]) {
    let joined = (!notices.is_empty()).then(|| c_string(&notices.join("\n")));
    LAST_NOTICES.with(|n| *n.borrow_mut() = joined);
}

pub(crate) fn last_notices() -> *const c_char {
    LAST_NOTICES.with(|n| n.borrow().as_ref().map_or(std::ptr::null(), |s| s.as_ptr()))
}

/// A failure to hand back: a positive errno and the message for `pagewise_last_error`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub errno: i32,
    pub message: String,
}

impl Failure {
    pub fn new(errno: i32, message: impl Into<String>) -> Self {
        Failure {
            errno,
            message: message.into(),
        }
    }
    /// EINVAL, for an argument the caller got wrong: `what` names the function and argument.
    pub fn invalid(what: impl Into<String>) -> Self {
        Failure::new(libc::EINVAL, what)
    }
    /// A verb's fatal error, prefixed with the verb (`evict: /x: open failed: ...`).
    pub fn verb(verb: &str, e: &Error) -> Self {
        let errno = match e {
            Error::Invalid { .. } => libc::EINVAL,
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::NoSuchProcess(_) => libc::ESRCH,
            Error::TracingUnavailable { .. } => libc::EPERM,
            Error::Spawn { source, .. } | Error::Tracefs(source) | Error::Wait(source) => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            _ => libc::EIO,
        };
        Failure::new(errno, format!("{verb}: {e}"))
    }
    /// An error from a file handle (its message already names the path and the call).
    pub fn io(e: &std::io::Error) -> Self {
        let errno = pagewise_core::dio::errno(e).unwrap_or(libc::EIO);
        Failure::new(errno, e.to_string())
    }
}

/// Runs an entry point: `Ok(v)` gives `v`; a failure sets the thread's message and C's `errno`
/// and gives `fail(errno)`; a panic is caught (it must never unwind into C) and becomes EIO
/// with a message saying so.
pub(crate) fn call<T>(fail: impl FnOnce(i32) -> T, f: impl FnOnce() -> Result<T, Failure>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            set_errno(e.errno);
            fail(e.errno)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            set_last_error(&format!(
                "internal error in pagewise (a bug; please report it): {what}"
            ));
            set_errno(libc::EIO);
            fail(libc::EIO)
        }
    }
}

fn set_errno(errno: i32) {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() = errno };
}

/// [`call`] for functions returning `int`: 0 or a count on success, `-errno` on failure.
pub(crate) fn call_int(f: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    call(|errno| -errno, f)
}

/// A path argument (`what` names it in the error).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn path_arg(p: *const c_char, what: &str) -> Result<PathBuf, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    if bytes.is_empty() {
        return Err(Failure::new(libc::ENOENT, format!("{what} is empty")));
    }
    Ok(std::ffi::OsStr::from_bytes(bytes).into())
}

/// An array of `n` strings (NULL with `n == 0` is an empty array).
///
/// # Safety
/// `p` is NULL or points to `n` pointers, each NULL or a NUL-terminated string.
pub(crate) unsafe fn string_array(
    p: *const *const c_char,
    n: usize,
    what: &str,
) -> Result<Vec<Vec<u8>>, Failure> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is NULL with a count of {n}"
        )));
    }
    // SAFETY: the caller passes n pointers.
    let ptrs = unsafe { std::slice::from_raw_parts(p, n) };
    ptrs.iter()
        .enumerate()
        .map(|(i, &s)| {
            if s.is_null() {
                return Err(Failure::invalid(format!("{what}[{i}] is NULL")));
            }
            // SAFETY: each entry is a NUL-terminated string.
            Ok(unsafe { CStr::from_ptr(s) }.to_bytes().to_vec())
        })
        .collect()
}

/// [`string_array`] of paths.
///
/// # Safety
/// As [`string_array`].
pub(crate) unsafe fn path_array(
    p: *const *const c_char,
    n: usize,
    what: &str,
) -> Result<Vec<PathBuf>, Failure> {
    // SAFETY: as the caller promised.
    let v = unsafe { string_array(p, n, what) }?;
    Ok(v.into_iter()
        .map(|b| std::ffi::OsString::from_vec(b).into())
        .collect())
}

/// [`string_array`] of UTF-8 strings (globs).
///
/// # Safety
/// As [`string_array`].
pub(crate) unsafe fn text_array(
    p: *const *const c_char,
    n: usize,
    what: &str,
) -> Result<Vec<String>, Failure> {
    // SAFETY: as the caller promised.
    let v = unsafe { string_array(p, n, what) }?;
    v.into_iter()
        .enumerate()
        .map(|(i, b)| {
            String::from_utf8(b).map_err(|_| Failure::invalid(format!("{what}[{i}] is not UTF-8")))
        })
        .collect()
}

use std::os::unix::ffi::OsStringExt;

/// A struct of the ABI whose first field is `uint32_t size`, and for which all bytes zero is
/// a valid value (integers, pointers, optional function pointers).
///
/// # Safety
/// Implement only for `#[repr(C)]` structs starting with a `u32` size, valid when zeroed.
pub(crate) unsafe trait Sized32: Copy {}

/// The options the caller passed: all defaults (zero) for NULL; else the first `size` bytes of
/// theirs over zeros. A larger struct (a newer header) is accepted when the bytes this library
/// does not know are zero, as Linux's `copy_struct_from_user` does.
///
/// # Safety
/// `p` is NULL or points to at least `(*p).size` readable bytes.
pub(crate) unsafe fn read_options<T: Sized32>(p: *const T, what: &str) -> Result<T, Failure> {
    // SAFETY: Sized32 promises zero is valid.
    let mut v: T = unsafe { std::mem::zeroed() };
    let ours = std::mem::size_of::<T>();
    if p.is_null() {
        // SAFETY: the first field is the u32 size.
        unsafe { *(&mut v as *mut T).cast::<u32>() = ours as u32 };
        return Ok(v);
    }
    // SAFETY: the caller's struct starts with its u32 size.
    let theirs = unsafe { p.cast::<u32>().read_unaligned() } as usize;
    if theirs < 4 {
        return Err(Failure::invalid(format!(
            "{what}: size is {theirs}: set it to sizeof the struct"
        )));
    }
    let bytes = p.cast::<u8>();
    if theirs > ours {
        // SAFETY: the caller's struct has `theirs` bytes.
        let tail = unsafe { std::slice::from_raw_parts(bytes.add(ours), theirs - ours) };
        if tail.iter().any(|&b| b != 0) {
            return Err(Failure::new(
                libc::E2BIG,
                format!(
                    "{what}: fields this library ({}) does not know are set (size {theirs}, \
                     known {ours})",
                    env!("CARGO_PKG_VERSION")
                ),
            ));
        }
    }
    // SAFETY: copies min(theirs, ours) bytes of the caller's struct into ours; both are valid
    // for that many bytes and do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes, (&mut v as *mut T).cast::<u8>(), theirs.min(ours))
    };
    Ok(v)
}

/// Checks a report pointer before the verb runs (so a bad one fails before anything is done):
/// NULL (no report wanted) or a `size` of at least 8.
///
/// # Safety
/// `p` is NULL or points to a struct starting with its u32 size.
pub(crate) unsafe fn check_report<T: Sized32>(p: *mut T, what: &str) -> Result<(), Failure> {
    if p.is_null() {
        return Ok(());
    }
    // SAFETY: the caller's struct starts with its u32 size.
    let theirs = unsafe { p.cast::<u32>().read_unaligned() };
    if theirs < 8 {
        return Err(Failure::invalid(format!(
            "{what}: size is {theirs}: set it to sizeof the struct"
        )));
    }
    Ok(())
}

/// Copies `report` into the caller's struct: at most their `size` bytes, and `size` set to the
/// bytes filled.
///
/// # Safety
/// As [`check_report`], with `size` bytes writable.
pub(crate) unsafe fn write_report<T: Sized32>(p: *mut T, mut report: T) {
    if p.is_null() {
        return;
    }
    // SAFETY: as check_report.
    let theirs = unsafe { p.cast::<u32>().read_unaligned() } as usize;
    let n = theirs.min(std::mem::size_of::<T>());
    // SAFETY: the first field is the u32 size.
    unsafe { *(&mut report as *mut T).cast::<u32>() = n as u32 };
    // SAFETY: n bytes are valid in both; distinct objects.
    unsafe { std::ptr::copy_nonoverlapping((&report as *const T).cast::<u8>(), p.cast::<u8>(), n) };
}

/// Called with the files and bytes done so far; return non-zero to stop the verb (its report
/// then says `interrupted`; what was finished is complete).
pub type pagewise_progress_fn =
    Option<unsafe extern "C" fn(files: u64, bytes: u64, user: *mut c_void) -> c_int>;

/// The C callback as an Observer: progress is counted, and the callback is called at most
/// every 100 ms from whichever verb thread polls for cancellation, never two at once.
pub(crate) struct CallbackObserver {
    callback: pagewise_progress_fn,
    user: *mut c_void,
    files: AtomicU64,
    bytes: AtomicU64,
    last: Mutex<Option<Instant>>,
    stop: AtomicBool,
}

// SAFETY: `user` is only handed back to the caller's callback, which the API documents as
// called from the verb's threads (one at a time).
unsafe impl Sync for CallbackObserver {}

impl CallbackObserver {
    pub fn new(callback: pagewise_progress_fn, user: *mut c_void) -> Self {
        CallbackObserver {
            callback,
            user,
            files: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            last: Mutex::new(None),
            stop: AtomicBool::new(false),
        }
    }
}

const CALLBACK_EVERY: Duration = Duration::from_millis(100);

impl Observer for CallbackObserver {
    fn progress(&self, files: u64, bytes: u64) {
        self.files.fetch_add(files, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    fn cancelled(&self) -> bool {
        let Some(cb) = self.callback else {
            return false;
        };
        if self.stop.load(Ordering::Relaxed) {
            return true;
        }
        if let Ok(mut last) = self.last.try_lock() {
            let now = Instant::now();
            if last.is_none_or(|t| now.duration_since(t) >= CALLBACK_EVERY) {
                *last = Some(now);
                let (f, b) = (
                    self.files.load(Ordering::Relaxed),
                    self.bytes.load(Ordering::Relaxed),
                );
                // SAFETY: the caller's callback, with the pointer they gave.
                if unsafe { cb(f, b, self.user) } != 0 {
                    self.stop.store(true, Ordering::Relaxed);
                }
            }
        }
        self.stop.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct V1 {
        size: u32,
        a: u32,
        b: u64,
    }
    unsafe impl Sized32 for V1 {}

    #[repr(C)]
    #[derive(Clone, Copy)]
    struct V2 {
        v1: V1,
        c: u64,
    }

    #[test]
    fn options_are_read_by_size() {
        let d = unsafe { read_options::<V1>(std::ptr::null(), "o") }.unwrap();
        assert_eq!(
            d,
            V1 {
                size: 16,
                a: 0,
                b: 0
            }
        );
        // A shorter (older) struct: the fields it lacks are zero.
        let old = [8u32, 7, 99, 99];
        let v = unsafe { read_options::<V1>(old.as_ptr().cast(), "o") }.unwrap();
        assert_eq!((v.a, v.b), (7, 0));
        // A longer (newer) one: fine while the unknown fields are zero, else E2BIG.
        let mut new = V2 {
            v1: V1 {
                size: 24,
                a: 1,
                b: 2,
            },
            c: 0,
        };
        let v = unsafe { read_options::<V1>((&new as *const V2).cast(), "o") }.unwrap();
        assert_eq!((v.a, v.b), (1, 2));
        new.c = 5;
        let e = unsafe { read_options::<V1>((&new as *const V2).cast(), "o") }.unwrap_err();
        assert_eq!(e.errno, libc::E2BIG);
        let zero = V1 {
            size: 0,
            a: 1,
            b: 1,
        };
        let e = unsafe { read_options::<V1>(&zero, "opts") }.unwrap_err();
        assert_eq!(e.errno, libc::EINVAL);
        assert!(e.message.contains("opts: size is 0"), "{}", e.message);
    }

    #[test]
    fn reports_are_written_up_to_their_size() {
        let mut small = [12u32, 0, 0xdead, 0xbeef];
        unsafe { check_report::<V1>(small.as_mut_ptr().cast(), "r") }.unwrap();
        unsafe {
            write_report::<V1>(
                small.as_mut_ptr().cast(),
                V1 {
                    size: 0,
                    a: 5,
                    b: u64::MAX,
                },
            )
        };
        assert_eq!(
            small,
            [12, 5, u32::MAX, 0xbeef],
            "12 bytes filled, size says so"
        );
        let mut bad = V1 {
            size: 4,
            a: 0,
            b: 0,
        };
        assert!(unsafe { check_report(&mut bad, "r") }.is_err());
    }

    #[test]
    fn failures_and_panics_become_errno_and_a_message_per_thread() {
        assert_eq!(call_int(|| Ok(3)), 3);
        assert_eq!(
            call_int(|| Err(Failure::new(libc::ENOENT, "x: open failed"))),
            -2
        );
        let msg = || {
            unsafe { CStr::from_ptr(last_error()) }
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(msg(), "x: open failed");
        std::thread::spawn(|| assert!(last_error().is_null(), "per thread"))
            .join()
            .unwrap();
        let r = call_int(|| -> Result<c_int, Failure> { panic!("boom {}", 1) });
        assert_eq!(r, -libc::EIO);
        assert!(
            msg().contains("internal error") && msg().contains("boom 1"),
            "{}",
            msg()
        );
        let p: *mut u8 = call(|_| std::ptr::null_mut(), || panic!("static"));
        assert!(p.is_null());
        assert!(msg().ends_with("static"));
    }
}
