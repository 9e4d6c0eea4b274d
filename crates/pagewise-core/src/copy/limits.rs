//! Sizes as rsync reads them (`--max-size`, `--min-size`, `--bwlimit`): a number with an
//! optional fraction, a unit (`b`, `k`, `m`, `g`, `t`, `p`, any case) that counts in 1024s,
//! or in 1000s when followed by `b` (`kb`, `MB`), `ib` allowed (`KiB`), and an optional
//! `+1` or `-1` ("just over", "just under").

use crate::error::Error;

/// Parses an rsync size argument; `default_unit` applies to a bare number (`b` for sizes,
/// `k` for `--bwlimit`). `option` names the option in the error.
pub fn parse_rsync_size(arg: &str, default_unit: u8, option: &'static str) -> Result<u64, Error> {
    let bad = |why: &str| Error::Invalid {
        what: option,
        message: format!("{arg:?} is {why} (a size such as 100, 1.5K, 10MB, 2G-1)"),
    };
    let b = arg.as_bytes();
    let mut i = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if b.get(i) == Some(&b'.') {
        i += 1 + b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
    }
    let number = &arg[..i];
    if number.is_empty() || number == "." {
        return Err(bad("not a number"));
    }
    let (unit, mut rest) = match b.get(i) {
        Some(&c) if c != b'+' && c != b'-' => (c, &b[i + 1..]),
        _ => (default_unit, &b[i..]),
    };
    let reps = match unit.to_ascii_lowercase() {
        b'b' => 0,
        b'k' => 1,
        b'm' => 2,
        b'g' => 3,
        b't' => 4,
        b'p' => 5,
        _ => return Err(bad("invalid")),
    };
    let mult: f64 = if let [b'b' | b'B', tail @ ..] = rest {
        rest = tail;
        1000.0
    } else if rest.len() >= 2 && rest[..2].eq_ignore_ascii_case(b"ib") {
        rest = &rest[2..];
        1024.0
    } else {
        1024.0
    };
    let value: f64 = number.parse().map_err(|_| bad("not a number"))?;
    let size = value * mult.powi(reps);
    if !size.is_finite() || size >= u64::MAX as f64 / 2.0 {
        return Err(bad("too large"));
    }
    let mut size = size as u64;
    match rest {
        [] => {}
        [b'+', b'1'] => size += 1,
        [b'-', b'1'] => size = size.saturating_sub(1),
        _ => return Err(bad("invalid")),
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_rsync_reads_them() {
        let p = |s| parse_rsync_size(s, b'b', "max_size").ok();
        assert_eq!(p("100"), Some(100));
        assert_eq!(p("1K"), Some(1024));
        assert_eq!(p("1k"), Some(1024));
        assert_eq!(p("1kb"), Some(1000));
        assert_eq!(p("1KiB"), Some(1024));
        assert_eq!(p("2.9K"), Some(2969));
        assert_eq!(p("1M+1"), Some((1 << 20) + 1));
        assert_eq!(p("1G-1"), Some((1 << 30) - 1));
        assert_eq!(p("5b"), Some(5));
        for bad in [
            "",
            "x",
            "1x",
            "1Kx",
            "-1",
            "1K+2",
            ".",
            "1e9",
            "99999999999P",
        ] {
            assert_eq!(p(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_rsync_size("50", b'k', "bwlimit").ok(),
            Some(50 * 1024)
        );
        assert_eq!(
            parse_rsync_size("50M", b'k', "bwlimit").ok(),
            Some(50 << 20)
        );
    }

    #[test]
    fn fuzz_sizes() {
        use proptest::prelude::*;
        let s = proptest::string::string_regex("[0-9.kKmMbBiI+-]{0,12}").unwrap();
        crate::fuzzing::fuzz("rsync sizes", 2048, (s, any::<bool>()), |(s, k)| {
            let _ = parse_rsync_size(&s, if k { b'k' } else { b'b' }, "size");
        });
    }
}
