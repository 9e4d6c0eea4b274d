//! How names are shown in text (tables, trace text, messages): one name is one line, and a
//! terminal is never driven by a file name.

/// Escapes a name for text output: control characters (newline, tab, escape...) and bytes that
/// are not UTF-8 become `\xHH`, as fincore and `ls -b` show them, and a backslash becomes `\\`
/// so that the escaped form is unambiguous (a name holding the four characters `\x0a` is not
/// the name holding a newline). JSON carries the exact bytes instead (see [`crate::json`]).
pub fn escape(mut b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    loop {
        match std::str::from_utf8(b) {
            Ok(s) => {
                push_escaped(&mut out, s);
                return out;
            }
            Err(e) => {
                let (good, rest) = b.split_at(e.valid_up_to());
                push_escaped(&mut out, std::str::from_utf8(good).unwrap_or_default());
                let bad = e.error_len().unwrap_or(rest.len());
                for byte in &rest[..bad] {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
                b = &rest[bad..];
            }
        }
    }
}

fn push_escaped(out: &mut String, s: &str) {
    for c in s.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if c.is_control() {
            let mut buf = [0u8; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{byte:02x}"));
            }
        } else {
            out.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_are_unambiguous() {
        assert_eq!(escape(b"a\nb\xff\x1b[31mc"), "a\\x0ab\\xff\\x1b[31mc");
        assert_eq!(escape(br"a\x0ab"), r"a\\x0ab");
        assert_ne!(escape(b"a\nb"), escape(br"a\x0ab"));
        assert_eq!(escape("é/日本".as_bytes()), "é/日本");
    }
}
