//! The shape of the source (issue 41): a lint, not a parser.
//!
//! - `copy/`, `run/` and `bench/` of pagewise-core import one way: the modules of each folder and the
//!   imports between them (`use super::...`, `use crate::copy::...`, `crate::run::...` and
//!   `super::x::` paths in code, a child module's name used as a path) form a graph without a
//!   cycle. `cargo test --test structure -- --nocapture` prints the graph.
//! - Every .rs file under src/, crates/*/src and python/src stays under [`MAX_FILE_LINES`],
//!   each function under [`MAX_FN_LINES`], and braces nest at most [`MAX_DEPTH`] deep inside
//!   a function.
//!
//! Comments and string and char literals are blanked first (newlines kept, so line numbers
//! hold); what is left is scanned for tokens.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The house limit of docs/architecture.md.
const MAX_FILE_LINES: usize = 650;
/// Lines of the longest function, `fn` to its closing brace, its doc comment left out. The
/// longest when this was written (issue 41, after copy/ and run/ were restructured) is 123
/// lines (`Output::open`, src/cli/output.rs); the limit stands just above it, so a function
/// that grows past today's longest fails here and is split by what it does.
const MAX_FN_LINES: usize = 124;
/// Braces open at once inside a function's body, the body's own counted as 1 (closures,
/// match arms, struct literals and blocks all count). The deepest when this was written is 8
/// (`watchdog`, crates/pagewise-core/src/sys/fs.rs); the limit stands just above it, as
/// [`MAX_FN_LINES`] does.
const MAX_DEPTH: usize = 9;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every .rs file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The source with comments and the insides of string, byte-string and char literals
/// replaced by spaces (newlines kept). Lifetimes (`'a`) are left as they are.
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&c, i) {
            // r"..", r#".."#, br".."; the prefix is kept, the contents blanked.
            while c[i] != '"' {
                out.push(c[i]);
                i += 1;
            }
            out.push('"');
            i += 1;
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < c.len() && !c[i..].starts_with(&close) {
                blank(&mut out, c[i]);
                i += 1;
            }
            out.extend(close.iter());
            i += close.len();
        } else if c[i] == '"' {
            out.push('"');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c[i] == '\'' && is_char_literal(&c, i) {
            out.push('\'');
            i += 1;
            while i < c.len() && c[i] != '\'' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            }
            out.push('\'');
            i += 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// `Some(number of #)` when a raw string literal starts at `i` (`r"`, `r#"`, `br"`...), not
/// inside an identifier.
fn raw_string_start(c: &[char], i: usize) -> Option<usize> {
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some(hashes)
}

/// Whether the `'` at `i` opens a char literal (`'x'`, `'\n'`, `'\''`, `'\u{..}'`) rather
/// than a lifetime or a label.
fn is_char_literal(c: &[char], i: usize) -> bool {
    match c.get(i + 1) {
        Some('\\') => true,
        Some(_) => c.get(i + 2) == Some(&'\''),
        None => false,
    }
}

/// 1-based line of the char offset `at` of `code`.
fn line_of(code: &[char], at: usize) -> usize {
    code[..at].iter().filter(|&&ch| ch == '\n').count() + 1
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// The identifier starting at `i`, if one starts there (not in the middle of one).
fn ident_at(c: &[char], i: usize) -> Option<String> {
    if !is_ident(c[i]) || (i > 0 && is_ident(c[i - 1])) || c[i].is_ascii_digit() {
        return None;
    }
    let end = (i..c.len()).find(|&k| !is_ident(c[k])).unwrap_or(c.len());
    Some(c[i..end].iter().collect())
}

// ---------------------------------------------------------------------------------------
// The module graph of a folder.

/// One .rs file of a folder: its module path (`copy::plan::dir`) and its code.
struct Module {
    name: String,
    file: PathBuf,
    code: Vec<char>,
}

/// The modules of `crates/pagewise-core/src/<folder>`, by module path.
fn modules(folder: &str) -> BTreeMap<String, Module> {
    let src = repo().join("crates/pagewise-core/src");
    let mut out = BTreeMap::new();
    for f in rust_files(&src.join(folder)) {
        let rel = f.strip_prefix(&src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        let name = parts.join("::");
        let code = code_only(&fs::read_to_string(&f).unwrap())
            .chars()
            .collect();
        out.insert(
            name.clone(),
            Module {
                name,
                file: f,
                code,
            },
        );
    }
    out
}

/// A path as written (`super::x::Y`) and the inline modules (`mod tests {`) it is inside.
struct Written {
    segments: Vec<String>,
    inline: Vec<String>,
    line: usize,
}

/// Every path of `m` that starts with `crate`, `super`, `self` or one of the file's own
/// child modules (`mod x;`), in `use` trees (expanded: `use super::{a, b::C}` gives two)
/// and in code.
fn written_paths(m: &Module) -> Vec<Written> {
    let c = &m.code;
    let children = child_modules(c);
    let mut out = Vec::new();
    // Inline modules open at each point: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '{' => {
                depth += 1;
                i += 1;
                continue;
            }
            '}' => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            _ => {}
        }
        let Some(word) = ident_at(c, i) else {
            i += 1;
            continue;
        };
        let names: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
        if word == "mod" {
            let rest = skip_ws(c, i + 3);
            if let Some(name) = ident_at(c, rest) {
                let after = skip_ws(c, rest + name.len());
                if c.get(after) == Some(&'{') {
                    inline.push((name, depth + 1));
                }
            }
        }
        if word == "use" {
            let end = (i..c.len()).find(|&k| c[k] == ';').unwrap_or(c.len());
            let tree: String = c[i + 3..end].iter().collect();
            for p in expand_use(tree.trim().trim_start_matches("::")) {
                if p.first().is_some_and(|s| is_root(s, &children)) {
                    let line = line_of(c, i);
                    out.push(Written {
                        segments: p,
                        inline: names.clone(),
                        line,
                    });
                }
            }
            i = end;
            continue;
        }
        // Not the middle of a path, nor a visibility (`pub(in crate::copy)`).
        let before: String = c[..i].iter().rev().take(8).collect();
        let before = before.trim_start();
        let inside = before.starts_with(':')
            || before
                .strip_prefix("ni")
                .is_some_and(|r| !r.starts_with(is_ident));
        if is_root(&word, &children) && !inside {
            let segments = path_at(c, i);
            if segments.len() > 1 {
                let line = line_of(c, i);
                out.push(Written {
                    segments,
                    inline: names,
                    line,
                });
            }
        }
        i += word.len();
    }
    out
}

fn skip_ws(c: &[char], mut i: usize) -> usize {
    while i < c.len() && c[i].is_whitespace() {
        i += 1;
    }
    i
}

fn is_root(first: &str, children: &BTreeSet<String>) -> bool {
    matches!(first, "crate" | "super" | "self") || children.contains(first)
}

/// The modules a file declares as its own files: `mod x;`.
fn child_modules(c: &[char]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for i in 0..c.len() {
        if ident_at(c, i).as_deref() == Some("mod") {
            let at = skip_ws(c, i + 3);
            if let Some(name) = ident_at(c, at) {
                if c.get(skip_ws(c, at + name.len())) == Some(&';') {
                    out.insert(name);
                }
            }
        }
    }
    out
}

/// The segments of the path `a::b::c` starting at `i` (whitespace allowed around `::`).
fn path_at(c: &[char], mut i: usize) -> Vec<String> {
    let mut segs = Vec::new();
    while let Some(w) = ident_at(c, i) {
        i += w.len();
        segs.push(w);
        let j = skip_ws(c, i);
        if c.get(j) == Some(&':') && c.get(j + 1) == Some(&':') {
            i = skip_ws(c, j + 2);
        } else {
            break;
        }
    }
    segs
}

/// The paths a use tree names, `a::{b, c::{d, e as f}, self}` -> a::b, a::c::d, a::c::e, a.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    let segments = |path: &str| -> Vec<String> {
        path.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "*")
            .map(str::to_string)
            .collect()
    };
    let Some(open) = tree.find('{') else {
        // `a::b as c`: the path is what comes before ` as `.
        return vec![segments(tree.split_whitespace().next().unwrap_or(""))];
    };
    let prefix = segments(&tree[..open]);
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut out = Vec::new();
    for part in split_top(inner) {
        for rest in expand_use(part.trim()) {
            let mut p = prefix.clone();
            p.extend(rest.into_iter().filter(|s| s != "self"));
            out.push(p);
        }
    }
    out
}

/// `a, b::{c, d}, e` split at the commas outside braces.
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for ch in s.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    out.push(cur);
    out.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The absolute segments of a path written in module `module` (inside `inline` modules).
fn absolute(module: &str, w: &Written) -> Vec<String> {
    let mut base: Vec<String> = module.split("::").map(str::to_string).collect();
    base.extend(w.inline.iter().cloned());
    let mut segs = w.segments.iter().peekable();
    match segs.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segs.next();
            base.clear();
        }
        Some("self") => {
            segs.next();
        }
        Some("super") => {
            while segs.peek().is_some_and(|s| *s == "super") {
                segs.next();
                base.pop();
            }
        }
        _ => {}
    }
    base.extend(segs.cloned());
    base
}

/// The module of `mods` that an absolute path lands in: the longest module prefix, then,
/// when the next segment is a name that module only imports from another module of the
/// folder (a re-export: `pub use engine::Strategy`), that module (a few levels at most).
fn target(mods: &BTreeMap<String, Module>, abs: &[String]) -> Option<String> {
    let mut path = abs.to_vec();
    for _ in 0..4 {
        let n = (1..=path.len())
            .rev()
            .find(|&n| mods.contains_key(&path[..n].join("::")))?;
        let module = path[..n].join("::");
        let Some(item) = path.get(n) else {
            return Some(module);
        };
        let from = mods[&module].imports_of(item);
        match from {
            Some(p) if p != path => path = p,
            _ => return Some(module),
        }
    }
    Some(path.join("::"))
}

impl Module {
    /// Where this module imports `item` from (absolute, ending with `item`), if it does.
    fn imports_of(&self, item: &str) -> Option<Vec<String>> {
        written_paths(self)
            .into_iter()
            .filter(|w| w.inline.is_empty() && w.segments.last().is_some_and(|s| s == item))
            .map(|w| absolute(&self.name, &w))
            .next()
    }
}

/// module -> the modules of the folder it imports (not itself, nor its inline modules).
fn graph(folder: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(folder);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for m in mods.values() {
        let edges = g.entry(m.name.clone()).or_default();
        for w in written_paths(m) {
            let abs = absolute(&m.name, &w);
            if abs.first().map(String::as_str) != Some(folder) {
                continue;
            }
            if let Some(t) = target(&mods, &abs) {
                if t != m.name {
                    edges.insert(t);
                }
            }
        }
    }
    g
}

/// A cycle of `g`, if it has one, as the modules along it (the first again at the end).
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        n: &str,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for next in g.get(n).into_iter().flatten() {
            match state.get(next).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == next).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(g, next, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if state.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(g, n, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// Where in the folder's files `from` imports `to` (for the failure message).
fn where_imported(folder: &str, from: &str, to: &str) -> String {
    let mods = modules(folder);
    let m = &mods[from];
    let rel = m
        .file
        .strip_prefix(repo())
        .unwrap_or(&m.file)
        .display()
        .to_string();
    written_paths(m)
        .into_iter()
        .find(|w| target(&mods, &absolute(from, w)).as_deref() == Some(to))
        .map(|w| format!("{rel}:{}: {}", w.line, w.segments.join("::")))
        .unwrap_or(rel)
}

fn check_folder(folder: &str) {
    let g = graph(folder);
    // One print: the tests run in parallel, and two graphs printed line by line interleave.
    let mut shown = format!("module graph of {folder}/ (module -> modules it imports):\n");
    for (m, to) in &g {
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        shown += &format!("  {m} -> {}\n", to.join(", "));
    }
    print!("{shown}");
    if let Some(cycle) = find_cycle(&g) {
        let edges: Vec<String> = cycle
            .windows(2)
            .map(|p| {
                format!(
                    "  {} -> {}   ({})",
                    p[0],
                    p[1],
                    where_imported(folder, &p[0], &p[1])
                )
            })
            .collect();
        panic!("{folder}/ imports in a cycle:\n{}", edges.join("\n"));
    }
}

#[test]
fn copy_imports_one_way() {
    check_folder("copy");
}

#[test]
fn run_imports_one_way() {
    check_folder("run");
}

#[test]
fn bench_imports_one_way() {
    check_folder("bench");
}

#[test]
fn the_graph_sees_the_ways_of_writing_an_import() {
    let code: Vec<char> = code_only(
        "mod a;\nuse super::{x, y::{Z, self}};\n// use super::no;\nfn f() { let s = \"super::no\"; \
         super::w::f(); a::g(); crate::copy::v::h(); }\npub(in crate::copy) struct S;\n\
         #[cfg(test)]\nmod tests { use super::*; }\n",
    )
    .chars()
    .collect();
    let m = Module {
        name: "copy::m".into(),
        file: PathBuf::new(),
        code,
    };
    let got: Vec<String> = written_paths(&m)
        .iter()
        .map(|w| absolute(&m.name, w).join("::"))
        .collect();
    let want = [
        "copy::x",
        "copy::y::Z",
        "copy::y",
        "copy::w::f",
        "copy::m::a::g",
        "copy::v::h",
        "copy::m",
    ];
    assert_eq!(got, want);
    let cyclic = BTreeMap::from([
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["a".to_string()])),
    ]);
    assert_eq!(find_cycle(&cyclic).map(|c| c.len()), Some(3));
}

// ---------------------------------------------------------------------------------------
// Sizes: files, functions, nesting.

/// The files the limits hold for: src/, crates/*/src, python/src.
fn limited_files() -> Vec<PathBuf> {
    let mut dirs = vec![repo().join("src"), repo().join("python/src")];
    for e in fs::read_dir(repo().join("crates")).unwrap().flatten() {
        dirs.push(e.path().join("src"));
    }
    dirs.iter().flat_map(|d| rust_files(d)).collect()
}

/// Each function of `code`: (name, line of `fn`, lines, deepest brace nesting in its body).
fn functions(code: &[char]) -> Vec<(String, usize, usize, usize)> {
    let mut out = Vec::new();
    for i in 0..code.len() {
        if ident_at(code, i).as_deref() != Some("fn") {
            continue;
        }
        let Some(name) = ident_at(code, skip_ws(code, i + 2)) else {
            continue; // a fn pointer type: `fn(u64) -> u64`
        };
        // The body: the first `{` outside parentheses and brackets, unless `;` comes first
        // (a declaration without a body).
        let mut k = i;
        let mut parens = 0i32;
        let open = loop {
            match code.get(k) {
                None => break None,
                Some('(' | '[') => parens += 1,
                Some(')' | ']') => parens -= 1,
                Some(';') if parens == 0 => break None,
                Some('{') if parens == 0 => break Some(k),
                _ => {}
            }
            k += 1;
        };
        let Some(open) = open else { continue };
        let (mut depth, mut deepest, mut end) = (0usize, 0usize, open);
        for (j, &ch) in code.iter().enumerate().skip(open) {
            match ch {
                '{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        let first = line_of(code, i);
        out.push((name, first, line_of(code, end) - first + 1, deepest));
    }
    out
}

#[test]
fn files_functions_and_nesting_stay_within_limits() {
    let mut failures = Vec::new();
    let (mut longest, mut deepest) = ((0, String::new()), (0, String::new()));
    for f in limited_files() {
        let text = fs::read_to_string(&f).unwrap();
        let rel = f.strip_prefix(repo()).unwrap().display().to_string();
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            failures.push(format!(
                "{rel}:1: {lines} lines (limit {MAX_FILE_LINES}): split it by responsibility"
            ));
        }
        let code: Vec<char> = code_only(&text).chars().collect();
        for (name, line, len, depth) in functions(&code) {
            let at = format!("{rel}:{line}: fn {name}");
            if len > longest.0 {
                longest = (len, at.clone());
            }
            if depth > deepest.0 {
                deepest = (depth, at.clone());
            }
            if len > MAX_FN_LINES {
                failures.push(format!("{at} is {len} lines long (limit {MAX_FN_LINES})"));
            }
            if depth > MAX_DEPTH {
                failures.push(format!(
                    "{at} nests braces {depth} deep (limit {MAX_DEPTH})"
                ));
            }
        }
    }
    print!(
        "longest function: {} lines, {}\ndeepest nesting: {} levels, {}\n",
        longest.0, longest.1, deepest.0, deepest.1
    );
    assert!(
        failures.is_empty(),
        "over the limits:\n{}",
        failures.join("\n")
    );
}

#[test]
fn literals_and_comments_are_blanked_but_lines_kept() {
    let src = "let a = \"{ // }\"; // {\nlet c = '{'; let l: &'a str = r#\"}\"#; /* { */\n";
    let code = code_only(src);
    assert_eq!(code.lines().count(), 2);
    assert!(!code.contains('{') && !code.contains('}'), "{code}");
    assert!(code.contains("&'a str"));
    let f: Vec<char> = code_only("fn f() {\n  if x {\n    y();\n  }\n}\nfn g(h: fn(u8));\n")
        .chars()
        .collect();
    assert_eq!(functions(&f), vec![("f".to_string(), 1, 5, 2)]);
}
