//! What `copy` prints and logs: `-q` nothing on success, `--log-file` lines that parse
//! (`TIME [PID] CODE PATH`), timestamps on every `--json-lines` line.

use crate::common::*;
use std::fs;

fn tree(root: &std::path::Path) {
    for (name, size) in [("a", 10), ("d/b", 5000), ("d/e/c", 0)] {
        let p = root.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        write_file(&p, size);
    }
    std::os::unix::fs::symlink("a", root.join("link")).unwrap();
    write_file(&root.join("new\nline"), 3);
}

#[test]
fn quiet_prints_nothing_on_success_and_errors_still() {
    let t = tmp();
    let src = t.path().join("src");
    tree(&src);
    let out = run(bin()
        .args(["copy", "-a", "-q"])
        .arg(&src)
        .arg(t.path().join("dst")));
    assert!(out.status.success());
    assert_eq!(stdout(&out), "");
    assert_eq!(stderr(&out), "");
    let out = run(bin()
        .args(["copy", "-a", "-q"])
        .arg(t.path().join("missing"))
        .arg(t.path().join("dst2")));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing"), "{}", stderr(&out));
}

/// `TIME [PID] REST`: TIME is RFC 3339 UTC with milliseconds, PID a number.
fn parse_line(line: &str) -> (String, u32, String) {
    let (time, rest) = line.split_once(' ').unwrap();
    assert_eq!(time.len(), 24, "{line:?}");
    assert!(
        time.ends_with('Z') && time.as_bytes()[10] == b'T',
        "{line:?}"
    );
    let (pid, rest) = rest.split_once("] ").unwrap();
    let pid = pid.strip_prefix('[').unwrap().parse().unwrap();
    (time.to_string(), pid, rest.to_string())
}

#[test]
fn log_file_lines_parse() {
    let t = tmp();
    let src = t.path().join("src");
    tree(&src);
    let dst = t.path().join("dst");
    let log = t.path().join("copy.log");
    let out = run(bin()
        .args(["copy", "-a", "--log-file"])
        .arg(&log)
        .arg(&src)
        .arg(&dst));
    assert!(out.status.success(), "{}", stderr(&out));
    // Second run: an update and a deletion.
    write_file(&src.join("a"), 11);
    fs::remove_file(src.join("d/b")).unwrap();
    let out = run(bin()
        .args(["copy", "-a", "-T", "-u", "--delete", "--log-file"])
        .arg(&log)
        .arg(&src)
        .arg(&dst));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = fs::read_to_string(&log).unwrap();
    let lines: Vec<_> = text.lines().map(parse_line).collect();
    let codes: Vec<&str> = lines.iter().map(|(_, _, r)| r.as_str()).collect();
    let pids: std::collections::HashSet<u32> = lines.iter().map(|l| l.1).collect();
    assert_eq!(pids.len(), 2, "{text}");
    assert!(codes[0].starts_with("pagewise copy "), "{text}");
    let has = |s: &str| codes.contains(&s);
    let d = dst.display();
    assert!(has(&format!(">f+++++++++ {d}/d/b")), "{text}");
    assert!(has(&format!("cd+++++++++ {d}/d/e/")), "{text}");
    assert!(has(&format!("cL+++++++++ {d}/link")), "{text}");
    assert!(has(&format!(">f+++++++++ {d}/new\\#012line")), "{text}");
    // An update names what differed, in rsync's letters: size and time.
    assert!(has(&format!(">f.st...... {d}/a")), "{text}");
    assert!(has(&format!("*deleting   {d}/d/b")), "{text}");
    assert!(codes.iter().any(|c| c.starts_with("copied ")), "{text}");
    // A failure is logged once, as its entry.
    let missing = t.path().join("missing");
    let out = run(bin()
        .args(["copy", "-a", "--log-file"])
        .arg(&log)
        .arg(&missing)
        .arg(&dst));
    assert_eq!(out.status.code(), Some(2));
    let text = fs::read_to_string(&log).unwrap();
    let failed: Vec<&str> = text.lines().filter(|l| l.contains("*failed")).collect();
    assert_eq!(failed.len(), 1, "{text}");
    assert!(
        failed[0].contains("missing") && failed[0].contains("failed:"),
        "{text}"
    );
    let lines: Vec<_> = text.lines().map(parse_line).collect();
    // Times do not go backwards.
    let times: Vec<&String> = lines.iter().map(|l| &l.0).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{text}");
    // A log file that cannot be one is refused before anything is copied.
    let fifo = mkfifo(&t.path().join("fifo"));
    let out = run(bin()
        .args(["copy", "-a", "--log-file"])
        .arg(&fifo)
        .arg(&src)
        .arg(t.path().join("x")));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("--log-file") && stderr(&out).contains("fifo"),
        "{}",
        stderr(&out)
    );
    assert!(!t.path().join("x").exists());
}

#[test]
fn json_lines_carry_timestamps() {
    let t = tmp();
    let src = t.path().join("src");
    tree(&src);
    let out = run(bin()
        .args(["copy", "-a", "--json-lines"])
        .arg(&src)
        .arg(t.path().join("dst")));
    assert!(out.status.success());
    let mut n = 0;
    for line in stdout(&out).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let time = v["time"]
            .as_str()
            .unwrap_or_else(|| panic!("no time: {line}"));
        assert_eq!(time.len(), 24, "{line}");
        assert!(time.starts_with("20") && time.ends_with('Z'), "{line}");
        n += 1;
    }
    assert!(n >= 7, "{}", stdout(&out));
}

/// rsync's `--info=progress2` is `--progress` (a line into a pipe); other info flags are
/// refused by name.
#[test]
fn info_progress2_is_progress() {
    let t = tmp();
    let src = t.path().join("src");
    tree(&src);
    let out = run(bin()
        .args(["copy", "-a", "--info=progress2"])
        .arg(&src)
        .arg(t.path().join("dst")));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).lines().any(|l| l.starts_with("copy ")),
        "a progress line into the pipe: {}",
        stderr(&out)
    );
    let out = run(bin()
        .args(["copy", "-a", "--info=stats2"])
        .arg(&src)
        .arg(t.path().join("dst3")));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("stats2"), "{}", stderr(&out));
}

/// `--log-file` on a file system that fills up mid-run: the log ends at its last whole line
/// (no line cut in two), stderr says the log is incomplete and why, and the run exits 2.
/// Before: the log was cut mid-line, nothing was said, exit 0.
#[test]
fn a_log_file_that_cannot_be_written_to_its_end_is_reported() {
    if !require_root("mounting a small tmpfs") {
        return;
    }
    let t = tmp();
    let src = numbered_files(t.path(), 400, 10);
    let m = Mount::tmpfs("64k");
    // Fill all but about 5 KiB: the log's first lines fit, the rest of the 400 do not.
    let filler = m.path().join("filler");
    let free = {
        let s = nix_statvfs(m.path());
        s.0 * s.1
    };
    std::fs::write(&filler, vec![7u8; (free - 5000) as usize]).unwrap_or(());
    let log = m.path().join("copy.log");
    let o = run(bin()
        .args(["copy", "--log-file"])
        .arg(&log)
        .arg(format!("{}/", src.display()))
        .arg(t.path().join("dst")));
    let text = std::fs::read(&log).unwrap();
    assert!(!text.is_empty(), "the first lines fit");
    assert_eq!(text.last(), Some(&b'\n'), "a line was cut in two");
    assert!(
        String::from_utf8_lossy(&text)
            .lines()
            .all(|l| l.contains(" [")),
        "every line is whole"
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--log-file") && stderr(&o).contains("No space left"),
        "{}",
        stderr(&o)
    );
    // The copy itself is complete.
    assert_eq!(
        std::fs::read_dir(t.path().join("dst")).unwrap().count(),
        400
    );
}

/// (block size, free blocks) of the file system at `p`.
fn nix_statvfs(p: &std::path::Path) -> (u64, u64) {
    let out = std::process::Command::new("stat")
        .args(["-f", "-c", "%S %a"])
        .arg(p)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let mut it = s.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

/// `--delete` labels what it removes by what it was — a FIFO, a socket, a device, a symlink, a
/// directory, a file — in `-i`, `--json-lines` and `--log-file` (where, as in rsync's log, a
/// directory's path ends in `/`), and a device it makes is rsync's `cD`, not `cS`.
#[test]
fn deleted_entries_are_labelled_by_their_kind() {
    if !require_root("mknod of a character device") {
        return;
    }
    use pagewise_core::sys;
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    write_file(&src.join("kept"), 10);
    let dev = libc::makedev(1, 3);
    sys::mknod(&src.join("chr"), sys::NodeKind::CharDevice, 0o600, dev).unwrap();
    let dst = t.path().join("dst");
    let log = t.path().join("copy.log");
    let out = run(bin()
        .args(["copy", "-aT", "--log-file"])
        .arg(&log)
        .arg(&src)
        .arg(&dst));
    assert!(out.status.success(), "{}", stderr(&out));
    sys::mknod(&dst.join("fifo"), sys::NodeKind::Fifo, 0o644, 0).unwrap();
    sys::mknod(&dst.join("sock"), sys::NodeKind::Socket, 0o600, 0).unwrap();
    sys::mknod(&dst.join("blk"), sys::NodeKind::BlockDevice, 0o600, dev).unwrap();
    std::os::unix::fs::symlink("kept", dst.join("link")).unwrap();
    fs::create_dir_all(dst.join("dir/sub")).unwrap();
    write_file(&dst.join("file"), 3);
    let expected = [
        ("fifo", "special"),
        ("sock", "special"),
        ("blk", "device"),
        ("link", "symlink"),
        ("dir", "dir"),
        ("file", "file"),
    ];
    // What a dry run says it would delete, as JSON lines.
    let out = run(bin()
        .args(["copy", "-aT", "--delete", "--dry-run", "--json-lines"])
        .arg(&src)
        .arg(&dst));
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (name, kind) in expected {
        let p = dst.join(name);
        let entry = lines
            .iter()
            .find(|l| l["type"] == "entry" && l["path"] == p.to_str().unwrap())
            .unwrap_or_else(|| panic!("no entry for {name}: {}", stdout(&out)));
        assert_eq!(entry["action"], "deleted", "{entry}");
        assert_eq!(entry["kind"], kind, "{name}: {entry}");
    }
    // Deleted for real, itemized and logged.
    let out = run(bin()
        .args(["copy", "-aT", "--delete", "-i", "--log-file"])
        .arg(&log)
        .arg(&src)
        .arg(&dst));
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = stdout(&out);
    for (name, kind) in expected {
        let p = dst.join(name);
        assert!(fs::symlink_metadata(&p).is_err(), "{name} is still there");
        let line = format!("{:<8} {kind:<8} {}", "deleted", p.display());
        assert!(listed.lines().any(|l| l == line), "{line:?} in:\n{listed}");
    }
    let text = fs::read_to_string(&log).unwrap();
    let codes: Vec<String> = text.lines().map(|l| parse_line(l).2).collect();
    let has = |s: String| codes.contains(&s);
    let d = dst.display();
    assert!(has(format!("cD+++++++++ {d}/chr")), "{text}");
    assert!(has(format!("*deleting   {d}/dir/")), "{text}");
    for name in ["fifo", "sock", "blk", "link", "file"] {
        assert!(has(format!("*deleting   {d}/{name}")), "{text}");
    }
}

/// A source whose residency the kernel will not tell (cachestat refuses a file the caller may
/// not write; mincore cannot tell what was cached before): the summary says the source's part
/// is unknown and why, with no percentage, and JSON counts the file as unknown.
#[test]
fn unknown_source_residency_is_said_with_its_reason_and_no_percentage() {
    if !require_root("switching to user nobody") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let t = tmp();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    open_up_ancestors(t.path());
    let src = t.path().join("src");
    write_file(&src, 1 << 20);
    fs::set_permissions(&src, fs::Permissions::from_mode(0o644)).unwrap();
    let out_dir = t.path().join("out");
    fs::create_dir(&out_dir).unwrap();
    std::os::unix::fs::chown(&out_dir, Some(65534), Some(65534)).unwrap();
    let out = run(as_nobody().arg("copy").arg(&src).arg(out_dir.join("a")));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stderr(&out);
    let source = text
        .split("cache left: source ")
        .nth(1)
        .and_then(|s| s.split(", destination").next())
        .unwrap_or_else(|| panic!("no source part in {text}"));
    assert!(source.contains("unknown"), "{source}");
    assert!(source.contains("cachestat refused"), "the reason: {source}");
    assert!(
        !source.contains('%'),
        "no percentage of an unknown: {source}"
    );
    let out = run(as_nobody()
        .args(["copy", "--json"])
        .arg(&src)
        .arg(out_dir.join("b")));
    let v = json(&out);
    assert_eq!(v["residue"]["source_unknown_files"], 1, "{v}");
    assert!(same(&src, &out_dir.join("b")));
}
