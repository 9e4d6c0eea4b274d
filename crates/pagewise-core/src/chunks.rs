//! Parallel work over the chunks of a file: one piece of code for every verb that keeps several
//! I/Os of one large file in flight (copy's strategies, load of a large file).

use crate::sys::AlignedBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Splits extents `(offset, length)` into pieces of at most `chunk` bytes.
pub fn pieces(extents: &[(u64, u64)], chunk: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for &(off, len) in extents {
        let mut o = off;
        while o < off + len {
            let n = chunk.min(off + len - o);
            v.push((o, n));
            o += n;
        }
    }
    v
}

thread_local! {
    /// One I/O buffer kept per thread: allocating (mmap) and freeing (munmap, a TLB shootdown
    /// on every CPU) a multi-MiB buffer per file cost milliseconds per small file.
    static BUF: std::cell::RefCell<Option<AlignedBuf>> = const { std::cell::RefCell::new(None) };
}

fn take_buf(len: usize, align: usize) -> AlignedBuf {
    BUF.with(|b| match b.borrow_mut().take() {
        Some(buf) if buf.len() >= len && buf.align() >= align => buf,
        _ => AlignedBuf::new(len, align),
    })
}

fn give_buf(buf: AlignedBuf) {
    BUF.with(|b| *b.borrow_mut() = Some(buf));
}

/// Why a chunk run stopped early.
pub enum Stopped<E> {
    /// The caller asked to stop; chunks not started were skipped.
    Interrupted,
    /// A chunk's work failed with this error; the others were stopped.
    Failed(E),
}

/// Runs `work(buf, off, len)` over every piece of `extents` with up to `threads` threads, each
/// with its own buffer of `chunk` bytes aligned to `align`. Pieces are taken in offset order,
/// so the device sees a near-sequential stream with `threads` requests in flight. Stops at the
/// first failure (which wins over later ones) or when `interrupted` is set; `done(len)` is
/// called after each finished piece.
pub fn run<E, F, D>(
    extents: &[(u64, u64)],
    chunk: usize,
    threads: usize,
    align: usize,
    interrupted: Option<&AtomicBool>,
    work: F,
    done: D,
) -> Result<(), Stopped<E>>
where
    E: Send,
    F: Fn(&mut AlignedBuf, u64, u64) -> Result<(), E> + Sync,
    D: Fn(u64) + Sync,
{
    let pieces = pieces(extents, chunk as u64);
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let result: Mutex<Option<Stopped<E>>> = Mutex::new(None);
    let threads = threads.clamp(1, pieces.len().max(1));
    let worker = || {
        let mut buf = take_buf(chunk, align);
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if interrupted.is_some_and(|f| f.load(Ordering::Relaxed)) {
                stop.store(true, Ordering::Relaxed);
                result.lock().unwrap().get_or_insert(Stopped::Interrupted);
                break;
            }
            let i = next.fetch_add(1, Ordering::Relaxed) as usize;
            let Some(&(off, len)) = pieces.get(i) else {
                break;
            };
            if let Err(e) = work(&mut buf, off, len) {
                stop.store(true, Ordering::Relaxed);
                result.lock().unwrap().get_or_insert(Stopped::Failed(e));
                break;
            }
            done(len);
        }
        give_buf(buf);
    };
    if threads == 1 {
        worker();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(worker);
            }
        });
    }
    match result.into_inner().unwrap() {
        None => Ok(()),
        Some(s) => Err(s),
    }
}
