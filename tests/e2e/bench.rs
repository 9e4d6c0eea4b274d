//! End-to-end tests of `bench`: a command whose run time depends on what is cached (a reader
//! of random pages of a mapped file, no readahead) is slower cold than hot with intervals that
//! do not overlap; every run's state is what the kernel showed before it (cachestat of the read
//! set); a slow run is flagged an outlier; a file another process maps is left out of the set
//! and said (a state that never holds is refused by name: runner's unit tests); the JSON
//! matches its schema; the SVG renders and has one box per state;
//! and the page cache is left as it was, page for page.

use crate::common::*;
use serde_json::Value;
use std::fs;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Command;

/// 1,200 page numbers spread over `pages` pages (a fixed stride, so every run reads the same).
fn spread(pages: u64) -> Vec<String> {
    (0..1200u64)
        .map(|i| ((i * 7919) % pages).to_string())
        .collect()
}

/// The reader: the compiled toucher touching `spread` pages of `data`.
fn reader(dir: &Path, data: &Path, pages: u64) -> Vec<String> {
    let p = spread(pages);
    let refs: Vec<&str> = p.iter().map(String::as_str).collect();
    toucher_of(dir, data, &refs)
}

/// Records `cksum FILES...` (as root) into `trace`, its output into `dir/cksum.out`; the trace
/// readable by anyone.
fn record_cksum(dir: &Path, trace: &Path, files: &[&Path]) {
    use std::os::unix::fs::PermissionsExt;
    let sink = fs::File::create(dir.join("cksum.out")).unwrap();
    let out = output_logged(
        bin()
            .arg("record")
            .arg("-o")
            .arg(trace)
            .args(["--", "cksum"])
            .args(files)
            .stdout(sink),
    );
    assert!(out.status.success(), "record");
    fs::set_permissions(trace, fs::Permissions::from_mode(0o644)).unwrap();
}

/// What these tests leave out of a set: the system's files a recording may have read (cksum,
/// libc: cold when another test's learning dropped them, and root's) and the command's output.
fn keep_args(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = [
        "--keep", "/usr", "--keep", "/lib", "--keep", "/etc", "--keep",
    ]
    .map(Into::into)
    .to_vec();
    v.push(dir.join("cksum.out").into());
    v
}

/// The state a run found, from its JSON.
fn runs_of<'a>(v: &'a Value, state: &str) -> &'a Vec<Value> {
    let st = v["commands"][0]["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["state"] == state)
        .unwrap_or_else(|| panic!("no {state} in {v}"));
    st["runs"].as_array().unwrap()
}

fn stats_of<'a>(v: &'a Value, state: &str) -> &'a Value {
    &v["commands"][0]["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["state"] == state)
        .unwrap()["stats"]
}

#[test]
fn cold_is_slower_than_hot_each_state_checked_and_the_cache_left_as_it_was() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let data = t.path().join("data");
    let pages = 16_384; // 64 MiB
    cold_file(&data, (pages * PAGE) as usize);
    // Half of it cached before: that half cached after, the other half not, page for page.
    {
        let f = fs::File::open(&data).unwrap();
        // No readahead past the half.
        pagewise_core::sys::fadvise(f.as_fd(), 0, 0, pagewise_core::sys::Advice::Random).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        for i in 0..32u64 {
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, i << 20).unwrap();
        }
    }
    // DAMON pageout (on here) may take a few pages at any time: what is cached is counted.
    let first_half = resident_pages(&fs::File::open(&data).unwrap(), 0, 32 << 20);
    assert!(
        first_half * 100 >= pages / 2 * 99,
        "setup: the first half cached ({first_half})"
    );
    assert_eq!(
        cached(&data),
        first_half,
        "setup: nothing of the second half"
    );
    let cmd = reader(t.path(), &data, pages);
    let svg = t.path().join("runs.svg");
    // The system's files (ld.so.cache, libc) are kept out: other tests' programs, starting
    // all the time beside this one, read them back between a cold set-up and its check.
    let out = run(bin()
        .args(["bench", "--runs", "6", "--json", "--plot"])
        .arg(&svg)
        .args(keep_args(t.path()))
        .arg("--")
        .args(&cmd));
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    crate::json_schema::valid("bench", &v);
    let c = &v["commands"][0];
    let set_bytes = c["set"]["bytes"].as_u64().unwrap();
    assert!(
        set_bytes >= 1200 * PAGE,
        "the read set holds the pages read: {}",
        c["set"]
    );
    assert!(c["set"]["learning"]["recordings"].as_u64().unwrap() >= 2);
    // Each run found its state, as the kernel showed it right before the run.
    for r in runs_of(&v, "hot") {
        assert_eq!(r["cached_bytes_before"], r["set_bytes"], "hot: {r}");
    }
    for r in runs_of(&v, "cold") {
        assert_eq!(r["cached_bytes_before"], 0, "cold: {r}");
    }
    for r in runs_of(&v, "preloaded") {
        assert_eq!(r["cached_bytes_before"], r["set_bytes"], "preloaded: {r}");
        assert!(r["preload_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    // Cold reads 1,200 pages from the disk one fault at a time; hot reads none.
    let (hot, cold) = (stats_of(&v, "hot"), stats_of(&v, "cold"));
    let hi = |s: &Value| s["mean_s"].as_f64().unwrap() + s["ci95_s"].as_f64().unwrap();
    let lo = |s: &Value| s["mean_s"].as_f64().unwrap() - s["ci95_s"].as_f64().unwrap();
    assert!(
        hi(hot) < lo(cold),
        "intervals overlap: hot {hot}, cold {cold}"
    );
    let d = &c["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["state"] == "cold")
        .unwrap();
    assert!(d["mean_s"].as_f64().unwrap() > 0.0 && d["ratio"].as_f64().unwrap() > 1.0);
    // The cache as it was: the first half cached (less what DAMON may have taken meanwhile;
    // never more), the second not, page for page (the kernel's count).
    let f = fs::File::open(&data).unwrap();
    let after = resident_pages(&f, 0, 32 << 20);
    assert!(
        after <= first_half && after * 100 >= first_half * 99,
        "first half: {after} of {first_half}"
    );
    assert_eq!(
        resident_pages(&f, 32 << 20, 0),
        0,
        "second half: nothing the runs read stays"
    );
    assert_eq!(c["restored"]["failed"], 0);
    // The picture: one box per state (plotters draws the background and each box as a rect),
    // and it renders.
    let text = fs::read_to_string(&svg).unwrap();
    assert_eq!(text.matches("<rect").count(), 1 + 3, "{svg:?}");
    if require(on_path("rsvg-convert"), "rsvg-convert (apt: librsvg2-bin)") {
        let png = t.path().join("runs.png");
        let st = Command::new("rsvg-convert")
            .arg("-o")
            .arg(&png)
            .arg(&svg)
            .status()
            .unwrap();
        assert!(st.success());
        assert!(fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    }
}

/// A run made slow on purpose is flagged; the text table, Markdown and CSV name every state;
/// with a given trace nothing is recorded.
#[test]
fn a_slow_run_is_an_outlier_and_the_exports_name_every_state() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let data = t.path().join("data");
    cold_file(&data, 8 << 20);
    let trace = t.path().join("set.trace");
    record_trace(t.path(), &trace, &data);
    let flag = t.path().join("slow-once");
    fs::write(&flag, b"").unwrap();
    // The first run that finds the flag removes it and sleeps 0.5 s: one run in 24, an
    // outlier of whichever state it fell in.
    let script = format!(
        "if rm {} 2>/dev/null; then sleep 0.5; fi; cat {} | cksum",
        flag.display(),
        data.display()
    );
    let (md, csv) = (t.path().join("b.md"), t.path().join("b.csv"));
    let out = run(bin()
        .args([
            "bench",
            "--runs",
            "8",
            "--states",
            "hot,cold,preloaded",
            "--json",
        ])
        .arg("--trace")
        .arg(&trace)
        .args(keep_args(t.path()))
        .arg("--export-markdown")
        .arg(&md)
        .arg("--export-csv")
        .arg(&csv)
        .arg(&script));
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["commands"][0]["set"]["learning"]["recordings"], 0);
    let flagged: Vec<&Value> = ["hot", "cold", "preloaded"]
        .iter()
        .flat_map(|s| runs_of(&v, s).iter())
        .filter(|r| r["outlier"] == true)
        .collect();
    assert!(
        flagged.iter().any(|r| r["time_s"].as_f64().unwrap() >= 0.5),
        "the slow run is flagged: {flagged:?}"
    );
    let md = fs::read_to_string(&md).unwrap();
    let csv = fs::read_to_string(&csv).unwrap();
    for s in ["hot", "cold", "preloaded"] {
        assert!(md.contains(&format!("| {s} |")), "{md}");
        assert!(csv.contains(&format!(",{s},8,")), "{csv}");
    }
    let text = run(bin()
        .args(["bench", "--runs", "2", "--trace"])
        .arg(&trace)
        .args(keep_args(t.path()))
        .arg(&script));
    let s = stdout(&text);
    for w in [
        "MEAN ± 95% CI",
        "hot",
        "cold",
        "preloaded",
        "cold − hot",
        "cache put back",
    ] {
        assert!(s.contains(w), "{w:?} not in\n{s}");
    }
}

/// A file of the set another process maps cannot be made cold (its pages stay while mapped):
/// it is left out of the set and said, and the rest is benched as asked.
#[test]
fn a_file_another_process_maps_is_left_out_and_said() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let (mapped, plain) = (t.path().join("mapped"), t.path().join("plain"));
    cold_file(&mapped, 4 << 20);
    cold_file(&plain, 2 << 20);
    let trace = t.path().join("set.trace");
    record_cksum(t.path(), &trace, &[&mapped, &plain]);
    let Some(mapper) = compile_c(
        t.path(),
        "mapper",
        r#"#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDONLY);
    struct stat st; fstat(fd, &st);
    volatile unsigned char *m = mmap(0, st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    unsigned s = 0;
    for (off_t i = 0; i < st.st_size; i += 4096) s += m[i];
    printf("ready %u\n", s); fflush(stdout);
    sleep(120);
    return 0;
}
"#,
        false,
    ) else {
        panic!("no C compiler (install-deps installs one)");
    };
    let mut holder = Command::new(&mapper)
        .arg(&mapped)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(first_line(holder.stdout.take().unwrap()).starts_with("ready"));
    let out = run(bin()
        .args([
            "bench", "--runs", "2", "--states", "cold,hot", "--json", "--trace",
        ])
        .arg(&trace)
        .args(keep_args(t.path()))
        .arg("--")
        .arg("cksum")
        .arg(&mapped)
        .arg(&plain));
    let text = run(bin()
        .args(["bench", "--runs", "1", "--states", "cold", "--trace"])
        .arg(&trace)
        .args(keep_args(t.path()))
        .arg("--")
        .arg("cksum")
        .arg(&plain));
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    let set = &v["commands"][0]["set"];
    assert_eq!(set["mapped_out_files"], 1, "{set}");
    assert_eq!(set["mapped_out_bytes"], 4 << 20, "{set}");
    assert!(
        set["mapped_out_example"]
            .as_str()
            .unwrap()
            .ends_with("/mapped"),
        "{set}"
    );
    assert!(set["mapped_out_example_processes"].as_u64().unwrap() >= 1);
    assert_eq!(set["bytes"], 2 << 20, "the plain file alone: {set}");
    // The command's output (a page), and what of the system's files the recording read.
    assert!(
        set["kept_out_bytes"].as_u64().unwrap() >= 4096,
        "the command's output, --keep: {set}"
    );
    for r in runs_of(&v, "cold") {
        assert_eq!(r["cached_bytes_before"], 0, "{r}");
    }
    assert!(
        stdout(&text).contains("left out: 1 files (4.0 MiB) other processes map"),
        "{}",
        stdout(&text)
    );
}

/// Bad input: no command, a trace per command, cold-all refused as another user, a failing
/// command named.
#[test]
fn bad_arguments_are_refused_before_anything_runs() {
    let out = run(bin().arg("bench"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no command"), "{}", stderr(&out));
    let t = tmp();
    let tr = t.path().join("x.trace");
    fs::write(&tr, b"not a trace").unwrap();
    let out = run(bin().args(["bench", "--trace"]).arg(&tr).args(["a", "b"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("one per command"), "{}", stderr(&out));
    if can_trace() {
        let out = run(bin().args(["bench", "--runs", "1", "--", "false"]));
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains("false: exited 1 during its recording"),
            "{}",
            stderr(&out)
        );
    }
}

/// As an ordinary user (nobody), with the set given as a trace: bench works on files that user
/// owns; a file of the set whose residency the user cannot know (root's, not writable) is
/// refused before anything runs, with the count and the remedy — never a false "cold".
#[test]
fn an_ordinary_user_benches_their_own_files_and_is_refused_others() {
    if !can_trace() {
        return; // the traces are recorded as root
    }
    use std::os::unix::fs::PermissionsExt;
    let t = tmp();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    open_up_ancestors(t.path());
    let (mine, roots) = (t.path().join("mine"), t.path().join("roots"));
    cold_file(&mine, 2 << 20);
    cold_file(&roots, 1 << 20);
    std::os::unix::fs::chown(&mine, Some(65534), Some(65534)).unwrap();
    fs::set_permissions(&roots, fs::Permissions::from_mode(0o644)).unwrap();
    let (only_mine, both) = (t.path().join("mine.trace"), t.path().join("both.trace"));
    record_cksum(t.path(), &only_mine, &[&mine]);
    sync_and_evict(&mine);
    record_cksum(t.path(), &both, &[&mine, &roots]);
    let out = run(as_nobody()
        .args([
            "bench", "--runs", "2", "--states", "hot,cold", "--json", "--trace",
        ])
        .arg(&only_mine)
        .args(keep_args(t.path()))
        .arg("--")
        .arg("cksum")
        .arg(&mine));
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        v["commands"][0]["set"]["bytes"],
        2 << 20,
        "{}",
        v["commands"][0]["set"]
    );
    for r in runs_of(&v, "cold") {
        assert_eq!(r["cached_bytes_before"], 0, "{r}");
    }
    for r in runs_of(&v, "hot") {
        assert_eq!(r["cached_bytes_before"], 2 << 20, "{r}");
    }
    let out = run(as_nobody()
        .args(["bench", "--runs", "1", "--trace"])
        .arg(&both)
        .args(keep_args(t.path()))
        .arg("--")
        .arg("cksum")
        .arg(&mine)
        .arg(&roots));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("what is cached of 1 file(s) of its read set cannot be known")
            && err.contains("--keep"),
        "{err}"
    );
}

/// SIGINT (as from Ctrl-C, here sent to pagewise alone) ends the runs after the current one:
/// exit 130, the figures of the runs made so far, and the cache put back (the data file, cold
/// before, is cold after).
#[test]
fn sigint_stops_after_the_current_run_and_puts_the_cache_back() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let data = t.path().join("data");
    cold_file(&data, 8 << 20);
    let trace = t.path().join("set.trace");
    record_cksum(t.path(), &trace, &[&data]);
    sync_and_evict(&data);
    let script = format!("cksum {} >/dev/null; sleep 0.1", data.display());
    let child = bin()
        .args(["bench", "--runs", "1000", "--states", "hot,cold", "--trace"])
        .arg(&trace)
        .args(keep_args(t.path()))
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // kill(1) of the child this test started, by its PID.
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("Interrupted: the figures are of the runs made so far."),
        "{text}"
    );
    assert!(text.contains("MEAN ± 95% CI"), "{text}");
    assert_eq!(cached(&data), 0, "cold before, cold after");
}
