//! The pidfile, NOTIFY_SOCKET and report parsers (property-tested: they read outside input),
//! the pidfile's atomic write and removal, and notifications received on a bound socket.

use super::*;
use proptest::prelude::*;
use std::os::unix::fs::MetadataExt;

#[test]
fn pids_parse_strictly() {
    assert_eq!(parse_pid(b"1234\n"), Some(1234));
    assert_eq!(parse_pid(b"  77 \n"), Some(77));
    for bad in [
        &b""[..],
        b"\n",
        b"0\n",
        b"-5",
        b"+5",
        b"12 34",
        b"abc",
        b"99999999999",
        b"\xff1",
    ] {
        assert_eq!(parse_pid(bad), None, "{bad:?}");
    }
    assert_eq!(parse_pid(&[b'1'; 65]), None, "over the bound");
}

#[test]
fn fuzz_pidfile_and_report_parsers() {
    crate::fuzzing::fuzz(
        "pidfile content",
        4096,
        proptest::collection::vec(any::<u8>(), 0..80),
        |b| {
            if let Some(p) = parse_pid(&b) {
                prop_assert!(p > 0);
                prop_assert_eq!(std::str::from_utf8(&b).unwrap().trim(), p.to_string());
            }
            if let Some(said) = parse_report(&b, 7) {
                match said {
                    ChildSaid::Ready { code, .. } => prop_assert!((0..=255).contains(&code)),
                    ChildSaid::Failed { code, .. } => prop_assert!((1..=255).contains(&code)),
                    ChildSaid::Died { .. } => prop_assert!(false, "never parsed"),
                }
            }
            Ok(())
        },
    );
}

#[test]
fn fuzz_notify_socket_values() {
    crate::fuzzing::fuzz(
        "NOTIFY_SOCKET",
        4096,
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..200),
            "[/@][a-z/]{0,120}".prop_map(String::into_bytes),
        ],
        |v| {
            match parse_notify_socket(&v) {
                Ok(None) => prop_assert!(v.is_empty()),
                Ok(Some(NotifyTarget::Path(p))) => {
                    prop_assert!(v[0] == b'/' && v.len() <= SUN_PATH_MAX);
                    prop_assert_eq!(p.as_os_str().as_bytes(), &v[..]);
                    prop_assert!(SocketAddr::from_pathname(&p).is_ok());
                }
                Ok(Some(NotifyTarget::Abstract(n))) => {
                    prop_assert!(v[0] == b'@' && !n.is_empty() && n.len() <= SUN_PATH_MAX);
                    prop_assert!(SocketAddr::from_abstract_name(&n).is_ok());
                }
                Err(why) => prop_assert!(!why.is_empty()),
            }
            Ok(())
        },
    );
}

#[test]
fn notify_socket_values_are_checked() {
    assert_eq!(parse_notify_socket(b""), Ok(None));
    assert_eq!(
        parse_notify_socket(b"/run/systemd/notify"),
        Ok(Some(NotifyTarget::Path("/run/systemd/notify".into())))
    );
    assert_eq!(
        parse_notify_socket(b"@sd-notify/1"),
        Ok(Some(NotifyTarget::Abstract(b"sd-notify/1".to_vec())))
    );
    assert!(parse_notify_socket(b"@").is_err());
    assert!(parse_notify_socket(b"run/notify")
        .unwrap_err()
        .contains("absolute"));
    assert!(parse_notify_socket(b"vsock:2:1234")
        .unwrap_err()
        .contains("AF_VSOCK"));
    let long = [b"/".as_slice(), &[b'a'; 107]].concat();
    assert!(parse_notify_socket(&long).unwrap_err().contains("longer"));
}

#[test]
fn notifications_arrive_on_path_and_abstract_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let rx = UnixDatagram::bind(&path).unwrap();
    let name = format!("pagewise-hold-test-{}", std::process::id());
    let rx_abs = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
    for (target, sock) in [
        (NotifyTarget::Path(path.clone()), &rx),
        (NotifyTarget::Abstract(name.clone().into_bytes()), &rx_abs),
    ] {
        let n = Notifier {
            target,
            socket: UnixDatagram::unbound().unwrap(),
        };
        n.send("READY=1\nSTATUS=x").unwrap();
        let mut buf = [0u8; 64];
        sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let len = sock.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=x");
    }
}

#[test]
fn the_pidfile_is_written_0644_and_removed_only_while_ours() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("lock.pid");
    let mut pf = Pidfile::claim(&p).unwrap();
    pf.write(4242).unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "4242\n");
    assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o644);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary left");
    drop(pf);
    assert!(!p.exists(), "removed: it named us");

    let mut pf = Pidfile::claim(&p).unwrap();
    pf.write(4242).unwrap();
    std::fs::write(&p, "4343\n").unwrap(); // another instance took it over
    drop(pf);
    assert_eq!(
        std::fs::read_to_string(&p).unwrap(),
        "4343\n",
        "not ours: kept"
    );
}

#[test]
fn claims_refuse_live_pagewise_and_non_pidfiles() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.pid");
    // Not a PID: never overwritten.
    std::fs::write(&p, "important data").unwrap();
    let e = Pidfile::claim(&p).unwrap_err().to_string();
    assert!(e.contains("holds no PID") && e.contains("x.pid"), "{e}");
    // A directory.
    let e = Pidfile::claim(dir.path()).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    // This process's own PID is stale, not a rival (tests/e2e/units.rs starts a real rival).
    std::fs::write(&p, format!("{}\n", std::process::id())).unwrap();
    assert!(
        Pidfile::claim(&p).is_ok(),
        "our own PID is stale, not a rival"
    );
    // A process that is not pagewise (sleep): stale.
    let mut sleep = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    std::fs::write(&p, format!("{}\n", sleep.id())).unwrap();
    let r = Pidfile::claim(&p);
    let _ = sleep.kill();
    let _ = sleep.wait();
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn reports_parse() {
    assert_eq!(
        parse_report(b"ready 0\n", 9),
        Some(ChildSaid::Ready { pid: 9, code: 0 })
    );
    assert_eq!(
        parse_report(b"failed 2 /x: stat failed\n", 9),
        Some(ChildSaid::Failed {
            code: 2,
            message: "/x: stat failed".into()
        })
    );
    assert_eq!(parse_report(b"failed 0 no", 9), None);
    assert_eq!(parse_report(b"", 9), None);
    assert_eq!(parse_report(b"ready x", 9), None);
}
