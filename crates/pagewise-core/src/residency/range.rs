//! Byte ranges and sizes as users write them (`START-END`, `64K`, `1G`): [`ByteRange`],
//! [`parse_size`] and their [`ParseError`]; ranges of pages ([`PageRange`]).

use crate::sys;
use serde::Serialize;

/// A byte range of every file: `[start, end)`, `end == None` meaning to the end of the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// End (exclusive), `None` for the end of each file.
    pub end: Option<u64>,
}

impl ByteRange {
    /// Parses `START-END`, `START-` or `-END` with optional K/M/G/T (binary) suffixes.
    pub fn parse(s: &str) -> Result<ByteRange, ParseError> {
        let (a, b) = s
            .split_once('-')
            .ok_or_else(|| ParseError::RangeShape(s.to_string()))?;
        let start = if a.is_empty() { 0 } else { parse_size(a)? };
        let end = if b.is_empty() {
            None
        } else {
            Some(parse_size(b)?)
        };
        if let Some(e) = end {
            if e <= start {
                return Err(ParseError::RangeOrder(s.to_string()));
            }
        }
        Ok(ByteRange { start, end })
    }

    /// The page-aligned `(offset, length)` of this range within a file of `size` bytes; the
    /// length is 0 when the range starts at or beyond the end of the file.
    pub fn clamp(&self, size: u64) -> (u64, u64) {
        let page = sys::page_size();
        if self.start >= size {
            return (self.start, 0);
        }
        let start = (self.start / page) * page;
        let end = self.end.unwrap_or(u64::MAX).min(size);
        let end = end.div_ceil(page) * page;
        (start, end.saturating_sub(start))
    }
}

impl ByteRange {
    /// The exact bytes `[start, end)` of a file of `size` bytes that lie within this range
    /// (`[0, size)` without a range; empty at the end of the file when the range starts past
    /// it): what every verb measures.
    pub fn span(&self, size: u64) -> (u64, u64) {
        let start = self.start.min(size);
        (start, self.end.unwrap_or(u64::MAX).min(size).max(start))
    }
}

/// A range of pages of a file: `count` pages from page `first`, the pages
/// `[first, first + count)` (half-open), in units of the page size. What the page-cache events
/// report (`run` keeps the command's pages as these until it drops them). Ordered by `first`,
/// then `count`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageRange {
    /// The first page (its byte offset divided by the page size).
    pub first: u64,
    /// How many pages.
    pub count: u64,
}

impl PageRange {
    /// `count` pages from page `first`.
    pub const fn new(first: u64, count: u64) -> PageRange {
        PageRange { first, count }
    }

    /// The page after the last one (`first + count`).
    pub const fn end(&self) -> u64 {
        self.first + self.count
    }

    /// The same pages in bytes, `(offset, length)`, for pages of `page` bytes.
    pub const fn bytes(&self, page: u64) -> (u64, u64) {
        (self.first * page, self.count * page)
    }
}

/// Why a size or a range could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A suffix other than K, M, G, T, P (optionally followed by `iB` or `B`).
    #[error("unknown size unit in '{0}'")]
    UnknownUnit(String),
    /// Not a non-negative number.
    #[error("'{0}' is not a size")]
    NotASize(String),
    /// A range without its `-`.
    #[error("range '{0}' must look like START-END, START- or -END")]
    RangeShape(String),
    /// A range whose end is not after its start.
    #[error("range '{0}': end must be after start")]
    RangeOrder(String),
    /// A size of 2^64 bytes or more (or infinite).
    #[error("'{0}' is larger than any size (2^64 bytes)")]
    TooLarge(String),
}

/// Parses `4096`, `64K`, `1.5G`, `2MiB` (binary units; B optional).
pub fn parse_size(s: &str) -> Result<u64, ParseError> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                'P' => 1 << 50,
                _ => return Err(ParseError::UnknownUnit(s.to_string())),
            };
            (&t[..t.len() - 1], m)
        }
        _ => (t, 1),
    };
    // Whole numbers exactly (an f64 holds 53 bits); beyond 2^64 bytes refused, not saturated.
    if let Ok(n) = num.parse::<u64>() {
        return n
            .checked_mul(mult)
            .ok_or_else(|| ParseError::TooLarge(s.to_string()));
    }
    let v: f64 = num
        .parse()
        .map_err(|_| ParseError::NotASize(s.to_string()))?;
    if v.is_nan() || v < 0.0 {
        return Err(ParseError::NotASize(s.to_string()));
    }
    let bytes = v * mult as f64;
    if bytes >= u64::MAX as f64 {
        return Err(ParseError::TooLarge(s.to_string()));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ranges_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("2MiB").unwrap(), 2 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("x").is_err());
        assert_eq!(
            ByteRange::parse("1M-2M").unwrap(),
            ByteRange {
                start: 1 << 20,
                end: Some(2 << 20)
            }
        );
        assert_eq!(
            ByteRange::parse("4K-").unwrap(),
            ByteRange {
                start: 4096,
                end: None
            }
        );
        assert_eq!(
            ByteRange::parse("-8K").unwrap(),
            ByteRange {
                start: 0,
                end: Some(8192)
            }
        );
        assert!(ByteRange::parse("5M-1M").is_err());
        assert!(ByteRange::parse("5M").is_err());
    }

    #[test]
    fn clamp_aligns_to_pages() {
        let p = sys::page_size();
        let r = ByteRange {
            start: 100,
            end: Some(p + 1),
        };
        assert_eq!(r.clamp(10 * p), (0, 2 * p));
        assert_eq!(ByteRange::default().clamp(0), (0, 0));
        assert_eq!(ByteRange::default().clamp(1), (0, p));
        let r = ByteRange {
            start: 20 * p,
            end: None,
        };
        assert_eq!(r.clamp(10 * p).1, 0);
        // A range starting past the end of a file shorter than a page covers nothing of it
        // (it used to cover the file's last page).
        let r = ByteRange {
            start: 1 << 20,
            end: Some(3 << 20),
        };
        assert_eq!(r.clamp(5000).1, 0);
        assert_eq!(r.span(5000), (5000, 5000));
        assert_eq!(r.span(2 << 20), (1 << 20, 2 << 20));
        assert_eq!(ByteRange::default().span(5000), (0, 5000));
    }
}
