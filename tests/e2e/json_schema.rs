//! Every `--json` document of every verb validates against the documented schema
//! (docs/schema/pagewise.schema.json, described in docs/json.md): the same keys across verbs,
//! bytes everywhere, no key the schema does not name, and names that are not UTF-8 carried
//! losslessly (`path` + `path_bytes`).
//!
//! The schema is generated from the report types (pagewise_core::schema) and checked in: a
//! test below fails when the file is not what the types give now, and rewrites it when run
//! with PAGEWISE_BLESS=1:
//!
//!     PAGEWISE_BLESS=1 cargo test --profile ci --test e2e json_schema::checked_in_schema_is_current
//!
//! The validator below covers the subset of JSON Schema the file uses ($ref to #/$defs, type,
//! const, enum, properties, required, additionalProperties, items, minimum, maximum); a
//! keyword it does not know fails the test, so the schema cannot drift into what is not checked.

use crate::common::*;
use serde_json::Value;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Output;

const KNOWN: &[&str] = &[
    "$ref",
    "type",
    "const",
    "enum",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minimum",
    "maximum",
];

fn schema() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schema/pagewise.schema.json");
    serde_json::from_slice(&fs::read(p).unwrap()).unwrap()
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        other => panic!("schema: unknown type {other}"),
    }
}

/// Errors of `v` against schema `s` (`at` is the JSON path for messages).
fn check(root: &Value, s: &Value, v: &Value, at: &str, errs: &mut Vec<String>) {
    let s = s.as_object().expect("a schema is an object");
    for k in s.keys() {
        assert!(
            KNOWN.contains(&k.as_str()),
            "schema keyword {k} not checked"
        );
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.strip_prefix("#/$defs/").expect("local $ref");
        return check(root, &root["$defs"][name], v, at, errs);
    }
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(t) => type_ok(t, v),
            Value::Array(ts) => ts.iter().any(|t| type_ok(t.as_str().unwrap(), v)),
            _ => panic!("schema: bad type"),
        };
        if !ok {
            errs.push(format!("{at}: {v} is not of type {t}"));
            return;
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            errs.push(format!("{at}: {v} is not {c}"));
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            errs.push(format!("{at}: {v} not in {e:?}"));
        }
    }
    if let (Some(n), Some(m)) = (v.as_f64(), s.get("minimum").and_then(Value::as_f64)) {
        if n < m {
            errs.push(format!("{at}: {n} < {m}"));
        }
    }
    if let (Some(n), Some(m)) = (v.as_f64(), s.get("maximum").and_then(Value::as_f64)) {
        if n > m {
            errs.push(format!("{at}: {n} > {m}"));
        }
    }
    if let Some(o) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap();
            if !o.contains_key(r) {
                errs.push(format!("{at}: missing key {r}"));
            }
        }
        for (k, x) in o {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => check(root, ps, x, &format!("{at}.{k}"), errs),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => errs.push(format!("{at}: unexpected key {k}")),
                    Some(Value::Bool(true)) | None => {}
                    Some(ap) => check(root, ap, x, &format!("{at}.{k}"), errs),
                },
            }
        }
    }
    if let (Some(a), Some(items)) = (v.as_array(), s.get("items")) {
        for (i, x) in a.iter().enumerate() {
            check(root, items, x, &format!("{at}[{i}]"), errs);
        }
    }
}

/// Asserts `v` is a valid `def` document.
pub(crate) fn valid(def: &str, v: &Value) {
    let root = schema();
    assert!(root["$defs"].get(def).is_some(), "no schema for {def}");
    let mut errs = Vec::new();
    check(&root, &root["$defs"][def], v, def, &mut errs);
    assert!(
        errs.is_empty(),
        "{def} does not match the schema:\n{}\n{v:#}",
        errs.join("\n")
    );
}

fn doc(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("one JSON document on stdout")
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect()
}

/// The file as [`pagewise_core::schema::document`] writes it.
fn generated() -> String {
    let mut text = serde_json::to_string_pretty(&pagewise_core::schema::document()).unwrap();
    text.push('\n');
    text
}

#[test]
fn checked_in_schema_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schema/pagewise.schema.json");
    let generated = generated();
    if std::env::var_os("PAGEWISE_BLESS").is_some() {
        fs::write(&path, &generated).unwrap();
        return;
    }
    let checked_in = fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let line = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(checked_in.lines().count().min(generated.lines().count()));
        panic!(
            "{} is stale (first difference at line {}): regenerate it with\n  \
             PAGEWISE_BLESS=1 cargo test --profile ci --test e2e json_schema::checked_in_schema_is_current",
            path.display(),
            line + 1
        );
    }
}

#[test]
fn the_validator_rejects_what_the_schema_forbids() {
    let root = schema();
    let mut errs = Vec::new();
    let bad =
        serde_json::json!({"path": "x", "op": "open", "message": "m", "errno": 2, "cached": 1});
    check(&root, &root["$defs"]["error"], &bad, "error", &mut errs);
    assert_eq!(errs, vec!["error: unexpected key cached"]);
    let mut errs = Vec::new();
    check(
        &root,
        &root["$defs"]["totals"],
        &serde_json::json!({}),
        "t",
        &mut errs,
    );
    assert!(errs.iter().any(|e| e.contains("missing key cached_bytes")));
}

#[test]
fn every_verb_json_matches_the_schema() {
    let t = tmp();
    let d = t.path().join("tree");
    fs::create_dir_all(d.join("sub")).unwrap();
    write_file(&d.join("a"), 100_000);
    write_file(&d.join("sub/b"), 5000);
    // A name that is not UTF-8 and one with a newline: carried losslessly everywhere.
    let odd = d.join(std::ffi::OsStr::from_bytes(b"odd\xffname"));
    write_file(&odd, 3000);
    write_file(&d.join("new\nline"), 10);
    let missing = t.path().join("missing");

    let out = run(bin().args(["stat", "--json", "-l"]).arg(&d).arg(&missing));
    assert_eq!(out.status.code(), Some(2));
    let v = doc(&out);
    valid("stat", &v);
    let f = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f.get("path_bytes").is_some())
        .expect("the non-UTF-8 name has path_bytes");
    let raw: Vec<u8> = f["path_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(raw, odd.as_os_str().as_bytes(), "lossless");
    assert!(v["files"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["path"].as_str().unwrap().ends_with("new\nline")));
    assert_eq!(
        v["roots"].as_array().unwrap().len(),
        1,
        "no row for the missing root"
    );
    assert_eq!(v["errors"][0]["path"], missing.to_str().unwrap());

    let out = run(bin().args(["stat", "--json", "--map=10", "-l"]).arg(&d));
    valid("stat", &doc(&out));

    let out = run(bin().args(["stat", "--json-lines"]).arg(&d).arg(&missing));
    let ls = lines(&out);
    assert!(ls.iter().all(|l| !l.is_null()));
    for l in &ls[..ls.len() - 1] {
        match l["type"].as_str().unwrap() {
            "file" => valid("stat_line_file", l),
            "error" => valid("line_error", l),
            other => panic!("unexpected line type {other}"),
        }
    }
    valid("stat_line_summary", ls.last().unwrap());

    let out = run(bin().args(["evict", "--json-lines"]).arg(&d));
    let ls = lines(&out);
    for l in &ls[..ls.len() - 1] {
        valid("evict_line_file", l);
    }
    valid("evict_line_summary", ls.last().unwrap());
    let out = run(bin().args(["evict", "--json", "--dry-run"]).arg(&d));
    valid("evict", &doc(&out));

    let out = run(bin().args(["load", "--json"]).arg(&d));
    valid("load", &doc(&out));
    let out = run(bin().args(["load", "--json-lines"]).arg(&d));
    valid("load_line_summary", lines(&out).last().unwrap());

    let out = run(bin()
        .args(["copy", "--json"])
        .arg(&d)
        .arg(t.path().join("copy")));
    assert!(out.status.success());
    valid("copy", &doc(&out));
    assert!(t
        .path()
        .join("copy")
        .join(std::ffi::OsStr::from_bytes(b"odd\xffname"))
        .exists());
    // Per entry, as a copy goes (-u over the copy just made: every entry skipped), and a
    // dry run's document.
    let out = run(bin()
        .args(["copy", "-u", "--json-lines"])
        .arg(&d)
        .arg(t.path().join("copy")));
    let ls = lines(&out);
    assert!(ls.len() > 1);
    for l in &ls[..ls.len() - 1] {
        match l["type"].as_str() {
            Some("entry") => valid("copy_line_entry", l),
            Some("error") => valid("line_error", l),
            other => panic!("unexpected line type {other:?}"),
        }
    }
    valid("copy_line_summary", ls.last().unwrap());
    let out = run(bin()
        .args(["copy", "--dry-run", "--json"])
        .arg(&d)
        .arg(t.path().join("copy-dry")));
    valid("copy", &doc(&out));
    assert!(!t.path().join("copy-dry").exists());
    // A copy that fails for one file: its error carries the name's bytes.
    let out = run(bin()
        .args(["copy", "--json"])
        .arg(&odd)
        .arg(missing.join("x")));
    assert_eq!(out.status.code(), Some(2));
    let v = doc(&out);
    valid("copy", &v);

    let out = run(bin().args(["stat", "--json", "--bogus"]));
    assert_eq!(out.status.code(), Some(1));
    let v = doc(&out);
    valid("fatal_error", &v);
    assert_eq!(v["error"]["kind"], "usage");
    let out = run(bin().args(["stat", "--json", "--from"]).arg(&missing));
    assert_eq!(out.status.code(), Some(1));
    valid("fatal_error", &doc(&out));

    if !require_root("the trace documents (tracing)") {
        return;
    }
    let trace = t.path().join("t.trace");
    sync_and_evict(&odd);
    let out = run(bin()
        .args(["record", "--faults", "-o"])
        .arg(&trace)
        .args(["--", "cat"])
        .arg(&odd));
    assert!(out.status.success());
    let out = run(bin().args(["show", "--format", "json"]).arg(&trace));
    let v = doc(&out);
    valid("trace", &v);
    assert!(
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.get("path_bytes").is_some()),
        "the traced non-UTF-8 name keeps its bytes"
    );
    let out = run(bin().args(["replay", "--json"]).arg(&trace));
    valid("replay", &doc(&out));
    let out = run(bin()
        .args(["evict", "--json", "--dry-run", "--trace"])
        .arg(&trace));
    valid("trace_cache", &doc(&out));
    let out = run(bin().args(["load", "--json", "--trace"]).arg(&trace));
    valid("trace_cache", &doc(&out));
    let out = run(bin().args(["assist", "--json", "--simulate"]).arg(&trace));
    valid("assist_simulation", &doc(&out));
    let report = t.path().join("run.json");
    let out = run(bin()
        .args(["run", "--report"])
        .arg(&report)
        .args(["--", "cat"])
        .arg(&odd));
    assert!(out.status.success());
    valid(
        "run",
        &serde_json::from_slice(&fs::read(&report).unwrap()).unwrap(),
    );
    let out = run(bin()
        .args(["run", "--assist", "--report"])
        .arg(&report)
        .args(["--", "cat"])
        .arg(d.join("a")));
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&fs::read(&report).unwrap()).unwrap();
    valid("run", &v);
    assert!(
        v["prefetched_bytes"].is_u64(),
        "run --assist says what it prefetched"
    );
    let out = run(bin()
        .args(["assist", "--json", "--for", "200ms", "-p"])
        .arg(std::process::id().to_string()));
    assert!(out.status.success());
    valid("assist", &doc(&out));
}

#[test]
fn cgroup_verbs_json_matches_the_schema() {
    let out = run(bin().args(["cgroups", "--json", "--self"]));
    assert!(out.status.success());
    let v = doc(&out);
    valid("cgroups", &v);
    assert!(!v["groups"].as_array().unwrap().is_empty());
    let out = run(bin().args(["cgroups", "--json", "/no/such/cgroup"]));
    assert_eq!(out.status.code(), Some(1));
    valid("fatal_error", &doc(&out));
    // A dry run measures the group and changes nothing.
    let out = run(bin()
        .args(["evict", "--json", "--dry-run", "--cgroup"])
        .arg(pagewise_core::cgroup::own_memory_cgroup().unwrap()));
    assert!(out.status.success());
    valid("evict_cgroup", &doc(&out));
    if !require_root("stat --by-cgroup") {
        return;
    }
    let t = tmp();
    let d = t.path().join("tree");
    fs::create_dir_all(&d).unwrap();
    write_file(&d.join("a"), 100_000);
    write_file(&d.join(std::ffi::OsStr::from_bytes(b"odd\xffname")), 3000);
    let out = run(bin().args(["stat", "--by-cgroup", "--json"]).arg(&d));
    valid("stat_by_cgroup", &doc(&out));
    let out = run(bin().args(["stat", "--by-cgroup", "--json", "-l"]).arg(&d));
    let v = doc(&out);
    valid("stat_by_cgroup", &v);
    assert_eq!(v["files"].as_array().unwrap().len(), 2);
    let out = run(bin().args(["stat", "--by-cgroup", "--json-lines"]).arg(&d));
    let ls = lines(&out);
    for l in &ls[..ls.len() - 1] {
        valid("stat_by_cgroup_line_file", l);
    }
    valid("stat_by_cgroup_line_summary", ls.last().unwrap());
}

#[test]
fn top_json_matches_the_schema() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let f = t.path().join("f");
    let by = ["--by", "process,cgroup,file"];
    let child = bin()
        .args(["top", "--once", "--json", "--interval", "2s"])
        .args(by)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    // Something to count: a new file's pages added and dirtied.
    write_file(&f, 1 << 20);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let v = doc(&out);
    valid("top", &v);
    assert!(!v["intervals"][0]["files"]["rows"]
        .as_array()
        .unwrap()
        .is_empty());
    let out = run(bin()
        .args(["top", "--json-lines", "--count", "2", "--interval", "200ms"])
        .args(by));
    let ls = lines(&out);
    assert_eq!(ls.len(), 3, "two intervals and a summary");
    for l in &ls[..2] {
        valid("top_line_interval", l);
    }
    valid("top_line_summary", &ls[2]);
}
