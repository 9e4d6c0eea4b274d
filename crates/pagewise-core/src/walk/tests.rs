use super::*;
use std::fs;

fn collect(roots: &[PathBuf], opts: &WalkOptions) -> (Vec<PathBuf>, WalkSummary, u64) {
    let tally = Tally::new();
    let out = Mutex::new(Vec::new());
    let s = walk(
        roots,
        opts,
        &tally,
        &(),
        || (),
        |_, f| out.lock().unwrap().push(f.path.to_path_buf()),
        |_| {},
    )
    .unwrap();
    let mut v = out.into_inner().unwrap();
    v.sort();
    (v, s, tally.errors.count())
}

#[test]
fn walks_tree_skips_specials_and_dedupes_hardlinks() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    fs::create_dir_all(r.join("a/b/c")).unwrap();
    fs::write(r.join("a/x"), b"x").unwrap();
    fs::write(r.join("a/b/c/y"), b"y").unwrap();
    fs::hard_link(r.join("a/x"), r.join("a/b/x2")).unwrap();
    std::os::unix::fs::symlink(r.join("a"), r.join("link")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        r.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let (files, s, errs) = collect(&[r.to_path_buf()], &WalkOptions::default());
    assert_eq!(files.len(), 2, "{files:?}");
    assert_eq!(s.hardlinks_skipped, 1);
    assert_eq!(s.special_skipped, 1);
    assert_eq!(s.symlinks_skipped, 1);
    assert_eq!(errs, 0);
}

#[test]
fn max_depth_include_exclude() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    fs::create_dir_all(r.join("d1/d2")).unwrap();
    fs::write(r.join("top.txt"), b"1").unwrap();
    fs::write(r.join("d1/mid.log"), b"1").unwrap();
    fs::write(r.join("d1/d2/deep.txt"), b"1").unwrap();
    let o = WalkOptions {
        max_depth: Some(1),
        ..Default::default()
    };
    assert_eq!(collect(&[r.to_path_buf()], &o).0, vec![r.join("top.txt")]);
    let o = WalkOptions {
        include: vec!["*.txt".into()],
        ..Default::default()
    };
    assert_eq!(collect(&[r.to_path_buf()], &o).0.len(), 2);
    let o = WalkOptions {
        exclude: vec!["d2".into()],
        ..Default::default()
    };
    assert_eq!(collect(&[r.to_path_buf()], &o).0.len(), 2);
}

#[test]
fn follow_detects_symlink_loop() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    fs::create_dir_all(r.join("d")).unwrap();
    fs::write(r.join("d/f"), b"1").unwrap();
    std::os::unix::fs::symlink("..", r.join("d/up")).unwrap();
    let o = WalkOptions {
        follow: true,
        ..Default::default()
    };
    let (files, _, errs) = collect(&[r.to_path_buf()], &o);
    assert_eq!(files.len(), 1);
    assert_eq!(errs, 1, "the loop is reported once");
}

#[test]
fn big_directory_is_split_and_complete() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..2000 {
        fs::write(t.path().join(format!("f{i}")), b"").unwrap();
    }
    let (files, s, _) = collect(&[t.path().to_path_buf()], &WalkOptions::default());
    assert_eq!(files.len(), 2000);
    assert_eq!(s.files, 2000);
}

#[test]
fn missing_root_is_an_error_naming_path_and_call() {
    let tally = Tally::new();
    walk(
        &[PathBuf::from("/nonexistent/pagewise")],
        &WalkOptions::default(),
        &tally,
        &(),
        || (),
        |_, _| {},
        |_| {},
    )
    .unwrap();
    let e = tally.errors.take();
    assert_eq!(e.len(), 1);
    assert_eq!(
        e[0].to_string(),
        "/nonexistent/pagewise: stat failed: No such file or directory (os error 2)"
    );
}

/// A visit that panics (a bug, or a dependency's panic as rustix's on 6.1 without
/// /proc/self/auxv) must reach the caller as that panic, never leave the other workers
/// waiting forever for the job it was running (seen: `pagewise.load` as nobody hung on 6.1).
#[test]
fn a_panicking_visit_reaches_the_caller_instead_of_hanging() {
    let t = tempfile::tempdir().unwrap();
    for d in 0..4 {
        fs::create_dir_all(t.path().join(format!("d{d}"))).unwrap();
        for f in 0..50 {
            fs::write(t.path().join(format!("d{d}/f{f}")), b"x").unwrap();
        }
    }
    let root = t.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(|| {
            let opts = WalkOptions {
                threads: 4,
                ..WalkOptions::default()
            };
            walk(
                &[root],
                &opts,
                &Tally::new(),
                &(),
                || (),
                |_, f| {
                    if f.path.ends_with("d2/f7") {
                        panic!("visit failed");
                    }
                },
                |_| {},
            )
        });
        let _ = tx.send(r.is_err());
    });
    let panicked = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the walk hung after a worker panicked");
    assert!(panicked, "the worker's panic reaches the caller");
}
