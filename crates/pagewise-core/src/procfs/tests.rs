//! Examples of each file's lines, and the property tests that feed every parser arbitrary
//! input (no panic; what comes out is consistent with what went in).

use super::*;
use proptest::prelude::*;

#[test]
fn maps_lines_parse_file_mappings_only() {
    let m = parse_maps_line(
        b"7f1c2a400000-7f1c2a600000 r--s 00200000 fe:01 15597634                   /var/tmp/a b",
    )
    .unwrap();
    assert_eq!(
        m,
        FileMapping {
            start: 0x7f1c2a400000,
            end: 0x7f1c2a600000,
            offset: 0x200000,
            dev: (0xfe, 1),
            ino: 15597634
        }
    );
    assert!(parse_maps_line(b"7ffd1c9e2000-7ffd1ca03000 rw-p 00000000 00:00 0  [stack]").is_none());
    assert!(parse_maps_line(b"garbage").is_none());
    assert_eq!(m.addresses_of(0x200000, 4096), Some((0x7f1c2a400000, 4096)));
    assert_eq!(m.addresses_of(0x1ff000, 8192), Some((0x7f1c2a400000, 4096)));
    assert_eq!(
        m.addresses_of(0x3ff000, 0x10000),
        Some((0x7f1c2a5ff000, 4096))
    );
    assert_eq!(m.addresses_of(0x400000, 4096), None);
    assert_eq!(m.addresses_of(0, 4096), None);
    let mut bad = b"55d0c0a00000-55d0c0a02000 r--p 00000000 08:02 42 /x/".to_vec();
    bad.extend_from_slice(&[0xff, 0xfe]);
    assert_eq!(parse_maps_line(&bad).unwrap().ino, 42);
    let l =
        b"7f0c1a200000-7f0c1a222000 r--p 00000000 fd:01 1234567                    /usr/lib/x.so";
    let m = parse_maps_line(l).unwrap();
    assert_eq!(
        (m.dev, m.ino, m.start),
        ((0xfd, 1), 1234567, 0x7f0c1a200000)
    );
    assert_eq!(m.file(), crate::sys::FileId(0xfd, 1, 1234567));
}

#[test]
fn smaps_names_the_locked_mappings() {
    let s = "\
7f0c1a200000-7f0c1a222000 r--p 00000000 fd:01 1234567 /usr/lib/x.so
Size:                136 kB
Locked:                0 kB
7f0c1a300000-7f0c1a322000 r--s 00000000 fd:01 99 /data/y
Size:                136 kB
Locked:              136 kB
VmFlags: rd sh mr mw me ms lo
";
    assert_eq!(parse_smaps_locked(s), vec![0x7f0c1a300000]);
    assert!(parse_smaps_locked("Locked: 4 kB\n").is_empty());
}

#[test]
fn mountinfo_lines_parse_with_their_paths_unescaped() {
    let mi = b"\
22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
33 25 0:29 /ns /mnt/cg\\040two rw - cgroup2 cgroup2 rw,nsdelegate\n\
34 25 7:0 /a\\134b /mnt/tab\\011and\\012nl\\303\\251 rw - ext4 /dev/loop0 rw\n\
no separator here at all\n";
    let m = parse_mountinfo(mi);
    assert_eq!(m.len(), 3);
    assert_eq!(m[0].dev, Some((253, 1)));
    assert_eq!(m[0].root, PathBuf::from("/"));
    assert_eq!(m[0].fstype, "ext4");
    assert_eq!(m[1].mount_point, PathBuf::from("/mnt/cg two"));
    assert_eq!(m[1].super_options, "rw,nsdelegate");
    assert_eq!(m[2].root, PathBuf::from("/a\\b"));
    assert_eq!(m[2].mount_point, PathBuf::from("/mnt/tab\tand\nnlé"));
    assert_eq!(unescape(b"\\777 \\04 \\"), b"\\777 \\04 \\".to_vec());
    assert_eq!(parse_dev("7:0"), Some((7, 0)));
    assert_eq!(parse_dev("98"), None);
}

#[test]
fn status_and_stat_lines_parse() {
    let status = "Name:\tcat\nUmask:\t0027\nTgid:\t4242\nPid:\t4243\n";
    assert_eq!(status_field(status, "Tgid"), Some("4242"));
    assert_eq!(status_field(status, "Umask"), Some("0027"));
    assert_eq!(status_field(status, "Uid"), None);
    assert_eq!(tgid_of(std::process::id()), Some(std::process::id()));
    // kthreadd: flags 0x208040 has PF_KTHREAD.
    let kthreadd = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 8";
    let s = parse_stat(kthreadd).unwrap();
    assert!(s.is_kernel_thread() && s.comm == "kthreadd" && s.ppid == 0);
    // A user process whose name has spaces and parentheses: flags without PF_KTHREAD.
    let user = "77 (a) b (c) S 1 77 77 0 -1 4194560 100 0 0 0 1 1 0 0 20 0 1 0 50";
    let s = parse_stat(user).unwrap();
    assert_eq!(
        (s.comm.as_str(), s.state.as_str(), s.ppid),
        ("a) b (c", "S", 1)
    );
    assert!(!s.is_kernel_thread());
    assert_eq!(parse_stat("garbage"), None);
    assert!(threads_of(std::process::id())
        .unwrap()
        .contains(&std::process::id()));
    assert!(exists(std::process::id()));
}

#[test]
fn meminfo_and_vmstat_lines_parse() {
    let mi = "MemTotal:       16000000 kB\nCached:          2000 kB\nSwapCached: 1 kB\n";
    assert_eq!(meminfo_bytes(mi, "Cached"), Some(2000 * 1024));
    assert_eq!(meminfo_bytes(mi, "Dirty"), None);
    let vm = "nr_free_pages 12\nworkingset_refault_file 77\n";
    assert_eq!(vmstat_value(vm, "workingset_refault_file"), Some(77));
    assert_eq!(vmstat_value(vm, "workingset_refault"), None);
    let (m, v) = meminfo_and_vmstat();
    assert!(meminfo_bytes(&m, "MemTotal").is_some() && vmstat_value(&v, "nr_free_pages").is_some());
}

#[test]
fn own_maps_are_counted() {
    let (used, limit) = map_count_and_limit();
    assert!(used > 0 && limit > 0);
}

#[test]
fn descendants_are_found_through_every_generation() {
    // sh -> sh -> sleep: both generations below the first are found.
    let mut top = std::process::Command::new("sh")
        .args(["-c", "sh -c 'sleep 5 & wait' & wait"])
        .spawn()
        .unwrap();
    let me = top.id();
    let comms_of = |pids: &[u32]| -> Vec<String> {
        pids.iter()
            .filter_map(|&p| stat_of(p))
            .map(|s| s.comm)
            .collect()
    };
    // Until the grandchild has exec'd sleep (a forked child is "sh" for a moment).
    let (mut found, mut comms) = (Vec::new(), Vec::new());
    for _ in 0..300 {
        found = descendants_of(&[me]);
        comms = comms_of(&found);
        if comms.iter().any(|c| c == "sleep") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Ends exactly the processes this test started, by PID.
    let _ = std::process::Command::new("kill")
        .args(found.iter().map(|p| p.to_string()))
        .status();
    let _ = top.kill();
    let _ = top.wait();
    assert!(comms.contains(&"sleep".to_string()), "{found:?} {comms:?}");
    assert!(!found.contains(&me));
}

/// Bytes that look like /proc text more often than uniform bytes would: digits, hex,
/// separators, escapes, and a few arbitrary bytes.
fn proc_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => proptest::sample::select(b"0123456789abcdef:- ()\\\n\t/kBZS".to_vec()),
        1 => any::<u8>(),
    ];
    proptest::collection::vec(byte, 0..200)
}

/// A well-formed maps line from its fields, with an arbitrary path.
fn maps_line() -> impl Strategy<Value = (FileMapping, Vec<u8>)> {
    let fields = (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<(u32, u32)>(),
        1..u64::MAX,
    );
    (fields, proptest::collection::vec(any::<u8>(), 0..60)).prop_map(|((s, e, o, dev, ino), p)| {
        let m = FileMapping {
            start: s,
            end: e,
            offset: o,
            dev,
            ino,
        };
        (m, p)
    })
}

/// Every parser of /proc text over arbitrary bytes: no panic, and what it finds is there.
#[test]
fn fuzz_proc_parsers() {
    crate::fuzzing::fuzz("procfs", 1024, proc_bytes(), |b| {
        let s = String::from_utf8_lossy(&b);
        for m in parse_maps(&b) {
            prop_assert!(m.ino != 0);
            let _ = m.addresses_of(m.offset, m.end.wrapping_sub(m.start));
        }
        let _ = parse_smaps_locked(&s);
        for m in parse_mountinfo(&b) {
            prop_assert!(!m.fstype.contains(' '));
        }
        prop_assert!(unescape(&b).len() <= b.len());
        let _ = (status_field(&s, "Tgid"), parse_stat(&s), parse_dev(&s));
        let _ = (meminfo_bytes(&s, "Cached"), vmstat_value(&s, "pgfault"));
        Ok(())
    });
}

/// A maps line the kernel could write parses back to its fields (the path cut or not).
#[test]
fn fuzz_maps_lines_round_trip() {
    crate::fuzzing::fuzz("procfs maps", 512, maps_line(), |(m, path)| {
        let mut l = format!(
            "{:x}-{:x} r--s {:08x} {:02x}:{:02x} {} ",
            m.start, m.end, m.offset, m.dev.0, m.dev.1, m.ino
        )
        .into_bytes();
        l.extend_from_slice(&path);
        if l.len() - path.len() <= 120 {
            prop_assert_eq!(parse_maps_line(&l), Some(m));
        }
        Ok(())
    });
}

/// Escaping every byte of a path as `\NNN` and unescaping gives the path back.
#[test]
fn fuzz_mountinfo_escapes_round_trip() {
    let path = proptest::collection::vec(any::<u8>(), 0..40);
    crate::fuzzing::fuzz("procfs mountinfo", 512, path, |p| {
        let esc: String = p.iter().map(|b| format!("\\{b:03o}")).collect();
        prop_assert_eq!(&unescape(esc.as_bytes()), &p);
        let line = format!(
            "1 2 8:1 / {} rw - ext4 /dev/x rw\n",
            if esc.is_empty() { "/" } else { &esc }
        );
        let m = parse_mountinfo(line.as_bytes());
        prop_assert_eq!(m.len(), 1);
        Ok(())
    });
}
