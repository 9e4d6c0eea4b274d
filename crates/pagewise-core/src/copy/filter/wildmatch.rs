//! rsync's wildmatch (lib/wildmatch.c) ported: `*` and `?` stop at `/`, `**` crosses it,
//! `[...]` classes with ranges, `!`/`^` negation and `[:name:]`, `\\` escapes; the ABORT
//! results cut the search short as rsync's do (no exponential time on hostile patterns).

/// The last `count` `/`-separated elements of `text` (None when it has fewer).
pub(super) fn trailing_elements(text: &[u8], count: usize) -> Option<&[u8]> {
    let mut left = count;
    for (i, &b) in text.iter().enumerate().rev() {
        if b == b'/' {
            left -= 1;
            if left == 0 {
                return Some(&text[i + 1..]);
            }
        }
    }
    (left == 1).then_some(text)
}

/// rsync's wildmatch_array with `where < 0`: at the start, then after every `/`.
pub(super) fn match_after_any_slash(pattern: &[u8], text: &[u8]) -> bool {
    let mut m = dowild(pattern, text);
    if m == Match::AbortAll {
        return false;
    }
    let mut at = 0;
    while m != Match::True {
        let Some(slash) = text[at..].iter().position(|&b| b == b'/') else {
            return false;
        };
        at += slash + 1;
        m = dowild(pattern, &text[at..]);
        if m == Match::AbortAll {
            return false;
        }
    }
    true
}

/// The outcomes of rsync's dowild: the aborts cut the search short (no exponential time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Match {
    False,
    True,
    AbortAll,
    AbortToStarStar,
}

/// rsync's dowild (lib/wildmatch.c) over one text.
pub(super) fn dowild(p: &[u8], t: &[u8]) -> Match {
    let (mut pi, mut ti) = (0, 0);
    while let Some(&pc) = p.get(pi) {
        let Some(&tc) = t.get(ti) else {
            if pc != b'*' {
                return Match::AbortAll;
            }
            return star(p, pi, t, ti);
        };
        match pc {
            b'\\' => {
                pi += 1;
                if p.get(pi) != Some(&tc) {
                    return Match::False;
                }
            }
            b'?' if tc == b'/' => return Match::False,
            b'?' => {}
            b'*' => return star(p, pi, t, ti),
            b'[' => match class(p, &mut pi, tc) {
                Some(true) => {}
                Some(false) => return Match::False,
                None => return Match::AbortAll,
            },
            _ if tc != pc => return Match::False,
            _ => {}
        }
        pi += 1;
        ti += 1;
    }
    if ti < t.len() {
        Match::False
    } else {
        Match::True
    }
}

/// A run of `*` at `p[pi]` against `t[ti..]`.
fn star(p: &[u8], mut pi: usize, t: &[u8], mut ti: usize) -> Match {
    pi += 1;
    let special = p.get(pi) == Some(&b'*');
    while p.get(pi) == Some(&b'*') {
        pi += 1;
    }
    let rest = &p[pi..];
    if rest.is_empty() {
        // A trailing `**` matches everything, a trailing `*` only what has no more `/`.
        return if !special && t[ti..].contains(&b'/') {
            Match::False
        } else {
            Match::True
        };
    }
    while let Some(&tc) = t.get(ti) {
        let m = dowild(rest, &t[ti..]);
        if m != Match::False {
            if !special || m != Match::AbortToStarStar {
                return m;
            }
        } else if !special && tc == b'/' {
            return Match::AbortToStarStar;
        }
        ti += 1;
    }
    Match::AbortAll
}

/// A `[...]` class at `p[*pi]` (the `[`) against `tc`: Some(matched) with `*pi` on its `]`,
/// None when the pattern is malformed (rsync's ABORT_ALL).
fn class(p: &[u8], pi: &mut usize, tc: u8) -> Option<bool> {
    let at = |i: usize| p.get(i).copied().unwrap_or(0);
    *pi += 1;
    let mut pc = at(*pi);
    if pc == b'^' {
        pc = b'!';
    }
    let negated = pc == b'!';
    if negated {
        *pi += 1;
        pc = at(*pi);
    }
    let mut prev = 0u8;
    let mut matched = false;
    loop {
        if pc == 0 {
            return None;
        }
        if pc == b'\\' {
            *pi += 1;
            pc = at(*pi);
            if pc == 0 {
                return None;
            }
            matched |= tc == pc;
        } else if pc == b'-' && prev != 0 && at(*pi + 1) != 0 && at(*pi + 1) != b']' {
            *pi += 1;
            pc = at(*pi);
            if pc == b'\\' {
                *pi += 1;
                pc = at(*pi);
                if pc == 0 {
                    return None;
                }
            }
            matched |= tc <= pc && tc >= prev;
            pc = 0;
        } else if pc == b'[' && at(*pi + 1) == b':' {
            match named_class(p, pi, tc)? {
                Some(hit) => {
                    matched |= hit;
                    pc = 0;
                }
                None => matched |= tc == b'[',
            }
        } else {
            matched |= tc == pc;
        }
        prev = pc;
        *pi += 1;
        pc = at(*pi);
        if pc == b']' {
            break;
        }
    }
    Some(matched != negated && tc != b'/')
}

/// `[:name:]` at `p[*pi]`: Some(Some(hit)) with `*pi` on its last `]`; Some(None) when it is
/// not a class name after all (`[` taken literally, `*pi` unchanged); None when malformed.
fn named_class(p: &[u8], pi: &mut usize, tc: u8) -> Option<Option<bool>> {
    let start = *pi + 2;
    let end = start + p.get(start..)?.iter().position(|&b| b == b']')?;
    if end < start + 1 || p[end - 1] != b':' {
        return Some(None);
    }
    let name = &p[start..end - 1];
    let c = tc as char;
    let hit = match name {
        b"alnum" => c.is_ascii_alphanumeric(),
        b"alpha" => c.is_ascii_alphabetic(),
        b"blank" => tc == b' ' || tc == b'\t',
        b"cntrl" => c.is_ascii_control(),
        b"digit" => c.is_ascii_digit(),
        b"graph" => c.is_ascii_graphic(),
        b"lower" => c.is_ascii_lowercase(),
        b"print" => c.is_ascii_graphic() || tc == b' ',
        b"punct" => c.is_ascii_punctuation(),
        b"space" => c.is_ascii_whitespace() || tc == 0x0b,
        b"upper" => c.is_ascii_uppercase(),
        b"xdigit" => c.is_ascii_hexdigit(),
        _ => return None,
    };
    *pi = end;
    Some(Some(hit))
}
