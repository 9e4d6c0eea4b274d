//! End-to-end tests of the command line as a whole: every verb's options and arguments are
//! described in both help layouts, and fatal errors under --json are JSON documents.

use crate::common::*;

/// The brief's check on the one-line layout (`-h`): a line that is only a flag (with its value
/// name) or only a positional, with nothing after it.
fn bare_entry_line(line: &str) -> bool {
    let s = line.trim();
    if s.is_empty() {
        return false;
    }
    // A positional alone: <TRACE>, <PATHS>..., [PATHS]...
    if (s.starts_with('<') || s.starts_with('['))
        && !s.contains(char::is_whitespace)
        && (s.ends_with('>') || s.ends_with(']') || s.ends_with("..."))
    {
        return true;
    }
    // (-X, )?--name( <VALUE>)?
    let mut rest = s;
    let b = rest.as_bytes();
    if b.len() >= 4 && b[0] == b'-' && b[1].is_ascii_alphanumeric() && &rest[2..4] == ", " {
        rest = &rest[4..];
    }
    let Some(r) = rest.strip_prefix("--") else {
        return false;
    };
    let name_len = r
        .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
        .unwrap_or(r.len());
    if name_len == 0 {
        return false;
    }
    let r = &r[name_len..];
    if r.is_empty() {
        return true;
    }
    let Some(v) = r.strip_prefix(" <") else {
        return false;
    };
    let Some(close) = v.find('>') else {
        return false;
    };
    let inner = &v[..close];
    !inner.is_empty()
        && inner
            .chars()
            .all(|c| c.is_ascii_uppercase() || matches!(c, '_' | '|' | '-'))
        && v[close + 1..].trim().is_empty()
}

/// Entries of the Arguments:/Options: sections without a description, in either clap layout:
/// the description on the entry's line (after two spaces), or on the next, deeper-indented
/// lines. "[default: ..]", "[possible values: ..]" or "Possible values:" alone are no
/// description.
fn undescribed(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let not_text = |s: &str| {
        let s = s.trim();
        s.is_empty()
            || s.starts_with("[default")
            || s.starts_with("[possible")
            || s.starts_with("[alias")
            || s.starts_with("Possible values")
    };
    let mut bad = Vec::new();
    let mut in_section = false;
    for (i, l) in lines.iter().enumerate() {
        if !l.starts_with(' ') && !l.is_empty() {
            in_section = *l == "Arguments:" || *l == "Options:";
            continue;
        }
        if !in_section || l.trim().is_empty() || indent(l) > 6 {
            continue;
        }
        let s = l.trim();
        if !(s.starts_with('-') || s.starts_with('<') || s.starts_with('[')) {
            continue;
        }
        let (entry, inline) = match s.find("  ") {
            Some(k) => (&s[..k], s[k..].trim()),
            None => (s, ""),
        };
        let desc = if !inline.is_empty() {
            inline
        } else {
            lines[i + 1..]
                .iter()
                .find(|n| !n.trim().is_empty())
                .filter(|n| indent(n) > 6)
                .map(|n| n.trim())
                .unwrap_or("")
        };
        if not_text(desc) {
            bad.push(format!("{entry} -> {desc:?}"));
        }
    }
    bad
}

#[test]
fn every_option_and_argument_has_a_description() {
    // The checks themselves, on both layouts (so a parser bug cannot make this pass).
    assert!(bare_entry_line("      --direct"));
    assert!(bare_entry_line("  -o, --output <OUTPUT>"));
    assert!(bare_entry_line("      --from <FILE|->"));
    assert!(bare_entry_line("  <TRACE>"));
    assert!(!bare_entry_line("      --direct   Read with O_DIRECT"));
    assert!(!bare_entry_line(
        "  <TRACE>  A trace written by `pagewise record`"
    ));
    let sample = concat!(
        "Arguments:\n  <TRACE>\n          A trace\n\n",
        "Options:\n      --a <X>\n          Possible values:\n\n",
        "      --b  [default: 1]\n  -c, --cc  Text\n      --d\n          Text\n      --e\n\n",
        "Examples:\n  --f\n",
    );
    assert_eq!(
        undescribed(sample),
        [
            "--a <X> -> \"Possible values:\"",
            "--b -> \"[default: 1]\"",
            "--e -> \"\"",
        ]
    );
    let mut bad = Vec::new();
    for verb in [
        "show", "replay", "assist", "record", "run", "copy", "stat", "evict", "load",
    ] {
        let out = bin().args([verb, "--help"]).output().unwrap();
        assert!(out.status.success(), "{verb} --help");
        let long = stdout(&out);
        assert!(long.contains("Options:"), "{verb}: {long}");
        for b in undescribed(&long) {
            bad.push(format!("{verb} --help: {b}"));
        }
        let out = bin().args([verb, "-h"]).output().unwrap();
        assert!(out.status.success(), "{verb} -h");
        let short = stdout(&out);
        for b in undescribed(&short) {
            bad.push(format!("{verb} -h: {b}"));
        }
        for l in short.lines().filter(|l| bare_entry_line(l)) {
            bad.push(format!("{verb} -h: bare line {l:?}"));
        }
    }
    assert!(bad.is_empty(), "without a description:\n{}", bad.join("\n"));
}

#[test]
fn fatal_errors_under_json_are_json_documents() {
    let out = run(bin().args(["stat", "--json", "--bogus"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["error"]["kind"], "usage");

    let out = run(bin().args(["stat", "--json", "--from", "/nonexistent/list"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["error"]["kind"], "fatal");
}

/// A count that must be at least 1 — files or requests in flight, runs — is refused at 0 when
/// the arguments are parsed, as every usage error (exit 1, the flag named on the first line),
/// never taken as 1; nothing is done.
#[test]
fn zero_counts_are_refused_as_usage_errors() {
    let t = tmp();
    let src = t.path().join("src");
    write_file(&src, 100);
    let trace = t.path().join("no.trace");
    let dst = t.path().join("dst");
    let (s, d, tr) = (
        src.to_str().unwrap(),
        dst.to_str().unwrap(),
        trace.to_str().unwrap(),
    );
    for (args, flag) in [
        (vec!["copy", "-j", "0", s, d], "--threads"),
        (vec!["copy", "--threads=0", s, d], "--threads"),
        (vec!["copy", "--depth", "0", s, d], "--depth"),
        (vec!["replay", "--compare", "--runs", "0", tr], "--runs"),
        (vec!["replay", "--depth", "0", tr], "--depth"),
        (vec!["load", "--depth", "0", s], "--depth"),
        (vec!["stat", "-j", "0", s], "--threads"),
    ] {
        let out = run(bin().args(&args));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.contains(flag) && first.contains("'0'"),
            "{args:?}: {err}"
        );
        assert!(!dst.exists(), "{args:?} copied");
        // The same, as the JSON document of a usage error.
        let mut json_args = args.clone();
        json_args.insert(1, if args[0] == "copy" { "--json" } else { "-J" });
        let out = run(bin().args(&json_args));
        assert_eq!(out.status.code(), Some(1), "{json_args:?}");
        assert_eq!(json(&out)["error"]["kind"], "usage", "{json_args:?}");
    }
}
