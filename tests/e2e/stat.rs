//! End-to-end tests of what `pagewise stat` shows: --range as IN RANGE, exact bytes of tiny
//! dirty files, missing paths as errors (never rows), names (non-UTF-8 bytes lossless in JSON,
//! control bytes escaped, wide names aligned), --map's optional width, vmtouch's -I/-i (and
//! record/run without `--`), and block devices sized by their capacity.

use crate::cache_verbs::{mincore_pages, tree};
use crate::common::*;
use pagewise_core::sys;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

#[test]
fn stat_range_shows_the_bytes_in_range() {
    let t = tmp();
    let f = t.path().join("F");
    write_file(&f, 1 << 20);
    let out = run(bin().args(["stat", "--range", "0-64K"]).arg(&f));
    assert!(out.status.success());
    let table = stdout(&out);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    assert!(header.contains("IN RANGE"), "{header}");
    let row = lines
        .find(|l| l.starts_with(f.to_str().unwrap()))
        .expect("a row for F");
    let end = header_end(header, "IN RANGE");
    assert_eq!(
        cell_ending_at(row, end, "64.0 KiB".len()),
        "64.0 KiB",
        "{row}"
    );

    let v = json(&run(bin()
        .args(["stat", "--json", "-l", "--range", "0-64K"])
        .arg(&f)));
    assert_eq!(v["files"][0]["bytes"], 65536);
    assert_eq!(v["files"][0]["size"], 1048576);
}

#[test]
fn tiny_dirty_file_counts_its_bytes_not_a_page() {
    let t = tmp();
    let f = t.path().join("two");
    fs::write(&f, "ab").unwrap();
    assert_eq!(cs(&f).dirty, 1, "setup: the page is dirty");
    let v = json(&run(bin().args(["stat", "--json", "-l"]).arg(&f)));
    let dirty = v["files"][0]["dirty_bytes"].as_u64().unwrap();
    assert!(dirty <= 2, "dirty_bytes {dirty} (old: 4096)");
    assert_eq!(v["files"][0]["cached_bytes"], 2);
}

#[test]
fn missing_paths_are_errors_not_rows() {
    let t = tmp();
    let d = t.path();
    let missing = "MISSING-trust";
    write_file(&d.join("EXISTING"), 10000);

    let out = run(bin().args(["stat", missing]).current_dir(d));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(missing));
    assert!(!stdout(&out).contains(missing), "no row for it");

    let out = run(bin().args(["stat", "EXISTING", missing]).current_dir(d));
    assert_eq!(out.status.code(), Some(2));
    let table = stdout(&out);
    assert!(!table.contains(missing), "no row for it: {table}");
    assert!(
        table.lines().any(|l| l.starts_with("EXISTING ")),
        "EXISTING's row: {table}"
    );
    assert!(
        table.lines().any(|l| l.starts_with("TOTAL")),
        "a TOTAL line: {table}"
    );

    let out = run(bin().args(["stat", "--json", missing]).current_dir(d));
    assert_eq!(out.status.code(), Some(2));
    let v = json(&out);
    assert_eq!(v["roots"], serde_json::json!([]));
    assert_eq!(v["errors"][0]["path"], missing);
}

#[test]
fn non_utf8_names_are_lossless_in_json_and_copied_exactly() {
    let t = tmp();
    let d = t.path();
    fs::create_dir(d.join("nd")).unwrap();
    let name: &[u8] = b"bad\xffname";
    fs::write(d.join("nd").join(OsStr::from_bytes(name)), "z").unwrap();
    let full: Vec<u8> = [b"nd/".as_slice(), name].concat();

    let out = run(bin().args(["stat", "-l", "--json", "nd"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    let f = &v["files"][0];
    let bytes: Vec<u8> = f["path_bytes"]
        .as_array()
        .expect("path_bytes")
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(bytes, full, "the raw bytes");
    assert_eq!(f["path"], String::from_utf8_lossy(&full).as_ref());

    let out = run(bin().args(["stat", "--json-lines", "nd"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    let mut file_lines = 0;
    for line in stdout(&out).lines() {
        assert_ne!(line.trim(), "null");
        let v: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
        assert!(!v.is_null());
        if v.get("path_bytes").is_some() {
            let b: Vec<u8> = v["path_bytes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u8)
                .collect();
            assert_eq!(b, full);
            file_lines += 1;
        }
    }
    assert_eq!(file_lines, 1, "the file's line has path_bytes");

    let out = run(bin().args(["copy", "--json", "nd", "dst"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    let _ = json(&out);
    assert_eq!(names_in(&d.join("dst")), vec![name.to_vec()]);
    assert_eq!(
        fs::read(d.join("dst").join(OsStr::from_bytes(name))).unwrap(),
        b"z"
    );
}

#[test]
fn newline_in_a_name_is_escaped_in_the_table_and_exact_in_json() {
    let t = tmp();
    let d = t.path();
    fs::create_dir(d.join("nl")).unwrap();
    fs::write(d.join("nl").join("a\nb"), "hello").unwrap();

    let out = run(bin().args(["stat", "-l", "nl"]).current_dir(d));
    assert!(out.status.success());
    let table = stdout(&out);
    assert_eq!(table.lines().count(), 3, "header, one file, TOTAL: {table}");
    assert!(
        table.lines().any(|l| l.starts_with("nl/a\\x0ab ")),
        "{table}"
    );

    let v = json(&run(bin()
        .args(["stat", "-l", "--json", "nl"])
        .current_dir(d)));
    assert_eq!(v["files"][0]["path"], "nl/a\nb");
}

#[test]
fn wide_names_keep_table_columns_aligned() {
    let t = tmp();
    let d = t.path();
    fs::create_dir(d.join("w")).unwrap();
    fs::write(d.join("w/日本語.txt"), "1\n").unwrap();
    fs::write(d.join("w/abc.txt"), "2\n").unwrap();
    let out = run(bin().args(["stat", "-l", "w"]).current_dir(d));
    assert!(out.status.success());
    let table = stdout(&out);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let want = header_end(header, "SIZE");
    let mut rows = 0;
    for row in lines {
        let path = if row.starts_with("w/日本語.txt") {
            "w/日本語.txt"
        } else if row.starts_with("w/abc.txt") {
            "w/abc.txt"
        } else {
            continue;
        };
        // After the path: an empty FILES column, then SIZE ("2 B").
        let rest = &row[path.len()..];
        let size_end = rest.find(" B").expect("a size") + 2;
        let end = display_width(path) + display_width(&rest[..size_end]);
        assert_eq!(end, want, "SIZE ends at column {want}: {row:?}");
        rows += 1;
    }
    assert_eq!(rows, 2, "{table}");
}

fn bar_lines(out: &Output) -> Vec<String> {
    stdout(out)
        .lines()
        .filter(|l| l.starts_with("  ["))
        .map(|l| l[2..].to_string())
        .collect()
}

#[test]
fn stat_map_takes_a_path_after_it_and_an_optional_width() {
    let t = tmp();
    let f = t.path().join("F");
    fs::write(&f, vec![1u8; 64 << 20]).unwrap();
    sync_and_evict(&f);
    assert_eq!(cached(&f), 0);

    let out = run(bin().args(["stat", "--map"]).arg(&f));
    assert_eq!(out.status.code(), Some(0), "F is a path, not a width");
    assert_eq!(bar_lines(&out).len(), 1, "a bar line");
    assert!(
        stdout(&out).lines().any(|l| l.starts_with("map:")),
        "a legend"
    );

    let out = run(bin().args(["stat", "--map=20"]).arg(&f));
    assert_eq!(out.status.code(), Some(0));
    let bars = bar_lines(&out);
    assert_eq!(bars.len(), 1);
    assert_eq!(bars[0].chars().count(), 22, "20 cells: {:?}", bars[0]);
    assert!(bars[0].starts_with('[') && bars[0].ends_with(']'));

    // One page at offset 0, no readahead.
    let file = File::open(&f).unwrap();
    // SAFETY: posix_fadvise on an open descriptor.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    assert_eq!(rc, 0);
    let mut page = [0u8; PAGE as usize];
    file.read_exact_at(&mut page, 0).unwrap();
    assert_eq!(cached(&f), 1, "setup: exactly one page cached");

    let out = run(bin().args(["stat", "--map=8"]).arg(&f));
    assert_eq!(out.status.code(), Some(0));
    let bars = bar_lines(&out);
    assert_eq!(bars.len(), 1);
    let cells: Vec<char> = bars[0].chars().collect();
    assert_eq!(cells.len(), 10, "{:?}", bars[0]);
    assert_eq!(cells[1], '.', "one page is some: {:?}", bars[0]);
    assert!(
        cells[2..9].iter().all(|&c| c == ' '),
        "the rest is empty: {:?}",
        bars[0]
    );
}

fn listed(out: &Output) -> Vec<String> {
    let mut v: Vec<String> = json(out)["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn vmtouch_include_ignore_flags_and_commands_without_double_dash() {
    let t = tmp();
    let d = t.path();
    fs::create_dir(d.join("ia")).unwrap();
    for n in ["x.a", "y.b", "z.a"] {
        fs::write(d.join("ia").join(n), n).unwrap();
    }
    let out = run(bin()
        .args(["stat", "-l", "--json", "-I", "*.a", "ia"])
        .current_dir(d));
    assert!(out.status.success());
    assert_eq!(listed(&out), ["ia/x.a", "ia/z.a"]);

    let out = run(bin()
        .args(["stat", "-l", "--json", "-i", "*.a", "ia"])
        .current_dir(d));
    assert!(out.status.success());
    assert_eq!(listed(&out), ["ia/y.b"]);

    let out = run(bin().args(["stat", "-e", "ia"]).current_dir(d));
    assert_eq!(out.status.code(), Some(1), "-e is not a flag of stat");

    if !require_root("tracing (record, run)") {
        return;
    }
    let out = run(bin().args(["record", "cat", "ia/x.a"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "x.a", "cat ran");
    assert!(d.join("pagewise.trace").exists());
    let out = run(bin().args(["run", "cat", "ia/y.b"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "y.b", "cat ran");
}

#[test]
fn block_device_is_sized_by_its_capacity() {
    if !require_root("losetup") {
        return;
    }
    let t = tmp();
    let img = t.path().join("img");
    File::create(&img).unwrap().set_len(16 << 20).unwrap();
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "losetup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = Loop(String::from_utf8(out.stdout).unwrap().trim().to_string());
    assert!(dev.0.starts_with("/dev/loop"), "{}", dev.0);
    // Only stat (read), never a write to the device.
    let out = run(bin().args(["stat", "--json", &dev.0]));
    assert!(out.status.success());
    assert_eq!(json(&out)["total"]["size"], 16777216u64, "(old: 0)");
}

/// `--from` reads its list a line at a time, each line bounded: a source with no end and no
/// newline (/dev/zero; a stream of `a` on stdin) is refused at once with an error naming it and
/// the line, in bounded memory; so is a NUL-separated (`-0`) list whose entry is empty.
#[test]
fn from_refuses_an_endless_line_quickly_and_in_bounded_memory() {
    const MIB: u64 = 1 << 20;
    let check = |cmd: &mut Command, what: &str, says: &[&str]| {
        let (out, rss) = run_measured(cmd, 10.0, 2048 * MIB);
        assert_eq!(out.status.code(), Some(1), "{what}");
        let err = stderr(&out);
        for s in says {
            assert!(err.contains(s), "{what}: {s:?} not in {err:?}");
        }
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err:?}");
        assert!(rss < 64 * MIB, "{what}: peak RSS {} MiB", rss / MIB);
    };
    check(
        measured_bin().args(["stat", "--from", "/dev/zero"]),
        "/dev/zero",
        &["--from /dev/zero", "line 1"],
    );
    check(
        measured_bin().args(["stat", "-0", "--from", "/dev/zero"]),
        "/dev/zero -0",
        &["--from /dev/zero", "entry 1", "empty"],
    );
    // An endless line of `a` on stdin.
    let mut yes = Command::new("sh")
        .args(["-c", "tr '\\0' a </dev/zero"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = yes.stdout.take().unwrap();
    check(
        measured_bin().args(["stat", "--from", "-"]).stdin(pipe),
        "stdin",
        &["--from -", "line 1", "longer than"],
    );
    let _ = yes.kill();
    let _ = yes.wait();
    // A long line after good ones is named by its number; a line as long as a path may be is
    // read.
    let t = tmp();
    let list = t.path().join("list");
    let ok = t.path().join("ok");
    write_file(&ok, 10);
    let mut text = format!("{}\n\n{}\n", ok.display(), ok.display()).into_bytes();
    text.extend(vec![b'x'; 100_000]);
    text.push(b'\n');
    fs::write(&list, &text).unwrap();
    let listed = list.display().to_string();
    check(
        measured_bin().args(["stat", "--from"]).arg(&list),
        "long third line",
        &[&format!("--from {listed}"), "line 4"],
    );
    let long = format!("/{}", "d/".repeat(2000));
    fs::write(&list, format!("{}\n{long}\n", ok.display())).unwrap();
    let out = run(bin().args(["stat", "--json", "--from"]).arg(&list));
    assert_eq!(out.status.code(), Some(2), "the long path is looked up");
    assert!(!stderr(&out).contains("longer than"), "{}", stderr(&out));
}

#[test]
fn stat_matches_cachestat_and_mincore() {
    let t = tmp();
    let p = t.path().join("f");
    write_file(&p, 1 << 20);
    sync_and_evict(&p);
    // Read the first 256 KiB only.
    let f = File::open(&p).unwrap();
    let mut buf = vec![0u8; 256 << 10];
    sys::fadvise(f.as_fd(), 0, 0, sys::Advice::Random).unwrap();
    sys::pread(f.as_fd(), &mut buf, 0).unwrap();
    let kernel = cached(&p);
    assert!(kernel >= 64, "read pages are cached: {kernel}");
    assert_eq!(kernel, mincore_pages(&p));
    let out = run(bin().args(["stat", "--json", "-l"]).arg(&p));
    assert!(out.status.success());
    let v = json(&out);
    assert_eq!(v["files"][0]["cached_bytes"], kernel * PAGE);
    assert_eq!(v["total"]["bytes"], 256 * PAGE);
    // The mincore method gives the same count.
    let out = run(bin()
        .args(["stat", "--json", "-l", "--method", "mincore"])
        .arg(&p));
    let v = json(&out);
    assert_eq!(v["files"][0]["cached_bytes"], kernel * PAGE);
    assert_eq!(v["files"][0]["method"], "mincore");
}

#[test]
fn stat_tree_counts_hardlinks_once_and_streams_json_lines() {
    let t = tmp();
    tree(t.path(), 3, 10, 5000);
    fs::hard_link(t.path().join("d000/f0000"), t.path().join("d001/link")).unwrap();
    let out = run(bin().args(["stat", "--json"]).arg(t.path()));
    let v = json(&out);
    assert_eq!(v["total"]["files"], 30);
    assert_eq!(v["walk"]["hardlinks_skipped"], 1);
    let out = run(bin().args(["stat", "--json-lines"]).arg(t.path()));
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.iter().filter(|l| l["type"] == "file").count(), 30);
    assert_eq!(lines.last().unwrap()["type"], "summary");
    // --top keeps the N most cached, sorted.
    let out = run(bin().args(["stat", "--json", "--top", "3"]).arg(t.path()));
    assert_eq!(json(&out)["files"].as_array().unwrap().len(), 3);
}

/// The largest sparse file this filesystem allows, up to 100 TiB (ext4 with 4 KiB blocks stops
/// at 16 TiB - 4 KiB): `set_len` is tried from 100 TiB down, halving the step on EFBIG.
fn huge_sparse_file(p: &Path) -> (File, u64) {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(p)
        .unwrap();
    let (mut lo, mut hi) = (0u64, 100u64 << 40);
    if f.set_len(hi).is_ok() {
        return (f, hi);
    }
    // Largest page multiple that fits: lo fits, hi does not.
    while hi - lo > PAGE {
        let mid = (lo + (hi - lo) / 2) / PAGE * PAGE;
        if f.set_len(mid).is_ok() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    f.set_len(lo).unwrap();
    eprintln!("sparse file of {lo} bytes (100 TiB is too large here)");
    (f, lo)
}

#[test]
fn stat_mincore_of_a_huge_sparse_file_is_fast_and_exact() {
    let t = tmp();
    let p = t.path().join("sparse");
    let (f, size) = huge_sparse_file(&p);
    assert!(size >= 1 << 40, "a sparse file of at least 1 TiB: {size}");
    use std::os::unix::fs::FileExt;
    // 512 KiB of data far in, and 512 KiB read from a hole further on: a hole's pages are
    // cached (zeros) once read, and count as cached.
    f.write_all_at(&vec![7u8; 512 << 10], size / 3 / PAGE * PAGE)
        .unwrap();
    f.sync_all().unwrap();
    let mut buf = vec![0u8; 512 << 10];
    f.read_exact_at(&mut buf, size / 3 * 2 / PAGE * PAGE)
        .unwrap();
    let kernel = resident_pages(&f, 0, 0);
    assert_eq!(kernel, 256, "1 MiB cached, half of it a hole's zeros");
    let start = Instant::now();
    let (out, _) = run_deadline(
        bin()
            .args(["stat", "--method", "mincore", "--json", "-l"])
            .arg(&p),
        10,
    );
    assert!(out.status.success());
    let v = json(&out);
    assert_eq!(v["files"][0]["method"], "mincore");
    assert_eq!(v["files"][0]["cached_bytes"], kernel * PAGE);
    assert_eq!(v["total"]["cached_bytes"], kernel * PAGE);
    // The map line too: bounded memory, one cell per part, the two cached parts shown.
    let (out, _) = run_deadline(
        bin()
            .args(["stat", "--method", "mincore", "--map=30", "--json", "-l"])
            .arg(&p),
        10,
    );
    assert!(out.status.success());
    let v = json(&out);
    let map = v["files"][0]["map"].as_array().unwrap();
    assert_eq!(map.len(), 30);
    assert_eq!(map.iter().filter(|c| c.as_u64() > Some(0)).count(), 2);
    assert_eq!(v["files"][0]["cached_bytes"], kernel * PAGE);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    run(bin().arg("evict").arg(&p));
}
