//! The tracepoints `top` follows and their records: where each field sits (from the
//! tracepoint's tracefs `format` file, so no kernel's layout is assumed), and one sample of the
//! perf ring decoded into an [`Event`]. Pure functions of bytes: property-tested below.

use crate::trace::TraceUnavailable;
use std::collections::HashMap;

/// Pages added to the page cache (reads, read-ahead, writes into new pages).
pub const ADD: &str = "filemap/mm_filemap_add_to_page_cache";
/// Pages removed from the page cache (reclaim, eviction, truncation).
pub const DELETE: &str = "filemap/mm_filemap_delete_from_page_cache";
/// A folio made dirty (Linux 5.19+; `writeback_dirty_page` before).
pub const DIRTY_FOLIO: &str = "writeback/writeback_dirty_folio";
/// A page made dirty (before Linux 5.19).
pub const DIRTY_PAGE: &str = "writeback/writeback_dirty_page";

/// What an event did to the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Added (mm_filemap_add_to_page_cache).
    Added,
    /// Made dirty (writeback_dirty_folio / writeback_dirty_page).
    Dirtied,
    /// Removed (mm_filemap_delete_from_page_cache).
    Evicted,
}

/// Where the file is named in a record: by the filesystem's device, or by the name of the
/// backing device (bdi) the dirtying tracepoints carry instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dev {
    /// `s_dev` in the kernel's encoding (major << 20 | minor).
    Fs(u32),
    /// The bdi name (NUL-padded, as in the record).
    Bdi([u8; 32]),
}

/// One decoded sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: Kind,
    /// Process (thread group) id from the sample header.
    pub pid: u32,
    /// The file's device.
    pub dev: Dev,
    /// The file's inode number.
    pub ino: u64,
    /// Page index of the folio in the file.
    pub index: u64,
    /// The folio's order (2^order pages) when the record carries it.
    pub order: Option<u8>,
    /// The cgroup v2 id (PERF_SAMPLE_CGROUP), when sampled.
    pub cgroup_id: Option<u64>,
}

/// Where the fields of one tracepoint's record sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// What the tracepoint reports.
    pub kind: Kind,
    /// `i_ino` (filemap) or `ino` (writeback).
    pub ino: usize,
    /// `index`.
    pub index: usize,
    /// `s_dev` (filemap) or the bdi `name[32]` (writeback).
    pub dev: usize,
    /// `order`, where the kernel has it (filemap: 6.x).
    pub order: Option<usize>,
}

/// Field offsets and sizes of a tracepoint's `format` text: `name -> (offset, size)`.
/// Lines that are not `field:` lines are ignored; the input is outside data (bounded: the
/// first 64 KiB).
pub fn parse_format(text: &str) -> HashMap<String, (usize, usize)> {
    let mut fields = HashMap::new();
    let text = text.get(..text.len().min(64 << 10)).unwrap_or("");
    for l in text.lines() {
        // "\tfield:unsigned long i_ino;\toffset:16;\tsize:8;\tsigned:0;"
        let (mut name, mut off, mut size) = (None, None, None);
        for part in l.split(';') {
            let part = part.trim();
            if let Some(decl) = part.strip_prefix("field:") {
                // "char name[32]" -> "name"
                let last = decl.rsplit([' ', '*']).next().unwrap_or("");
                name = Some(last.split('[').next().unwrap_or("").to_string());
            } else if let Some(o) = part.strip_prefix("offset:") {
                off = o.parse::<usize>().ok();
            } else if let Some(s) = part.strip_prefix("size:") {
                size = s.parse::<usize>().ok();
            }
        }
        if let (Some(n), Some(o), Some(s)) = (name, off, size) {
            fields.insert(n, (o, s));
        }
    }
    fields
}

/// The [`Layout`] of tracepoint `event` from its `format` text, or why it cannot be read.
pub fn layout_of(event: &str, kind: Kind, format: &str) -> Result<Layout, TraceUnavailable> {
    let f = parse_format(format);
    let get = |names: &[&str], size: usize| {
        names
            .iter()
            .find_map(|n| f.get(*n).filter(|(_, s)| *s == size).map(|(o, _)| *o))
            .ok_or_else(|| {
                TraceUnavailable(format!(
                    "{event}: this kernel's record has no field {} of {size} bytes",
                    names.join(" or ")
                ))
            })
    };
    let dev = match kind {
        Kind::Dirtied => get(&["name"], 32)?,
        _ => get(&["s_dev"], 4)?,
    };
    Ok(Layout {
        kind,
        ino: get(&["i_ino", "ino"], 8)?,
        index: get(&["index"], 8)?,
        dev,
        order: get(&["order"], 1).ok(),
    })
}

/// Decodes a PERF_RECORD_SAMPLE body of `PERF_SAMPLE_TID | PERF_SAMPLE_RAW` (then
/// `PERF_SAMPLE_CGROUP` with `cgroup`): u32 pid, u32 tid, u32 size, the raw record (padded to
/// 8 bytes with the size word), u64 cgroup id. The record's first u16 is the tracepoint id,
/// looked up in `layouts`. None for a body too short or of an unknown tracepoint.
pub fn decode(body: &[u8], layouts: &[(u16, Layout)], cgroup: bool) -> Option<Event> {
    let u32_at = |b: &[u8], o: usize| Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], o: usize| Some(u64::from_ne_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let pid = u32_at(body, 0)?;
    let size = u32_at(body, 8)? as usize;
    let raw = body.get(12..12usize.checked_add(size)?)?;
    let typ = u16::from_ne_bytes(raw.get(0..2)?.try_into().ok()?);
    let l = &layouts.iter().find(|(t, _)| *t == typ)?.1;
    let dev = match l.kind {
        Kind::Dirtied => Dev::Bdi(raw.get(l.dev..l.dev + 32)?.try_into().ok()?),
        _ => Dev::Fs(u32_at(raw, l.dev)?),
    };
    let order = match l.order {
        Some(o) => Some(*raw.get(o)?),
        None => None,
    };
    let cgroup_id = if cgroup {
        Some(u64_at(body, 12 + size)?)
    } else {
        None
    };
    Some(Event {
        kind: l.kind,
        pid,
        dev,
        ino: u64_at(raw, l.ino)?,
        index: u64_at(raw, l.index)?,
        order,
        cgroup_id,
    })
}

/// One line of a tracefs instance's `trace_pipe` for the tracepoints above, as an [`Event`]
/// (the route where perf events are refused, see `Sampler`). The text is the kernel's
/// `TP_printk`: `COMM-TID [CPU] FLAGS TS: mm_filemap_add_to_page_cache: dev M:m ino HEX
/// [page=P] pfn=0xX ofs=OFFSET [order=N]` (the same for `..._delete_from_page_cache`), and
/// `writeback_dirty_folio: bdi NAME: ino=N index=N` (`_page` before 5.19). The pid is the
/// thread's (trace lines carry the thread id). Outside input: any other line is None, never a
/// panic.
pub fn parse_text(line: &str, page: u64) -> Option<Event> {
    const NAMES: [(&str, Kind); 4] = [
        (": mm_filemap_add_to_page_cache: ", Kind::Added),
        (": mm_filemap_delete_from_page_cache: ", Kind::Evicted),
        (": writeback_dirty_folio: ", Kind::Dirtied),
        (": writeback_dirty_page: ", Kind::Dirtied),
    ];
    let (i, name, kind) = NAMES
        .iter()
        .find_map(|(n, k)| line.find(n).map(|i| (i, *n, *k)))?;
    let (head, body) = (&line[..i], &line[i + name.len()..]);
    let task = head[..head.rfind('[')?].trim_end();
    let pid: u32 = task.rsplit_once('-')?.1.parse().ok()?;
    let field = |body: &str, key: &str| {
        body.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .map(str::to_string)
    };
    let (dev, ino, index, order) = if kind == Kind::Dirtied {
        let rest = body.strip_prefix("bdi ")?;
        let (bdi, rest) = rest.split_once(": ")?;
        let mut name = [0u8; 32];
        let b = bdi.as_bytes();
        if b.is_empty() || b.len() >= 32 {
            return None;
        }
        name[..b.len()].copy_from_slice(b);
        let ino = field(rest, "ino=")?.parse().ok()?;
        let index = field(rest, "index=")?.parse().ok()?;
        (Dev::Bdi(name), ino, index, None)
    } else {
        let mut w = body.split_whitespace();
        let (major, minor) = match (w.next(), w.next()) {
            (Some("dev"), Some(mm)) => mm.split_once(':')?,
            _ => return None,
        };
        let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
        if major >= 1 << 12 || minor >= 1 << 20 {
            return None;
        }
        let ino = match (w.next(), w.next()) {
            (Some("ino"), Some(h)) => u64::from_str_radix(h, 16).ok()?,
            _ => return None,
        };
        let ofs: u64 = field(body, "ofs=")?.parse().ok()?;
        let order = match field(body, "order=") {
            Some(o) => Some(o.parse::<u8>().ok()?),
            None => None,
        };
        (Dev::Fs(major << 20 | minor), ino, ofs / page.max(1), order)
    };
    Some(Event {
        kind,
        pid,
        dev,
        ino,
        index,
        order,
        cgroup_id: None,
    })
}

/// The process and command of a PERF_RECORD_COMM body (u32 pid, u32 tid, NUL-ended name):
/// exec records only (pid == tid).
pub fn exec_comm(body: &[u8]) -> Option<(u32, Vec<u8>)> {
    let pid = u32::from_ne_bytes(body.get(0..4)?.try_into().ok()?);
    let tid = u32::from_ne_bytes(body.get(4..8)?.try_into().ok()?);
    let name = body.get(8..)?;
    let name = &name[..name.iter().position(|&b| b == 0)?.min(16)];
    (pid == tid).then(|| (pid, name.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD_FORMAT: &str = "name: mm_filemap_add_to_page_cache\nID: 600\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:unsigned long pfn;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long i_ino;\toffset:16;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:dev_t s_dev;\toffset:32;\tsize:4;\tsigned:0;\n\
\tfield:unsigned char order;\toffset:36;\tsize:1;\tsigned:0;\n";

    const DIRTY_FORMAT: &str = "format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:char name[32];\toffset:8;\tsize:32;\tsigned:0;\n\
\tfield:ino_t ino;\toffset:40;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:48;\tsize:8;\tsigned:0;\n";

    fn sample(raw: &[u8], cgroup: Option<u64>) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&77u32.to_ne_bytes());
        b.extend_from_slice(&78u32.to_ne_bytes());
        let padded = (raw.len() + 4).div_ceil(8) * 8 - 4;
        b.extend_from_slice(&(padded as u32).to_ne_bytes());
        b.extend_from_slice(raw);
        b.resize(12 + padded, 0);
        if let Some(c) = cgroup {
            b.extend_from_slice(&c.to_ne_bytes());
        }
        b
    }

    #[test]
    fn layouts_come_from_the_format_files() {
        let a = layout_of(ADD, Kind::Added, ADD_FORMAT).unwrap();
        assert_eq!((a.ino, a.index, a.dev, a.order), (16, 24, 32, Some(36)));
        let d = layout_of(DIRTY_FOLIO, Kind::Dirtied, DIRTY_FORMAT).unwrap();
        assert_eq!((d.ino, d.index, d.dev, d.order), (40, 48, 8, None));
        // A 5.14 delete record: no order field (one page each).
        let old = ADD_FORMAT.replace("order", "x");
        assert_eq!(layout_of(DELETE, Kind::Evicted, &old).unwrap().order, None);
        assert!(layout_of(ADD, Kind::Added, "format:\n").is_err());
    }

    #[test]
    fn samples_decode_with_and_without_cgroup() {
        let l = layout_of(ADD, Kind::Added, ADD_FORMAT).unwrap();
        let mut raw = vec![0u8; 37];
        raw[0..2].copy_from_slice(&600u16.to_ne_bytes());
        raw[16..24].copy_from_slice(&12345u64.to_ne_bytes());
        raw[24..32].copy_from_slice(&9u64.to_ne_bytes());
        raw[32..36].copy_from_slice(&((254u32 << 20) | 1).to_ne_bytes());
        raw[36] = 8;
        let layouts = [(600u16, l)];
        let e = decode(&sample(&raw, None), &layouts, false).unwrap();
        assert_eq!(
            (e.pid, e.ino, e.index, e.order, e.dev),
            (77, 12345, 9, Some(8), Dev::Fs((254 << 20) | 1))
        );
        let e = decode(&sample(&raw, Some(42)), &layouts, true).unwrap();
        assert_eq!(e.cgroup_id, Some(42));
        assert!(decode(&sample(&raw, None), &layouts, true).is_none());
        assert!(decode(&sample(&raw, None), &[], false).is_none());
    }

    #[test]
    fn exec_records_name_processes() {
        let mut b = Vec::new();
        b.extend_from_slice(&5u32.to_ne_bytes());
        b.extend_from_slice(&5u32.to_ne_bytes());
        b.extend_from_slice(b"cat\0\0\0\0\0");
        assert_eq!(exec_comm(&b), Some((5, b"cat".to_vec())));
        b[4] = 6;
        assert_eq!(exec_comm(&b), None);
        assert_eq!(exec_comm(&b[..9]), None);
    }

    /// Arbitrary format text and sample bytes: no panic, and a decoded event's fields come
    /// from inside the body.
    #[test]
    fn fuzz_formats_and_samples() {
        use proptest::prelude::*;
        let input = (
            "(\\PC|\t|\n|;|:){0,300}",
            proptest::collection::vec(any::<u8>(), 0..120),
            any::<bool>(),
        );
        crate::fuzzing::fuzz("top events", 1024, input, |(fmt, body, cg)| {
            let _ = parse_format(&fmt);
            if let Some((_, c)) = exec_comm(&body) {
                prop_assert!(c.len() <= 16);
            }
            for kind in [Kind::Added, Kind::Dirtied, Kind::Evicted] {
                if let Ok(l) = layout_of("x/y", kind, &fmt) {
                    let _ = decode(&body, &[(0, l)], cg);
                }
            }
            let l = layout_of(ADD, Kind::Added, ADD_FORMAT).unwrap();
            if decode(&body, &[(u16::from_ne_bytes([0, 0]), l)], cg).is_some() {
                prop_assert!(body.len() >= 12 + 37);
            }
            Ok(())
        });
    }

    #[test]
    fn trace_pipe_lines_parse_for_every_kernel_format() {
        let add = "  python3-1234  [001] ..... 12.345678: mm_filemap_add_to_page_cache: dev 254:1 ino 3a1f pfn=0x1 ofs=8192 order=2";
        let e = parse_text(add, 4096).unwrap();
        assert_eq!(
            (e.kind, e.pid, e.ino, e.index, e.order),
            (Kind::Added, 1234, 0x3a1f, 2, Some(2))
        );
        assert_eq!(e.dev, Dev::Fs(254 << 20 | 1));
        // 5.10: a page pointer and no order.
        let old = "cat-77 [000] .... 5.1: mm_filemap_delete_from_page_cache: dev 8:0 ino 10 page=00000000deadbeef pfn=0x2 ofs=4096";
        let e = parse_text(old, 4096).unwrap();
        assert_eq!(
            (e.kind, e.pid, e.ino, e.index, e.order),
            (Kind::Evicted, 77, 0x10, 1, None)
        );
        // A command with spaces and dashes.
        let odd = "my tool-x-9 [003] d..1. 1.0: writeback_dirty_folio: bdi 254:0: ino=55 index=7";
        let e = parse_text(odd, 4096).unwrap();
        assert_eq!((e.kind, e.pid, e.ino, e.index), (Kind::Dirtied, 9, 55, 7));
        let mut name = [0u8; 32];
        name[..5].copy_from_slice(b"254:0");
        assert_eq!(e.dev, Dev::Bdi(name));
        for bad in [
            "",
            "cat-1 [0] x: sched_switch: prev=a",
            "cat-x [0] 1.0: mm_filemap_add_to_page_cache: dev 8:0 ino 1 ofs=0",
            "cat-1 [0] 1.0: mm_filemap_add_to_page_cache: dev 8 ino 1 ofs=0",
            "cat-1 [0] 1.0: mm_filemap_add_to_page_cache: dev 8:0 ino zz ofs=0",
            "cat-1 [0] 1.0: writeback_dirty_folio: bdi : ino=1 index=2",
        ] {
            assert_eq!(parse_text(bad, 4096), None, "{bad}");
        }
    }

    proptest::proptest! {
        /// Any line: an event or None, never a panic.
        #[test]
        fn any_trace_line_parses_or_not(s in "\\PC{0,200}", page in 0u64..70000) {
            let _ = parse_text(&s, page);
            let line = format!("a-1 [0] 1.0: mm_filemap_add_to_page_cache: {s}");
            let _ = parse_text(&line, page);
            let line = format!("a-1 [0] 1.0: writeback_dirty_folio: bdi {s}");
            let _ = parse_text(&line, page);
        }
    }
}
