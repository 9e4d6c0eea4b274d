//! The filter rules against rsync's documented semantics (the man page's examples), and the
//! parser and matcher under arbitrary rules and paths.

use super::*;

fn rules(list: &[(RuleKind, &str)]) -> Filters {
    let mut f = Filters::new(false);
    for (kind, text) in list {
        f.add(*kind, text.as_bytes()).unwrap();
    }
    f
}

fn out(f: &Filters, path: &str, dir: bool) -> bool {
    f.excluded(path.as_bytes(), dir, Side::Sender)
}

use RuleKind::{Exclude as X, Filter as F, Include as I};

#[test]
fn basename_patterns_match_the_last_component_anywhere() {
    let f = rules(&[(X, "*.o"), (X, "core")]);
    assert!(out(&f, "a.o", false));
    assert!(out(&f, "src/deep/a.o", false));
    assert!(out(&f, "x/core", false));
    assert!(out(&f, "core", true));
    assert!(!out(&f, "corefile", false));
    assert!(
        !out(&f, "a.o/b", false),
        "the pattern names the last component"
    );
}

#[test]
fn the_x_modifier_names_extended_attributes_not_files() {
    let f = rules(&[
        (F, "-x_system.*"),
        (F, "+x user.keep*"),
        (F, "-x user.*"),
        (F, "- *.o"),
    ]);
    assert!(f.xattr_excluded(b"system.posix_acl_access", Side::Sender));
    assert!(f.xattr_excluded(b"user.other", Side::Receiver));
    assert!(
        !f.xattr_excluded(b"user.keepme", Side::Sender),
        "first match decides"
    );
    assert!(!f.xattr_excluded(b"trusted.x", Side::Sender));
    assert!(!out(&f, "system.x", false), "x rules leave files alone");
    assert!(out(&f, "a.o", false));
    assert!(
        !f.xattr_excluded(b"a.o", Side::Sender),
        "file rules leave xattrs alone"
    );
    // Sided: `-xs` hides from the sender only (the receiver's own are removed).
    let f = rules(&[(F, "-xs user.*")]);
    assert!(f.xattr_excluded(b"user.a", Side::Sender));
    assert!(!f.xattr_excluded(b"user.a", Side::Receiver));
}

#[test]
fn anchored_and_inner_slash_patterns() {
    let f = rules(&[(X, "/top"), (X, "foo/bar")]);
    assert!(out(&f, "top", false));
    assert!(!out(&f, "a/top", false));
    assert!(out(&f, "foo/bar", false));
    assert!(out(&f, "x/foo/bar", false));
    assert!(!out(&f, "bar", false));
    assert!(!out(&f, "xfoo/bar", false));
}

#[test]
fn trailing_slash_matches_directories_only() {
    let f = rules(&[(X, "cache/")]);
    assert!(out(&f, "a/cache", true));
    assert!(!out(&f, "a/cache", false));
}

#[test]
fn star_stops_at_slash_and_double_star_crosses_it() {
    let f = rules(&[(X, "/a/*/c")]);
    assert!(out(&f, "a/b/c", false));
    assert!(!out(&f, "a/b/x/c", false));
    let f = rules(&[(X, "/a/**/c")]);
    assert!(out(&f, "a/b/x/c", false));
    assert!(out(&f, "a/b/c", false));
    let f = rules(&[(X, "**/tmp")]);
    assert!(out(&f, "tmp", false), "a leading ** matches at the top too");
    assert!(out(&f, "x/y/tmp", false));
    let f = rules(&[(X, "logs/**")]);
    assert!(out(&f, "logs/a", false));
    assert!(out(&f, "x/logs/a/b", false));
    assert!(
        !out(&f, "logs", true),
        "dir/** is what is below, not the directory"
    );
}

#[test]
fn triple_star_is_the_directory_and_all_below() {
    let f = rules(&[(X, "/keep/***")]);
    assert!(out(&f, "keep", true));
    assert!(out(&f, "keep/a/b", false));
    assert!(!out(&f, "keepx", true));
}

#[test]
fn first_match_wins() {
    // rsync's classic: only *.txt below any directory.
    let f = rules(&[(I, "*/"), (I, "*.txt"), (X, "*")]);
    assert!(!out(&f, "a", true));
    assert!(!out(&f, "a/b.txt", false));
    assert!(out(&f, "a/b.bin", false));
    let f = rules(&[(X, "*.txt"), (I, "*.txt")]);
    assert!(out(&f, "x.txt", false));
}

#[test]
fn classes_question_marks_and_escapes() {
    let f = rules(&[
        (X, "file[0-9].?"),
        (X, "[!a-c]x"),
        (X, "\\*lit"),
        (X, "[[:digit:]]z"),
    ]);
    assert!(out(&f, "file7.c", false));
    assert!(!out(&f, "filex.c", false));
    assert!(!out(&f, "file7.cc", false));
    assert!(out(&f, "dx", false));
    assert!(!out(&f, "bx", false));
    assert!(out(&f, "*lit", false));
    assert!(!out(&f, "alit", false));
    assert!(out(&f, "5z", false));
    assert!(!out(&f, "zz", false));
}

#[test]
fn filter_rule_forms() {
    let f = rules(&[
        (F, "+ keep.log"),
        (F, "- *.log"),
        (F, "exclude,! */"),
        (F, "include *"),
    ]);
    assert!(!out(&f, "keep.log", false));
    assert!(out(&f, "x.log", false));
    // "-! */": everything that is not a directory is excluded.
    assert!(out(&f, "plain", false));
    assert!(!out(&f, "dir", true));
    let mut f = Filters::new(false);
    for bad in ["x foo", "-w foo", "-", ": ", ":w", "-/ abs", "!x"] {
        assert!(f.add(F, bad.as_bytes()).is_err(), "{bad:?} accepted");
    }
    f.add(F, b"- a").unwrap();
    f.add(F, b"!").unwrap();
    assert!(f.is_empty(), "'!' clears the list");
    f.add(X, b"- b").unwrap();
    f.add(X, b"!").unwrap();
    assert!(f.is_empty(), "'!' clears the list for --exclude too");
}

#[test]
fn old_prefixes_in_exclude_arguments() {
    let f = rules(&[(X, "+ a.log"), (X, "*.log")]);
    assert!(!out(&f, "a.log", false));
    assert!(out(&f, "b.log", false));
}

#[test]
fn sides_and_delete_excluded() {
    let f = rules(&[(F, "P keep"), (F, "H hidden"), (X, "both")]);
    assert!(!out(&f, "keep", false));
    assert!(f.excluded(b"keep", false, Side::Receiver));
    assert!(out(&f, "hidden", false));
    assert!(!f.excluded(b"hidden", false, Side::Receiver));
    assert!(f.excluded(b"both", false, Side::Receiver));
    let mut f = Filters::new(true);
    f.add(X, b"both").unwrap();
    f.add(F, b"P kept").unwrap();
    assert!(out(&f, "both", false));
    assert!(
        !f.excluded(b"both", false, Side::Receiver),
        "--delete-excluded"
    );
    assert!(
        f.excluded(b"kept", false, Side::Receiver),
        "an explicit protect stays"
    );
}

#[test]
fn rule_files_skip_comments_and_blank_lines() {
    let dir = std::env::temp_dir().join(format!("pw-filter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rules");
    std::fs::write(&file, "# comment\n; also\n\n*.tmp\r\n+ keep.bak\n*.bak\n").unwrap();
    let mut f = Filters::new(false);
    f.add_file(X, &file).unwrap();
    assert!(out(&f, "x.tmp", false));
    assert!(!out(&f, "keep.bak", false));
    assert!(out(&f, "y.bak", false));
    assert!(!out(&f, "# comment", false));
    let merged = dir.join("merged");
    std::fs::write(&merged, format!("merge {}\n- *.c\n", file.display())).unwrap();
    let mut f = Filters::new(false);
    f.add_file(F, &merged).unwrap_err(); // "*.tmp" is not a filter rule
    std::fs::write(&merged, format!("merge,- {}\n- *.c\n", file.display())).unwrap();
    let mut f2 = Filters::new(false);
    f2.add_file(F, &merged).unwrap();
    assert!(out(&f2, "a.c", false) && out(&f2, "a.tmp", false));
    std::fs::write(&merged, format!("merge {}\n", merged.display())).unwrap();
    let e = Filters::new(false).add_file(F, &merged).unwrap_err();
    assert!(e.to_string().contains("nested"), "{e}");
    let e = Filters::new(false)
        .add_file(X, &dir.join("missing"))
        .unwrap_err();
    assert!(
        e.to_string().contains("missing") && e.to_string().contains("open"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hostile_patterns_are_bounded() {
    let mut f = Filters::new(false);
    let long = "a".repeat(MAX_PATTERN + 1);
    assert!(f.add(X, long.as_bytes()).is_err());
    let stars = "*a".repeat(MAX_STAR_RUNS + 1);
    assert!(f.add(X, stars.as_bytes()).is_err());
    // The classic exponential case of naive matchers stays fast.
    let p = "*a".repeat(MAX_STAR_RUNS) + "b";
    f.add(X, p.as_bytes()).unwrap();
    let path = "a".repeat(4000);
    let t = std::time::Instant::now();
    assert!(!out(&f, &path, false));
    assert!(t.elapsed().as_secs() < 2, "{:?}", t.elapsed());
}

#[test]
fn fuzz_rules_and_paths() {
    use proptest::prelude::*;
    let alphabet = proptest::sample::select(b"ab/*?[]!^-:\\,+ _.#".to_vec());
    let rule = proptest::collection::vec(alphabet.clone(), 0..24);
    let path = proptest::collection::vec(alphabet, 0..32);
    let kind = proptest::sample::select(vec![X, I, F]);
    crate::fuzzing::fuzz(
        "copy filters",
        2048,
        (
            proptest::collection::vec((kind, rule), 0..6),
            path,
            any::<bool>(),
        ),
        |(list, path, dir)| {
            let mut f = Filters::new(dir);
            for (kind, text) in &list {
                let _ = f.add(*kind, text);
            }
            let a = f.excluded(&path, dir, Side::Sender);
            let b = f.excluded(&path, dir, Side::Sender);
            assert_eq!(a, b);
            let _ = f.excluded(&path, !dir, Side::Receiver);
        },
    );
}

/// Reads the given per-directory files (`(dir, name) -> text`) for each directory, as the
/// walk does.
fn walk(f: &Filters, files: &[((&str, &str), &str)], dirs: &[&str]) -> DirRulesSeen {
    let seen = DirRulesSeen::default();
    for dir in dirs {
        let read = |name: &[u8]| {
            let hit = files
                .iter()
                .find(|((d, n), _)| d == dir && n.as_bytes() == name);
            Ok(hit.map(|(_, text)| text.as_bytes().to_vec()))
        };
        seen.put(
            Side::Sender,
            dir.as_bytes(),
            f.dir_rules(dir.as_bytes(), read).unwrap(),
        );
    }
    seen
}

/// Per-directory merge files (rsync's `:`): a directory's rules hold in it and below, not
/// above, the deeper file's first; `n` keeps them to their directory; an anchored pattern is
/// anchored at the file's directory; `!` clears what is inherited; the global rules after the
/// dir-merge rule come after all of them.
#[test]
fn per_directory_merge_files_hold_where_rsync_s_do() {
    let f = rules(&[(F, ": .rules"), (F, ":n- .only-here"), (X, "*.tmp")]);
    let files = [
        (("d1", ".rules"), "- secret*\n- /anch\n# comment\n"),
        (("d1/d2", ".rules"), "+ secret.keep\n"),
        (("d1/d2/d3", ".rules"), "!\n- other\n"),
        (("d1", ".only-here"), "x.log\n"),
    ];
    let seen = walk(&f, &files, &["", "d1", "d1/d2", "d1/d2/d3"]);
    let ex = |p: &str| {
        f.excluded_in(p.as_bytes(), false, Side::Sender, &|d| {
            seen.get(Side::Sender, d)
        })
    };
    assert!(!ex("secret.top"), "above the file");
    assert!(ex("d1/secret.mid") && ex("d1/d2/secret.deep"));
    assert!(!ex("d1/d2/secret.keep"), "the deeper file first");
    assert!(!ex("d1/d2/d3/secret.x"), "! cleared the inherited rules");
    assert!(ex("d1/d2/d3/other"));
    assert!(ex("d1/anch") && !ex("d1/d2/anch"), "anchored at d1");
    assert!(ex("d1/x.log") && !ex("d1/d2/x.log"), "n: not inherited");
    assert!(ex("d1/d2/d3/a.tmp"));
    assert!(
        !f.excluded(b"d1/secret.mid", false, Side::Sender),
        "no files read: none"
    );
}

/// `-C`: rsync's list as excludes, then each directory's `.cvsignore` read as words and not
/// inherited; `e` excludes the merge file itself.
#[test]
fn cvs_excludes_and_cvsignore_words() {
    let mut f = Filters::new(false);
    f.add_cvs_exclude().unwrap();
    assert!(out(&f, "a.o", false) && out(&f, "x/core", false) && out(&f, "b~", false));
    assert!(out(&f, ".git", true) && !out(&f, ".git", false) && !out(&f, "a.c", false));
    let seen = walk(&f, &[(("d", ".cvsignore"), "*.junk  b.tmp\nc")], &["d"]);
    let ex = |p: &str| {
        f.excluded_in(p.as_bytes(), false, Side::Sender, &|d| {
            seen.get(Side::Sender, d)
        })
    };
    assert!(ex("d/x.junk") && ex("d/b.tmp") && ex("d/c"));
    assert!(
        !ex("d/e/x.junk") && !ex("x.junk"),
        ":C holds in its directory only"
    );
    let g = rules(&[(F, ":e .rules")]);
    assert!(out(&g, "sub/.rules", false));
}

#[test]
fn bad_per_directory_rules_are_errors() {
    let f = rules(&[(F, ": .rules")]);
    assert!(f
        .dir_rules(b"d", |_| Ok(Some(b": .nested".to_vec())))
        .is_err());
    assert!(f.dir_rules(b"d", |_| Ok(Some(b"~ what".to_vec()))).is_err());
    let mut g = Filters::new(false);
    assert!(g.add(F, b"-C foo").is_err());
    assert!(g.add(F, b":").is_err());
    assert!(g.add(F, b": ..").is_err());
}

/// Any bytes as a per-directory merge file, read each way, give rules or an error, and
/// matching with them never panics.
#[test]
fn fuzz_per_directory_merge_files() {
    use proptest::prelude::*;
    let alphabet = proptest::sample::select(b"ab/*?[]!-+:, \n\r#;CPHSR".to_vec());
    let text = proptest::collection::vec(alphabet.clone(), 0..64);
    let path = proptest::collection::vec(alphabet, 0..24);
    crate::fuzzing::fuzz(
        "per-directory merge files",
        1024,
        (text, path, any::<bool>()),
        |(text, path, dir)| {
            for spec in [": .r", ":n- .r", ":C", ":w .r", ":+ .r", ":s .r"] {
                let mut f = Filters::new(dir);
                f.add(F, spec.as_bytes()).unwrap();
                if let Ok(r) = f.dir_rules(b"a", |_| Ok(Some(text.clone()))) {
                    let seen = DirRulesSeen::default();
                    seen.put(Side::Sender, b"a", r);
                    let _ = f.excluded_in(&path, dir, Side::Sender, &|d| seen.get(Side::Sender, d));
                }
            }
        },
    );
}
