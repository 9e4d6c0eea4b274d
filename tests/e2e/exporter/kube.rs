//! End-to-end tests of the exporter on Kubernetes nodes: a kubelet-style cgroup tree (the
//! systemd driver's slices and scopes and the cgroupfs driver's directories) made beneath this
//! process's own memory cgroup, with the kubelet's log directory (`containers/` links and
//! `pods/` directories) beside it, gives per-container and per-pod series whose
//! namespace/pod/container labels are the tree's, at any depth, and whose figure is the
//! kernel's memory.stat; a figure the exporter cannot measure is absent, never 0; and every
//! query of the shipped Grafana dashboard returns series in a real Prometheus scraping the
//! exporter (cgroup rates on).
//!
//! Servers listen on 127.0.0.1 only and are ended by PID on drop; cgroups are made only
//! beneath this process's own memory cgroup and removed on drop.

use crate::common::*;
use crate::exporter_util::*;
use std::fs;
use std::path::{Path, PathBuf};

const UID_A: &str = "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f";
const ID_A: &str = "3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f";
const UID_B: &str = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";
const ID_B: &str = "aabbccddeeff00112233445566778899aabbccddeeff00112233445566778899";

/// A container of the tree: its group and its names.
struct Pod {
    group: ChildCgroup,
    namespace: &'static str,
    pod: &'static str,
    container: &'static str,
    id: &'static str,
}

/// A kubelet-style tree beneath a new group of ours, and the kubelet's log directory in `dir`:
/// container A under the systemd driver's layout (depth 4 below the tree's root), container
/// B under the cgroupfs driver's (depth 4); each has read a cold file of its own. The groups
/// are returned children first (dropped, and so removed, in that order).
fn kube_tree(dir: &Path) -> Option<(Vec<ChildCgroup>, Vec<Pod>, PathBuf)> {
    let root = ChildCgroup::new()?;
    let logs = dir.join("log");
    fs::create_dir_all(logs.join("containers")).unwrap();
    let systemd_pod = format!("kubepods-burstable-pod{}.slice", UID_A.replace('-', "_"));
    let a = ChildCgroup::under(&root.dir, "kubepods.slice");
    let a1 = ChildCgroup::under(&a.dir, "kubepods-burstable.slice");
    let a2 = ChildCgroup::under(&a1.dir, &systemd_pod);
    let ca = ChildCgroup::under(&a2.dir, &format!("cri-containerd-{ID_A}.scope"));
    let b = ChildCgroup::under(&root.dir, "kubepods");
    let b1 = ChildCgroup::under(&b.dir, "besteffort");
    let b2 = ChildCgroup::under(&b1.dir, &format!("pod{UID_B}"));
    let cb = ChildCgroup::under(&b2.dir, ID_B);
    let pods = [
        (ca, "shop", "web-0", "nginx", ID_A, UID_A),
        (cb, "batch", "job-7x2k9", "worker", ID_B, UID_B),
    ];
    let mut out = Vec::new();
    for (group, namespace, pod, container, id, uid) in pods {
        let link = logs.join(format!("containers/{pod}_{namespace}_{container}-{id}.log"));
        let target = logs.join(format!("pods/{namespace}_{pod}_{uid}/{container}/0.log"));
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, link).unwrap();
        let f = dir.join(format!("data-{container}"));
        cold_file(&f, 3 << 20);
        group.read_in(&f);
        out.push(Pod {
            group,
            namespace,
            pod,
            container,
            id,
        });
    }
    Some((vec![a2, a1, a, b2, b1, b, root], out, logs))
}

#[test]
fn kubelet_trees_of_both_drivers_get_pod_and_container_names_and_the_kernels_figure() {
    let t = tmp();
    let Some((groups, pods, logs)) = kube_tree(t.path()) else {
        return;
    };
    let root = groups.last().unwrap();
    // The default depth (2) stops above the pods: containers and pods are listed anyway.
    let out = run(bin()
        .args(["exporter", "--once", "--cgroup"])
        .arg(&root.dir)
        .arg("--kubelet-logs")
        .arg(&logs));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let whole = samples(&text, "pagewise_cgroup_file_bytes");
    for p in &pods {
        let want = format!(
            "namespace=\"{}\",pod=\"{}\",container=\"{}\",",
            p.namespace, p.pod, p.container
        );
        let mine: Vec<_> = whole.iter().filter(|(l, _)| l.contains(&want)).collect();
        assert_eq!(mine.len(), 1, "{want} in\n{text}");
        let (labels, v) = mine[0];
        assert!(
            labels.starts_with(&format!("id=\"{}\"", p.group.shown())),
            "{labels}"
        );
        assert!(
            labels.contains(&format!("container_id=\"{}\"", p.id)),
            "{labels}"
        );
        // The figure is memory.stat's (v2 file, v1 total_cache), read just after.
        let kernel = p.group.file_bytes() as f64;
        assert!(
            (v - kernel).abs() <= kernel * 0.05,
            "{labels}: {v} vs {kernel}"
        );
        assert!(*v >= (3 << 20) as f64 * 0.95, "{labels}: {v}");
        // The pod's own group: namespace and pod, no container.
        let pod_series = format!("namespace=\"{}\",pod=\"{}\",pod_uid=", p.namespace, p.pod);
        assert_eq!(
            whole
                .iter()
                .filter(|(l, _)| l.contains(&pod_series))
                .count(),
            1,
            "{pod_series} in\n{text}"
        );
    }
    // No label that changes with the tree's shape.
    assert!(whole
        .iter()
        .all(|(l, _)| !l.contains("depth=") && !l.contains("leaf=")));
    // Without the kubelet's logs: the same series, named by ID and UID only.
    let out = run(bin()
        .args(["exporter", "--once", "--cgroup"])
        .arg(&root.dir)
        .arg("--kubelet-logs")
        .arg(t.path().join("nowhere")));
    let text = stdout(&out);
    assert_eq!(
        samples(&text, "pagewise_cgroup_file_bytes").len(),
        whole.len()
    );
    assert!(!text.contains("namespace="), "{text}");
    drop(pods);
    drop(groups);
}

#[test]
fn a_residency_the_exporter_cannot_measure_is_no_sample_an_exit_2_and_one_line_saying_why() {
    if !require_root("setpriv to nobody") {
        return;
    }
    let t = tmp();
    let d = t.path().join("tree");
    fs::create_dir(&d).unwrap();
    for i in 0..5 {
        write_file(&d.join(format!("f{i}")), 64 << 10);
    }
    // Readable by all, owned by root: nobody may open them, not ask the kernel of their pages.
    for p in [t.path(), &d] {
        fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let out = run(as_nobody()
        .args(["exporter", "--once", "--no-cgroups", "--path"])
        .arg(&d));
    let text = stdout(&out);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}\n{text}");
    assert!(!text.contains("pagewise_path_cached_bytes{"), "{text}");
    let unknown = samples(&text, "pagewise_path_unknown_files");
    assert_eq!(unknown.len(), 1, "{text}");
    assert_eq!(unknown[0].1, 5.0, "{text}");
    assert!(
        err.contains("residency unknown") && err.contains("CAP_DAC_OVERRIDE"),
        "{err}"
    );
}

/// The shipped dashboard's queries, with its variables set to match everything.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/pagewise-dashboard.json");
    let doc: serde_json::Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    doc["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap().to_string();
            p["targets"].as_array().unwrap().iter().map(move |t| {
                let q = t["expr"].as_str().unwrap();
                (
                    title.clone(),
                    q.replace("$node", ".*").replace("$namespace", ".*"),
                )
            })
        })
        .collect()
}

#[test]
fn every_dashboard_query_returns_series_in_a_real_prometheus() {
    if !require(
        on_path("prometheus"),
        "prometheus (Debian's package) is needed",
    ) || !can_trace()
    {
        return;
    }
    let t = tmp();
    let Some((groups, pods, logs)) = kube_tree(t.path()) else {
        return;
    };
    let watched = t.path().join("watched");
    fs::create_dir(&watched).unwrap();
    write_file(&watched.join("f"), 1 << 20);
    let xp = free_port();
    // The whole machine's tree (the node panel reads the root, id="/"); our kubelet tree is
    // beneath our own group, listed at its depth.
    let mut cmd = bin();
    cmd.args([
        "exporter",
        "--listen",
        &format!("127.0.0.1:{xp}"),
        "--interval",
        "1s",
    ])
    .arg("--cgroup-rates")
    .arg("--kubelet-logs")
    .arg(&logs)
    .arg("--path")
    .arg(&watched)
    .stderr(log(t.path(), "exporter.log"));
    let mut exporter = Server(cmd.spawn().unwrap());
    wait_for(30, "the exporter answers with rates", || {
        let (_, body) = get(xp, "/metrics", "text/plain")?;
        body.contains("pagewise_cgroup_rates_lost_events_total")
            .then_some(())
    });
    // Traffic while the exporter counts: each container reads a cold file (added) and then
    // evicts it (evicted while its process ran). The readers stay until it was counted.
    let mut readers = Vec::new();
    for p in &pods {
        let f = t.path().join(format!("traffic-{}", p.container));
        cold_file(&f, 2 << 20);
        readers.push(p.group.reader(&f));
        wait_for(10, "the reader read", || (cached(&f) > 0).then_some(()));
        let evict = format!(
            "echo $$ > '{}/cgroup.procs' && exec '{}' evict '{}'",
            p.group.dir.display(),
            env!("CARGO_BIN_EXE_pagewise"),
            f.display()
        );
        let out = run(std::process::Command::new("sh").args(["-c", &evict]));
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let pp = free_port();
    let conf = t.path().join("prometheus.yml");
    fs::write(
        &conf,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: pagewise\n    static_configs:\n      \
             - targets: ['127.0.0.1:{xp}']\n"
        ),
    )
    .unwrap();
    let _prom = prometheus(&conf, pp, t.path());
    for (title, q) in dashboard_queries() {
        let r = wait_for(90, &format!("{title}: {q}"), || {
            query(pp, &q).filter(|r| !r.is_empty())
        });
        assert!(!r.is_empty(), "{title}: {q}");
    }
    // The pod panel names the tree's pods.
    let q = "sum by (namespace, pod) (pagewise_cgroup_file_bytes{pod!=\"\",container=\"\"})";
    let r = wait_for(30, q, || query(pp, q));
    for p in &pods {
        assert!(
            r.iter()
                .any(|s| s["metric"]["pod"] == p.pod && s["metric"]["namespace"] == p.namespace),
            "{} in {r:?}",
            p.pod
        );
    }
    assert!(alive(&mut exporter));
    for mut r in readers {
        drop(r.stdin.take());
        r.wait().unwrap();
    }
    drop(pods);
    drop(groups);
}
