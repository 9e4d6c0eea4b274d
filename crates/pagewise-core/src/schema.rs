//! The JSON schema of every `--json` document (docs/schema/pagewise.schema.json, described in
//! docs/json.md), generated from the report types themselves so that a field is declared once.
//!
//! schemars derives a schema from each report type (its serde attributes: renames, keys left
//! out when `None`, flattened paths); [`document`] then writes it in the small subset of JSON
//! Schema the file has always used (`$ref` to `#/$defs`, `type`, `const`, `enum`, `properties`,
//! `required`, `additionalProperties`, `items`, `minimum`, `maximum`), which a reader can check
//! without a full validator:
//! - every object names all its keys (`additionalProperties: false`);
//! - a key written as `null` when unknown has type `[T, "null"]`; a key left out when unknown
//!   (`skip_serializing_if = "Option::is_none"`) is not required and never null;
//! - only the documents and the shared parts below are named in `$defs`; other types are
//!   written out where they are used;
//! - doc comments, titles and integer formats are left out (docs/json.md and the Rust docs
//!   describe the fields).
//!
//! The CLI adds a few keys to what the library returns, and the schema adds them here: each
//! `--json-lines` line's `type` and `time`, `stat --json --files`'s `files` and `top --json`'s
//! `intervals`.

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// The schema document: every `--json` document's definition under `$defs`.
pub fn document() -> Value {
    let mut b = Builder {
        gen: SchemaSettings::draft2020_12()
            .for_serialize()
            .into_generator(),
        names: HashMap::new(),
        order: Vec::new(),
    };
    b.add::<crate::error::FileError>("error");
    b.add::<crate::walk::WalkSummary>("walk");
    b.add::<crate::residency::Residency>("residency");
    b.add::<crate::stat::FileStat>("stat_file");
    b.add::<crate::stat::Totals>("totals");
    b.add::<crate::stat::RootTotals>("root_totals");
    b.add::<crate::stat::StatReport>("stat");
    b.add::<crate::evict::EvictTotals>("evict_totals");
    b.add::<crate::evict::EvictFile>("evict_file");
    b.add::<crate::evict::EvictReport>("evict");
    b.add::<crate::load::LoadTotals>("load_totals");
    b.add::<crate::load::LoadReport>("load");
    b.add::<crate::copy::CopyReport>("copy");
    b.add::<crate::copy::CopyItem>("copy_entry");
    b.add::<crate::trace::SkippedFile>("skipped_file");
    b.add::<crate::trace::TraceCacheReport>("trace_cache");
    b.add::<crate::replay::ReplayReport>("replay_report");
    b.add::<crate::trace::TraceFile>("trace_file");
    b.add::<crate::trace::Trace>("trace");
    b.add::<crate::assist::AssistReport>("assist");
    b.add::<crate::assist::sim::SimReport>("assist_simulation_row");
    b.add::<crate::run::RunReport>("run");
    b.add::<crate::bench::Stats>("bench_stats");
    b.add::<crate::bench::Run>("bench_run");
    b.add::<crate::bench::StateReport>("bench_state");
    b.add::<crate::bench::Learning>("bench_learning");
    b.add::<crate::bench::SetReport>("bench_set");
    b.add::<crate::bench::StateDifference>("bench_difference");
    b.add::<crate::bench::Restored>("bench_restored");
    b.add::<crate::bench::CommandReport>("bench_command");
    b.add::<crate::bench::BenchReport>("bench");
    b.add::<crate::error::FatalDocument>("fatal_error");
    b.add::<crate::cgroup::FileCache>("cgroup_file_cache");
    b.add::<crate::cgroup::CgroupStat>("cgroup");
    b.add::<crate::cgroup::CgroupsReport>("cgroups");
    b.add::<crate::evict::CgroupEvictReport>("evict_cgroup");
    b.add::<crate::stat::Charge>("charge");
    b.add::<crate::stat::FileCharge>("charge_file");
    b.add::<crate::stat::ChargeTotals>("charge_totals");
    b.add::<crate::stat::ChargeReport>("stat_by_cgroup");
    b.add::<crate::top::Counts>("top_counts");
    b.add::<crate::top::ProcessRow>("top_process");
    b.add::<crate::top::CgroupRow>("top_cgroup");
    b.add::<crate::top::FileRow>("top_file");
    b.add::<crate::top::Interval>("top_interval");
    b.add::<crate::top::TopReport>("top");
    // The Python package's own documents (`to_dict()` of `pagewise.dropping().report` and of
    // `pagewise.record()`'s report, whose trace is the `Trace` object, not in the document).
    b.add::<crate::run::DroppingReport>("dropping");
    b.add::<crate::trace::RecordReport>("record");
    b.finish()
}

/// The schema of [`CopyReport::strategies`](crate::copy::CopyReport::strategies): files per
/// strategy used, keyed by [`Strategy::name`](crate::copy::Strategy::name) (`auto` is never
/// used: it is resolved before a file is copied).
pub fn strategy_counts(g: &mut SchemaGenerator) -> Schema {
    let count = g.subschema_for::<u64>();
    per_strategy(count)
}

/// Schema of a map from strategy name to a rate in bytes per second.
pub fn strategy_rates(_: &mut SchemaGenerator) -> Schema {
    per_strategy(schemars::json_schema!({ "type": "number", "minimum": 0 }))
}

/// An object with one optional property per strategy name, each of `value`'s schema.
fn per_strategy(value: Schema) -> Schema {
    use crate::copy::Strategy;
    let props: Map<String, Value> = [
        Strategy::Dontcache,
        Strategy::Direct,
        Strategy::DropBehind,
        Strategy::Buffered,
    ]
    .into_iter()
    .map(|s| (s.name().to_string(), value.clone().into()))
    .collect();
    schemars::json_schema!({ "type": "object", "properties": props })
}

/// Keywords of schemars' output that the checked subset leaves out (descriptive only).
const DROPPED: &[&str] = &[
    "$schema",
    "title",
    "description",
    "format",
    "examples",
    "default",
    "deprecated",
];

struct Builder {
    gen: SchemaGenerator,
    /// schemars' name of a type -> its name in `$defs`.
    names: HashMap<String, &'static str>,
    /// `$defs` names in the order added.
    order: Vec<&'static str>,
}

impl Builder {
    fn add<T: JsonSchema>(&mut self, name: &'static str) {
        let r = self.gen.subschema_for::<T>();
        let id = r
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
            .unwrap_or_else(|| panic!("{name}: a struct has a definition of its own"));
        self.names.insert(id.to_string(), name);
        self.order.push(name);
    }

    fn finish(mut self) -> Value {
        let raw = self.gen.take_definitions(true);
        let by_name: HashMap<&str, &str> = self
            .names
            .iter()
            .map(|(id, name)| (*name, id.as_str()))
            .collect();
        let w = Writer {
            raw: &raw,
            names: &self.names,
        };
        let mut defs = Map::new();
        for name in &self.order {
            defs.insert(name.to_string(), w.clean(&raw[by_name[name]]));
        }
        // What the CLI adds to the library's reports.
        add_key(&mut defs, "stat", "files", array_of("stat_file"), false);
        add_key(
            &mut defs,
            "stat_by_cgroup",
            "files",
            array_of("charge_file"),
            false,
        );
        let top = defs["top"].clone();
        add_key(
            &mut defs,
            "top",
            "intervals",
            array_of("top_interval"),
            true,
        );
        defs.insert("top_summary".into(), top);
        let replay = json!({ "type": "array", "items": { "$ref": "#/$defs/replay_report" } });
        defs.insert("replay".into(), replay);
        let rows = defs.remove("assist_simulation_row").unwrap();
        defs.insert(
            "assist_simulation".into(),
            json!({ "type": "array", "items": rows }),
        );
        // --json-lines: each line is a document of its own, with `type` and `time`.
        for (line, base, kind) in [
            ("stat_line_file", "stat_file", "file"),
            ("line_error", "error", "error"),
            ("stat_line_summary", "stat", "summary"),
            ("evict_line_summary", "evict", "summary"),
            ("evict_line_file", "evict_file", "file"),
            ("load_line_summary", "load", "summary"),
            ("copy_line_summary", "copy", "summary"),
            ("copy_line_entry", "copy_entry", "entry"),
            ("stat_by_cgroup_line_file", "charge_file", "file"),
            ("stat_by_cgroup_line_summary", "stat_by_cgroup", "summary"),
            ("top_line_interval", "top_interval", "interval"),
            ("top_line_summary", "top_summary", "summary"),
        ] {
            let mut d = defs[base].clone();
            if base == "stat" {
                // A stream's summary: the files were streamed before it.
                d["properties"].as_object_mut().unwrap().remove("files");
            }
            defs.insert(line.into(), d);
            add_key(&mut defs, line, "type", json!({ "const": kind }), true);
            add_key(&mut defs, line, "time", json!({ "type": "string" }), true);
        }
        defs.remove("copy_entry");
        defs["record"]["properties"]
            .as_object_mut()
            .unwrap()
            .remove("trace");
        defs["record"]["required"]
            .as_array_mut()
            .unwrap()
            .retain(|k| k != "trace");
        defs.remove("top_summary");
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "pagewise.schema.json",
            "title": "pagewise --json output",
            "description": "Every document pagewise writes with --json, --json-lines, show --format json and run --report; see docs/json.md. Generated from the report types (crates/pagewise-core/src/schema.rs): regenerate with PAGEWISE_BLESS=1 cargo test --profile ci --test e2e json_schema::. Validate a document against #/$defs/<name>.",
            "$defs": defs,
        })
    }
}

fn array_of(def: &str) -> Value {
    json!({ "type": "array", "items": { "$ref": format!("#/$defs/{def}") } })
}

/// Adds key `key` (schema `s`) to the object definition `def`.
fn add_key(defs: &mut Map<String, Value>, def: &str, key: &str, s: Value, required: bool) {
    let d = &mut defs[def];
    d["properties"][key] = s;
    if required {
        d["required"].as_array_mut().unwrap().push(key.into());
    }
}

/// Rewrites schemars' output into the subset (see the module's documentation).
struct Writer<'a> {
    raw: &'a Map<String, Value>,
    names: &'a HashMap<String, &'static str>,
}

impl Writer<'_> {
    fn clean(&self, v: &Value) -> Value {
        let Value::Object(m) = v else {
            return v.clone();
        };
        if let Some(r) = m.get("$ref").and_then(Value::as_str) {
            let id = r.strip_prefix("#/$defs/").expect("a local $ref");
            return match self.names.get(id) {
                Some(name) => json!({ "$ref": format!("#/$defs/{name}") }),
                None => self.clean(&self.raw[id]),
            };
        }
        if let Some(alts) = m.get("anyOf").or(m.get("oneOf")).and_then(Value::as_array) {
            return self.alternatives(alts);
        }
        let mut out = Map::new();
        for (k, x) in m {
            match k.as_str() {
                k if DROPPED.contains(&k) => {}
                "properties" => {
                    let required: Vec<&str> = m
                        .get("required")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    let props = x.as_object().expect("properties is an object");
                    let props: Map<String, Value> = props
                        .iter()
                        .map(|(name, p)| {
                            // A key that may be left out is left out when unknown, never null.
                            let p = if required.contains(&name.as_str()) {
                                self.clean(p)
                            } else {
                                self.clean(&without_null(p))
                            };
                            (name.clone(), p)
                        })
                        .collect();
                    out.insert(k.clone(), Value::Object(props));
                }
                "items" | "additionalProperties" => {
                    out.insert(k.clone(), self.clean(x));
                }
                _ => {
                    out.insert(k.clone(), x.clone());
                }
            }
        }
        if out.contains_key("properties") {
            out.entry("additionalProperties").or_insert(false.into());
            out.entry("required").or_insert(json!([]));
        }
        Value::Object(out)
    }

    /// `anyOf`/`oneOf`: an enum whose variants are documented (one `const` each), or a value
    /// or null (`Option` of a type with a definition).
    fn alternatives(&self, alts: &[Value]) -> Value {
        let alts: Vec<Value> = alts.iter().map(|a| self.clean(a)).collect();
        if alts.iter().all(|a| a.get("const").is_some()) {
            let values: Vec<Value> = alts.iter().map(|a| a["const"].clone()).collect();
            return json!({ "type": "string", "enum": values });
        }
        let null = json!({ "type": "null" });
        match alts.as_slice() {
            [a, n] | [n, a] if *n == null => {
                let mut a = match a.get("$ref").and_then(Value::as_str) {
                    // No `anyOf` in the subset: the definition is written out, nullable.
                    Some(r) => {
                        let name = r.strip_prefix("#/$defs/").unwrap();
                        let id = self
                            .names
                            .iter()
                            .find(|(_, n)| **n == name)
                            .map(|(id, _)| id.as_str())
                            .unwrap();
                        let mut m = self.raw[id].as_object().unwrap().clone();
                        m.remove("$ref");
                        self.clean(&Value::Object(m))
                    }
                    None => a.clone(),
                };
                add_null(&mut a);
                a
            }
            _ => panic!("schema: alternatives outside the subset: {alts:?}"),
        }
    }
}

/// `T` for `Option<T>`'s schema.
fn without_null(v: &Value) -> Value {
    let mut v = v.clone();
    let Some(m) = v.as_object_mut() else { return v };
    if let Some(alts) = m.get("anyOf").and_then(Value::as_array) {
        let rest: Vec<&Value> = alts.iter().filter(|a| a["type"] != "null").collect();
        if let [one] = rest.as_slice() {
            return (*one).clone();
        }
    }
    if let Some(Value::Array(ts)) = m.get_mut("type") {
        ts.retain(|t| t != "null");
        if ts.len() == 1 {
            let t = ts[0].clone();
            m.insert("type".into(), t);
        }
    }
    if let Some(Value::Array(e)) = m.get_mut("enum") {
        e.retain(|x| !x.is_null());
    }
    v
}

/// Makes schema `v` accept null as well.
fn add_null(v: &mut Value) {
    let m = v.as_object_mut().expect("an object schema");
    match m.get_mut("type") {
        Some(Value::String(t)) => {
            let t = t.clone();
            m.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(ts)) => ts.push("null".into()),
        _ => {}
    }
    if let Some(Value::Array(e)) = m.get_mut("enum") {
        e.push(Value::Null);
    }
}
