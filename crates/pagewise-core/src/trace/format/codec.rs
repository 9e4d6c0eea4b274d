//! Reading and writing the parts of a trace: the header, the command, the files, and the
//! two counted sections of fixed-size records (events, faults), both through one routine.

use super::*;

/// The fixed fields before the command.
pub(super) struct Header {
    pub(super) version: u32,
    pub(super) flags: u32,
    pub(super) page_size: u32,
    pub(super) lost_events: u64,
    pub(super) started_unix_ns: u64,
    pub(super) duration_ns: u64,
}

impl Header {
    pub(super) fn read(r: &mut Reader) -> Result<Header, TraceError> {
        if r.take(8, "magic").map_err(|_| TraceError::BadMagic)? != MAGIC {
            return Err(TraceError::BadMagic);
        }
        let version = r.u32("version")?;
        if version != VERSION && version != VERSION_1 {
            return Err(TraceError::UnsupportedVersion(version));
        }
        if r.data.len() < 8 {
            return Err(TraceError::Truncated {
                field: "checksum",
                at: r.data.len(),
            });
        }
        let flags = r.u32("flags")?;
        let page_size = r.u32("page_size")?;
        if flags & !HAS_FAULTS != 0 {
            return Err(TraceError::Corrupt(format!(
                "unknown header flags {flags:#x}"
            )));
        }
        check_page_size(page_size)?;
        Ok(Header {
            version,
            flags,
            page_size,
            lost_events: r.u64("lost")?,
            started_unix_ns: r.u64("started")?,
            duration_ns: r.u64("duration")?,
        })
    }
}

/// What the records of a trace are checked against: its files and its page size.
pub(super) struct Bounds {
    pub(super) nfiles: u32,
    pub(super) page_size: u64,
}

/// A file's recorded size: at most [`MAX_FILE_BYTES`].
pub(super) fn check_file_size(i: usize, size: u64) -> Result<(), TraceError> {
    if size > MAX_FILE_BYTES {
        return Err(TraceError::Corrupt(format!(
            "file {i}: size {size} is larger than any file can be (2^63 - 1 bytes)"
        )));
    }
    Ok(())
}

/// Room for `n` more items in `v`, or [`TraceError::TooLarge`] naming `what` (never an abort).
pub(super) fn reserve<T>(v: &mut Vec<T>, n: u64, what: &str) -> Result<(), TraceError> {
    usize::try_from(n)
        .ok()
        .and_then(|n| v.try_reserve(n).ok())
        .ok_or_else(|| {
            TraceError::TooLarge(format!(
                "no memory for {n} {what} ({} bytes each)",
                std::mem::size_of::<T>()
            ))
        })
}

pub(super) fn check_page_size(page_size: u32) -> Result<(), TraceError> {
    if !page_size.is_power_of_two() || !(512..=1 << 21).contains(&page_size) {
        return Err(TraceError::Corrupt(format!("page size {page_size}")));
    }
    Ok(())
}

pub(super) fn read_command(r: &mut Reader) -> Result<Vec<String>, TraceError> {
    let argc = r.u32("argc")?;
    if argc > MAX_ARGS {
        return Err(TraceError::Corrupt(format!("{argc} command arguments")));
    }
    let mut command = Vec::new();
    reserve(&mut command, argc.min(64) as u64, "command arguments")?;
    for _ in 0..argc {
        let s = r.bytes("argument")?;
        command.push(String::from_utf8_lossy(s).into_owned());
    }
    Ok(command)
}

pub(super) fn read_files(r: &mut Reader, version: u32) -> Result<Vec<TraceFile>, TraceError> {
    let nfiles = r.u32("nfiles")?;
    // Each file takes at least 32 bytes: bound the count by what is left.
    if nfiles as usize > r.left() / 32 {
        return Err(TraceError::Truncated {
            field: "files",
            at: r.pos,
        });
    }
    let mut files = Vec::new();
    reserve(&mut files, nfiles as u64, "files")?;
    for i in 0..nfiles as usize {
        files.push(read_file(r, i, version)?);
    }
    Ok(files)
}

fn read_file(r: &mut Reader, i: usize, version: u32) -> Result<TraceFile, TraceError> {
    let dev = r.u64("file dev")?;
    let ino = r.u64("file inode")?;
    let size = r.u64("file size")?;
    check_file_size(i, size)?;
    let flags = r.u32("file flags")?;
    let known_flags = if version == VERSION_1 {
        FILE_PATH_KNOWN | FILE_DELETED
    } else {
        FILE_PATH_KNOWN | FILE_DELETED | FILE_HANDLE_KNOWN
    };
    if flags & !known_flags != 0 {
        return Err(TraceError::Corrupt(format!(
            "unknown file flags {flags:#x}"
        )));
    }
    let p = r.bytes("file path")?;
    let known = flags & FILE_PATH_KNOWN != 0;
    if !known && !p.is_empty() {
        return Err(TraceError::Corrupt(
            "path present on a file marked unknown".into(),
        ));
    }
    let handle = if version == VERSION_1 {
        None
    } else {
        let h = r.bytes("file handle")?;
        let has = flags & FILE_HANDLE_KNOWN != 0;
        if has == h.is_empty() || h.len() > MAX_HANDLE_BYTES as usize || (has && h.len() < 5) {
            return Err(TraceError::Corrupt(format!(
                "file {i}: handle of {} bytes with flags {flags:#x}",
                h.len()
            )));
        }
        has.then(|| h.to_vec())
    };
    Ok(TraceFile {
        dev_major: (dev >> 32) as u32,
        dev_minor: dev as u32,
        ino,
        size,
        path: known.then(|| String::from_utf8_lossy(p).into_owned()),
        path_bytes: known.then(|| p.to_vec()),
        deleted: flags & FILE_DELETED != 0,
        handle,
    })
}

/// A fixed-size record of a counted section: the events, and the faults. Both are read by
/// [`read_section`] and written by [`write_section`].
pub(super) trait Record: Sized {
    /// `"event"`: names the record in errors.
    const NAME: &'static str;
    /// `"events"`: names the section in errors.
    const SECTION: &'static str;
    /// `"nevents"`: the count's field.
    const COUNT: &'static str;
    /// Bytes of one record.
    const BYTES: u64;
    fn read(r: &mut Reader) -> Result<Self, TraceError>;
    fn write(&self, b: &mut Vec<u8>);
    fn file(&self) -> u32;
    /// Its first page and pages.
    fn pages(&self) -> (u64, u32);
    /// Record `i` names one of the trace's files, and its pages lie within the largest
    /// possible file: `pages` a power of two of at most [`MAX_EVENT_PAGES`], and the byte
    /// offset of their last byte, computed without wrapping, at most [`MAX_FILE_BYTES`].
    fn check(&self, i: u64, b: &Bounds) -> Result<(), TraceError> {
        let name = Self::NAME;
        if self.file() >= b.nfiles {
            return Err(TraceError::Corrupt(format!(
                "{name} {i} names file {} of {}",
                self.file(),
                b.nfiles
            )));
        }
        let (index, pages) = self.pages();
        if !pages.is_power_of_two() || pages > MAX_EVENT_PAGES {
            return Err(TraceError::Corrupt(format!(
                "{name} {i}: {pages} pages (pages come in folios: a power of two, at most \
                 {MAX_EVENT_PAGES})"
            )));
        }
        let end = index
            .checked_add(pages as u64)
            .and_then(|e| e.checked_mul(b.page_size));
        // Its last byte at most 2^63 - 1: the end at most 2^63.
        if end.is_none_or(|e| e - 1 > MAX_FILE_BYTES) {
            return Err(TraceError::Corrupt(format!(
                "{name} {i}: page {index} (+{pages} pages of {} bytes) lies past the largest \
                 possible file (2^63 - 1 bytes)",
                b.page_size
            )));
        }
        Ok(())
    }
}

impl Record for Event {
    const NAME: &'static str = "event";
    const SECTION: &'static str = "events";
    const COUNT: &'static str = "nevents";
    const BYTES: u64 = EVENT_BYTES;
    fn read(r: &mut Reader) -> Result<Self, TraceError> {
        Ok(Event {
            ts_ns: r.u64("event time")?,
            file: r.u32("event file")?,
            pid: r.u32("event pid")?,
            index: r.u64("event index")?,
            pages: r.u32("event pages")?,
        })
    }
    fn write(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.ts_ns.to_le_bytes());
        b.extend_from_slice(&self.file.to_le_bytes());
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.extend_from_slice(&self.index.to_le_bytes());
        b.extend_from_slice(&self.pages.to_le_bytes());
    }
    fn file(&self) -> u32 {
        self.file
    }
    fn pages(&self) -> (u64, u32) {
        (self.index, self.pages)
    }
}

impl Record for Fault {
    const NAME: &'static str = "fault";
    const SECTION: &'static str = "faults";
    const COUNT: &'static str = "nfaults";
    const BYTES: u64 = FAULT_BYTES;
    fn read(r: &mut Reader) -> Result<Self, TraceError> {
        Ok(Fault {
            ts_ns: r.u64("fault time")?,
            file: r.u32("fault file")?,
            pid: r.u32("fault pid")?,
            index: r.u64("fault index")?,
        })
    }
    fn write(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.ts_ns.to_le_bytes());
        b.extend_from_slice(&self.file.to_le_bytes());
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.extend_from_slice(&self.index.to_le_bytes());
    }
    fn file(&self) -> u32 {
        self.file
    }
    fn pages(&self) -> (u64, u32) {
        (self.index, 1)
    }
}

/// Reads a counted section of records: the count, then as many records, each checked against
/// the trace's files and page size. The count must fit in what is left before the checksum;
/// in the `last` section it must use all of it.
pub(super) fn read_section<T: Record>(
    r: &mut Reader,
    bounds: &Bounds,
    last: bool,
) -> Result<Vec<T>, TraceError> {
    let n = r.u64(T::COUNT)?;
    let need = n.checked_mul(T::BYTES).and_then(|n| n.checked_add(8));
    let left = r.left() as u64;
    let Some(need) = need.filter(|&need| need <= left) else {
        return Err(TraceError::Truncated {
            field: T::SECTION,
            at: r.pos,
        });
    };
    if last && need != left {
        return Err(TraceError::Corrupt(format!(
            "{} bytes after the last {}",
            left - need,
            T::NAME
        )));
    }
    let mut out = Vec::new();
    reserve(&mut out, n, T::SECTION)?;
    for i in 0..n {
        let at = r.pos;
        let x = T::read(r)?;
        x.check(i, bounds).map_err(|e| match e {
            TraceError::Corrupt(m) => TraceError::Corrupt(format!("{m} (byte {at})")),
            e => e,
        })?;
        out.push(x);
    }
    Ok(out)
}

/// Writes a counted section: the count, then the records.
pub(super) fn write_section<T: Record>(b: &mut Vec<u8>, records: &[T]) {
    b.extend_from_slice(&(records.len() as u64).to_le_bytes());
    for x in records {
        x.write(b);
    }
}

pub(super) fn put_bytes(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s);
}

pub(super) struct Reader<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.data.len() - self.pos
    }
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], TraceError> {
        if n > self.left() {
            return Err(TraceError::Truncated {
                field,
                at: self.pos,
            });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, TraceError> {
        Ok(u32::from_le_bytes(self.take(4, field)?.try_into().unwrap()))
    }
    pub(super) fn u64(&mut self, field: &'static str) -> Result<u64, TraceError> {
        Ok(u64::from_le_bytes(self.take(8, field)?.try_into().unwrap()))
    }
    fn bytes(&mut self, field: &'static str) -> Result<&'a [u8], TraceError> {
        let n = self.u32(field)?;
        if n > MAX_STR {
            return Err(TraceError::Corrupt(format!("{field} of {n} bytes")));
        }
        self.take(n as usize, field)
    }
}
