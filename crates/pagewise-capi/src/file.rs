//! File handles for cache-neutral I/O (`pagewise_core::dio::DirectFile`) and aligned buffers
//! (`pagewise_core::sys::AlignedBuf`).
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::{Mutex, MutexGuard};

use libc::ssize_t;
use pagewise_core::dio::{CachePolicy, DirectFile, OpenMode};
use pagewise_core::sys::{AlignedBuf, MAX_ALIGN};

use crate::ffi::{self, call, call_int, Failure};

/// Open flag: reads allowed.
pub const PAGEWISE_READ: u32 = 1;
/// Open flag: writes allowed.
pub const PAGEWISE_WRITE: u32 = 2;
/// Open flag: create the file if missing (mode 0666 less the umask; needs PAGEWISE_WRITE).
pub const PAGEWISE_CREATE: u32 = 4;
/// Open flag: cut the file to length 0 (needs PAGEWISE_WRITE).
pub const PAGEWISE_TRUNC: u32 = 8;
/// Open flag: every write goes to the end of the file (needs PAGEWISE_WRITE).
pub const PAGEWISE_APPEND: u32 = 16;
/// Open flag: with PAGEWISE_CREATE, fail with -EEXIST if the file exists.
pub const PAGEWISE_EXCL: u32 = 32;

/// Cache policy: O_DIRECT, any buffer, offset and length (aligned ones zero-copy).
pub const PAGEWISE_DIRECT: u32 = 0;
/// Cache policy: buffered I/O with RWF_DONTCACHE (Linux 6.14+).
pub const PAGEWISE_DONTCACHE: u32 = 1;
/// Cache policy: buffered I/O, pages dropped behind after writeback.
pub const PAGEWISE_DROP_BEHIND: u32 = 2;

const OPEN_FLAGS: u32 = PAGEWISE_READ
    | PAGEWISE_WRITE
    | PAGEWISE_CREATE
    | PAGEWISE_TRUNC
    | PAGEWISE_APPEND
    | PAGEWISE_EXCL;

/// A file opened with pagewise_open: reads and writes of any buffer, offset and length that
/// leave the page cache as it was. Requests on one handle from several threads are serialised.
pub struct pagewise_file {
    file: Mutex<DirectFile>,
    /// Every notice handed out, so earlier pointers stay valid until close (a fallback on the
    /// first request can lengthen the notice).
    notices: Mutex<Vec<CString>>,
}

impl pagewise_file {
    fn lock(&self) -> Result<MutexGuard<'_, DirectFile>, Failure> {
        self.file.lock().map_err(|_| {
            Failure::new(
                libc::EIO,
                "file handle unusable: an earlier call on it failed internally",
            )
        })
    }
}

fn policy_code(p: CachePolicy) -> c_int {
    (match p {
        CachePolicy::Direct => PAGEWISE_DIRECT,
        CachePolicy::DontCache => PAGEWISE_DONTCACHE,
        CachePolicy::DropBehind => PAGEWISE_DROP_BEHIND,
    }) as c_int
}

/// # Safety
/// `f` is NULL or a handle from pagewise_open not closed yet.
unsafe fn handle<'a>(f: *const pagewise_file, what: &str) -> Result<&'a pagewise_file, Failure> {
    // SAFETY: as the caller promised.
    unsafe { f.as_ref() }.ok_or_else(|| Failure::new(libc::EBADF, format!("{what}: file is NULL")))
}

/// Opens `path` for cache-neutral I/O. `flags`: PAGEWISE_READ, PAGEWISE_WRITE, PAGEWISE_CREATE,
/// PAGEWISE_TRUNC, PAGEWISE_APPEND, PAGEWISE_EXCL; `policy`: PAGEWISE_DIRECT, _DONTCACHE or
/// _DROP_BEHIND. Where the filesystem refuses the policy the next one is used
/// (pagewise_file_policy, pagewise_file_notice say which and why).
///
/// Returns the handle, or NULL with `errno` and pagewise_last_error() (which names the path
/// and the call) set.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pagewise_open(
    path: *const c_char,
    flags: u32,
    policy: u32,
) -> *mut pagewise_file {
    call(
        |_| std::ptr::null_mut(),
        || {
            // SAFETY: as the caller promised.
            let path = unsafe { ffi::path_arg(path, "pagewise_open: path") }?;
            if flags & !OPEN_FLAGS != 0 {
                return Err(Failure::invalid(format!(
                    "pagewise_open: {}: unknown flag bits {:#x}",
                    path.display(),
                    flags & !OPEN_FLAGS
                )));
            }
            let policy = match policy {
                PAGEWISE_DIRECT => CachePolicy::Direct,
                PAGEWISE_DONTCACHE => CachePolicy::DontCache,
                PAGEWISE_DROP_BEHIND => CachePolicy::DropBehind,
                p => {
                    return Err(Failure::invalid(format!(
                        "pagewise_open: {}: unknown policy {p}",
                        path.display()
                    )))
                }
            };
            let mode = OpenMode {
                read: flags & PAGEWISE_READ != 0,
                write: flags & PAGEWISE_WRITE != 0,
                create: flags & PAGEWISE_CREATE != 0,
                truncate: flags & PAGEWISE_TRUNC != 0,
                append: flags & PAGEWISE_APPEND != 0,
                exclusive: flags & PAGEWISE_EXCL != 0,
                ..OpenMode::read()
            };
            let file = DirectFile::open(&path, mode, policy).map_err(|e| {
                // The error names the path and the call itself, but for a bad mode.
                let mut f = Failure::verb("open", &e);
                f.message = match e {
                    pagewise_core::Error::Invalid { .. } => {
                        format!("pagewise_open: {}: {e}", path.display())
                    }
                    _ => e.to_string(),
                };
                f
            })?;
            Ok(Box::into_raw(Box::new(pagewise_file {
                file: Mutex::new(file),
                notices: Mutex::new(Vec::new()),
            })))
        },
    )
}

/// The part pagewise_pread and pagewise_pwrite share: the handle checked (`name` in the
/// errors), nothing done for a zero length, EFAULT for a NULL `buf`, the length capped at
/// `isize::MAX`; `io` moves the bytes with that length. Returns its count or a negative errno.
///
/// # Safety
/// `file` is NULL or an open handle.
unsafe fn transfer(
    file: *mut pagewise_file,
    name: &str,
    buf_is_null: bool,
    len: usize,
    io: impl FnOnce(&mut DirectFile, usize) -> std::io::Result<usize>,
) -> ssize_t {
    call(
        |errno| -(errno as ssize_t),
        || {
            // SAFETY: as the caller promised.
            let f = unsafe { handle(file, name) }?;
            if len == 0 {
                return Ok(0);
            }
            if buf_is_null {
                return Err(Failure::new(libc::EFAULT, format!("{name}: buf is NULL")));
            }
            let len = len.min(isize::MAX as usize);
            let n = io(&mut *f.lock()?, len).map_err(|e| Failure::io(&e))?;
            Ok(n as ssize_t)
        },
    )
}

/// Reads up to `len` bytes at `offset` into `buf` (any address, offset and length; aligned
/// ones go straight to the disk). Returns the bytes read (fewer only at the end of the file,
/// 0 there) or a negative errno.
///
/// # Safety
/// `file` is an open handle; `buf` is valid for `len` bytes of writing.
#[no_mangle]
pub unsafe extern "C" fn pagewise_pread(
    file: *mut pagewise_file,
    buf: *mut c_void,
    len: usize,
    offset: u64,
) -> ssize_t {
    let io = |f: &mut DirectFile, len| {
        // SAFETY: the caller passes len writable bytes (transfer has refused a NULL buf).
        let b = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        f.read_at(b, offset)
    };
    // SAFETY: as the caller promised.
    unsafe { transfer(file, "pagewise_pread", buf.is_null(), len, io) }
}

/// Writes the `len` bytes of `buf` at `offset` (at the end with PAGEWISE_APPEND). Returns
/// `len` or a negative errno. Bytes may be staged until the next non-contiguous request,
/// pagewise_file_sync or pagewise_close, which report a failure to write them.
///
/// # Safety
/// `file` is an open handle; `buf` is valid for `len` bytes of reading.
#[no_mangle]
pub unsafe extern "C" fn pagewise_pwrite(
    file: *mut pagewise_file,
    buf: *const c_void,
    len: usize,
    offset: u64,
) -> ssize_t {
    let io = |f: &mut DirectFile, len| {
        // SAFETY: the caller passes len readable bytes (transfer has refused a NULL buf).
        let b = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        f.write_at(b, offset)
    };
    // SAFETY: as the caller promised.
    unsafe { transfer(file, "pagewise_pwrite", buf.is_null(), len, io) }
}

/// The cache policy in force on `file` (PAGEWISE_DIRECT, _DONTCACHE, _DROP_BEHIND), which is
/// the one asked for unless the filesystem refused it; or a negative errno.
///
/// # Safety
/// `file` is an open handle.
#[no_mangle]
pub unsafe extern "C" fn pagewise_file_policy(file: *const pagewise_file) -> c_int {
    call_int(|| {
        // SAFETY: as the caller promised.
        let f = unsafe { handle(file, "pagewise_file_policy") }?;
        Ok(policy_code(f.lock()?.policy()))
    })
}

/// Why the policy in force is not the one asked for, in one line (NULL when it is). Valid
/// until pagewise_close.
///
/// # Safety
/// `file` is an open handle.
#[no_mangle]
pub unsafe extern "C" fn pagewise_file_notice(file: *const pagewise_file) -> *const c_char {
    call(
        |_| std::ptr::null(),
        || {
            // SAFETY: as the caller promised.
            let f = unsafe { handle(file, "pagewise_file_notice") }?;
            let Some(now) = f.lock()?.notice().map(str::to_owned) else {
                return Ok(std::ptr::null());
            };
            let mut kept = f
                .notices
                .lock()
                .map_err(|_| Failure::new(libc::EIO, "poisoned"))?;
            if kept.last().is_none_or(|n| n.as_bytes() != now.as_bytes()) {
                kept.push(CString::new(now.replace('\0', "")).expect("no NUL"));
            }
            Ok(kept.last().expect("just pushed").as_ptr())
        },
    )
}

/// What requests on `file` must be aligned to for zero-copy I/O: the buffer's address to
/// `*memory`, offsets and lengths to `*offset` (either pointer may be NULL). Other requests
/// work too, through a bounce buffer. Returns 0 or a negative errno.
///
/// # Safety
/// `file` is an open handle; `memory` and `offset` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn pagewise_file_alignment(
    file: *const pagewise_file,
    memory: *mut usize,
    offset: *mut usize,
) -> c_int {
    call_int(|| {
        // SAFETY: as the caller promised.
        let f = unsafe { handle(file, "pagewise_file_alignment") }?;
        let a = f.lock()?.alignment();
        // SAFETY: NULL or writable, as the caller promised.
        unsafe {
            if let Some(m) = memory.as_mut() {
                *m = a.memory;
            }
            if let Some(o) = offset.as_mut() {
                *o = a.offset;
            }
        }
        Ok(0)
    })
}

/// The length of the file in bytes (staged writes included), or a negative errno.
///
/// # Safety
/// `file` is an open handle.
#[no_mangle]
pub unsafe extern "C" fn pagewise_file_size(file: *const pagewise_file) -> i64 {
    call(
        |errno| -(errno as i64),
        || {
            // SAFETY: as the caller promised.
            let f = unsafe { handle(file, "pagewise_file_size") }?;
            let n = f.lock()?.len().map_err(|e| Failure::io(&e))?;
            Ok(n as i64)
        },
    )
}

/// Writes what is staged, waits for the write-back of what was written (dropping its pages)
/// and flushes it to stable storage (fdatasync). Returns 0 or a negative errno.
///
/// # Safety
/// `file` is an open handle.
#[no_mangle]
pub unsafe extern "C" fn pagewise_file_sync(file: *mut pagewise_file) -> c_int {
    call_int(|| {
        // SAFETY: as the caller promised.
        let f = unsafe { handle(file, "pagewise_file_sync") }?;
        f.lock()?.sync().map_err(|e| Failure::io(&e))?;
        Ok(0)
    })
}

/// Cuts or extends the file to `length` bytes. Returns 0 or a negative errno.
///
/// # Safety
/// `file` is an open handle.
#[no_mangle]
pub unsafe extern "C" fn pagewise_file_truncate(file: *mut pagewise_file, length: u64) -> c_int {
    call_int(|| {
        // SAFETY: as the caller promised.
        let f = unsafe { handle(file, "pagewise_file_truncate") }?;
        f.lock()?.set_len(length).map_err(|e| Failure::io(&e))?;
        Ok(0)
    })
}

/// Writes what is staged, drops what was written from the cache, and closes the file. The
/// handle is freed even when this fails; a failure (negative errno) means data written
/// earlier may not be in the file. NULL is a no-op returning 0.
///
/// # Safety
/// `file` is NULL or an open handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn pagewise_close(file: *mut pagewise_file) -> c_int {
    call_int(|| {
        if file.is_null() {
            return Ok(0);
        }
        // SAFETY: made by Box::into_raw in pagewise_open, closed once.
        let f = unsafe { Box::from_raw(file) };
        let inner = f.file.into_inner().map_err(|_| {
            Failure::new(
                libc::EIO,
                "pagewise_close: the handle was unusable (an earlier call failed internally)",
            )
        })?;
        inner.close().map_err(|e| Failure::io(&e))?;
        Ok(0)
    })
}

/// Buffers from pagewise_aligned_alloc by address, so that pagewise_aligned_free knows each
/// one's layout (and ignores what it did not hand out).
static BUFFERS: Mutex<Option<HashMap<usize, AlignedBuf>>> = Mutex::new(None);

fn buffers() -> MutexGuard<'static, Option<HashMap<usize, AlignedBuf>>> {
    BUFFERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A zeroed buffer of `size` bytes whose address is a multiple of `*alignment` (rounded up to
/// a power of two, at most 1 GiB; NULL or 0: 4096, enough for O_DIRECT on any common device),
/// or NULL with `errno` (EINVAL: an alignment beyond 1 GiB; ENOMEM: no memory for `size`) and
/// pagewise_last_error() set. `*alignment` receives the alignment used. Free it with
/// pagewise_aligned_free.
///
/// # Safety
/// `alignment` is NULL or valid for reading and writing.
#[no_mangle]
pub unsafe extern "C" fn pagewise_aligned_alloc(size: usize, alignment: *mut usize) -> *mut c_void {
    call(
        |_| std::ptr::null_mut(),
        || {
            // SAFETY: NULL or valid, as the caller promised.
            let want = unsafe { alignment.as_ref() }.copied().unwrap_or(0);
            let want = if want == 0 { 4096 } else { want };
            let align = want
                .checked_next_power_of_two()
                .filter(|&a| a <= MAX_ALIGN)
                .ok_or_else(|| {
                    Failure::invalid(format!(
                        "pagewise_aligned_alloc: alignment {want} is beyond {MAX_ALIGN} (1 GiB)"
                    ))
                })?;
            let mut b = AlignedBuf::try_alloc(size, align).map_err(|e| {
                let errno = pagewise_core::dio::errno(&e).unwrap_or(libc::ENOMEM);
                Failure::new(errno, format!("pagewise_aligned_alloc: {e}"))
            })?;
            let p = b.as_mut_ptr();
            // SAFETY: NULL or writable, as the caller promised.
            if let Some(a) = unsafe { alignment.as_mut() } {
                *a = b.align();
            }
            buffers()
                .get_or_insert_with(HashMap::new)
                .insert(p as usize, b);
            Ok(p.cast())
        },
    )
}

/// Frees a buffer from pagewise_aligned_alloc (NULL, or a pointer it did not return, is
/// ignored).
///
/// # Safety
/// `ptr` is not used after this.
#[no_mangle]
pub unsafe extern "C" fn pagewise_aligned_free(ptr: *mut c_void) {
    call(
        |_| (),
        || {
            let b = buffers().as_mut().and_then(|m| m.remove(&(ptr as usize)));
            drop(b);
            Ok(())
        },
    )
}
