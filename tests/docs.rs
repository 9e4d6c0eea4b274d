//! The README and docs/: the README stays a few screens (under 20 KB) and every link in it and
//! in docs/*.md leads somewhere — a relative link to a file of this repository that exists, an
//! anchor to a heading the target has. The README carries no outside links (a test cannot
//! vouch for them offline); docs/ may, and each must at least be an https URL.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The markdown files checked: README.md, CHANGELOG.md and docs/*.md.
fn pages() -> Vec<PathBuf> {
    let mut v = vec![repo().join("README.md"), repo().join("CHANGELOG.md")];
    let mut docs: Vec<_> = fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// The text outside fenced code blocks and inline code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                out.push('`');
            } else if !in_code {
                out.push(c);
            } else {
                out.push('x');
            }
        }
        out.push('\n');
    }
    out
}

/// `[label](target)` link targets of a page (inline links; the project writes no others).
fn links(text: &str) -> Vec<String> {
    let p = prose(text);
    let mut v = Vec::new();
    let b = p.as_bytes();
    let mut i = 0;
    while let Some(k) = p[i..].find("](") {
        let start = i + k + 2;
        let Some(end) = p[start..].find(')') else {
            break;
        };
        let t = &p[start..start + end];
        if !t.is_empty() && !t.contains(char::is_whitespace) && b[i + k] == b']' {
            v.push(t.to_string());
        }
        i = start;
    }
    v
}

/// GitHub's anchor of a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces to `-`; repeated headings get `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut s = slug.clone();
        let mut n = 0;
        while set.contains(&s) {
            n += 1;
            s = format!("{slug}-{n}");
        }
        set.insert(s);
    }
    set
}

#[test]
fn readme_is_a_few_screens() {
    let len = fs::metadata(repo().join("README.md")).unwrap().len();
    assert!(
        len < 20_000,
        "README.md is {len} bytes: the detail belongs in docs/"
    );
    let text = fs::read_to_string(repo().join("README.md")).unwrap();
    for mark in ["<!-- setup:install -->", "<!-- setup:test -->"] {
        assert!(
            text.contains(mark),
            "README.md lost {mark} (.ci/run reads it)"
        );
    }
}

#[test]
fn every_link_leads_somewhere() {
    let mut bad = Vec::new();
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        let rel = page.strip_prefix(repo()).unwrap().display().to_string();
        for t in links(&text) {
            if let Some(rest) = t.strip_prefix("https://") {
                if rel == "README.md" {
                    bad.push(format!("{rel}: outside link {t} (keep them in docs/)"));
                } else if rest.is_empty() {
                    bad.push(format!("{rel}: empty URL"));
                }
                continue;
            }
            if t.contains("://") || t.starts_with("mailto:") {
                bad.push(format!("{rel}: {t}: only https links"));
                continue;
            }
            let (file, anchor) = match t.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (t.as_str(), None),
            };
            let target: PathBuf = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap_or(Path::new(".")).join(file)
            };
            let Ok(target) = target.canonicalize() else {
                bad.push(format!("{rel}: {t}: no such file"));
                continue;
            };
            if !target.starts_with(repo().canonicalize().unwrap()) {
                bad.push(format!("{rel}: {t}: outside the repository"));
                continue;
            }
            if let Some(a) = anchor {
                let Ok(body) = fs::read_to_string(&target) else {
                    bad.push(format!(
                        "{rel}: {t}: an anchor into a file that is not text"
                    ));
                    continue;
                };
                if !anchors(&body).contains(a) {
                    bad.push(format!("{rel}: {t}: no heading with anchor #{a}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "dead links:\n{}", bad.join("\n"));
}

#[test]
fn the_link_reader_reads_links() {
    let text = "See [a](docs/a.md#x-y) and `[not](code)`.\n```\n[no](fence)\n```\n[b](#top)\n";
    assert_eq!(links(text), vec!["docs/a.md#x-y", "#top"]);
    let a = anchors("# The `copy` verb: cp -a\n## Kernels\n## Kernels\n");
    let want: BTreeSet<String> = ["the-copy-verb-cp--a", "kernels", "kernels-1"]
        .map(String::from)
        .into();
    assert_eq!(a, want);
}
