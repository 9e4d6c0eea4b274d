//! deploy/: the Helm chart lints (`helm lint --strict`) and renders (`helm template`, with the
//! default values and with every option on) manifests that the Kubernetes API's own Go types
//! accept strictly (deploy/check: k8s.io/api and the Prometheus Operator's types; an unknown
//! field or a wrong type fails), that run the exporter as the image expects (the host at
//! /host, the kubelet's logs, one capability), and whose PrometheusRule carries contrib's
//! rules. helm is built from the Go module proxy (helm.sh/helm/v3, pinned) and the checker from
//! deploy/check, once per test run, into this test binary's temporary directory.

use crate::common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const HELM: &str = "helm.sh/helm/v3/cmd/helm@v3.22.0";
const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// (helm, the manifest checker), built once.
fn tools() -> &'static (PathBuf, PathBuf) {
    static TOOLS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    TOOLS.get_or_init(|| {
        assert!(
            require(on_path("go"), "go >= 1.24 (./install-deps installs it)"),
            "go"
        );
        let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-tools");
        fs::create_dir_all(&bin).unwrap();
        let out = run(Command::new("go")
            .args(["install", HELM])
            .env("GOBIN", &bin)
            .env("GOFLAGS", "-mod=mod"));
        assert!(out.status.success(), "go install {HELM}: {}", stderr(&out));
        let check = bin.join("check");
        let out = run(Command::new("go")
            .args(["build", "-o"])
            .arg(&check)
            .arg(".")
            .current_dir(Path::new(REPO).join("deploy/check")));
        assert!(
            out.status.success(),
            "go build deploy/check: {}",
            stderr(&out)
        );
        (bin.join("helm"), check)
    })
}

fn chart() -> PathBuf {
    Path::new(REPO).join("deploy/helm/pagewise")
}

/// `helm template` of the chart with `sets`; its output.
fn template(sets: &[&str]) -> String {
    let (helm, _) = tools();
    let mut c = Command::new(helm);
    c.args(["template", "pw"])
        .arg(chart())
        .args(["--namespace", "monitoring"]);
    for s in sets {
        c.args(["--set", s]);
    }
    let out = run(&mut c);
    assert!(
        out.status.success(),
        "helm template {sets:?}: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// The checker's verdict on `manifests`: (success, what it printed).
fn check(manifests: &str) -> (bool, String) {
    let (_, checker) = tools();
    let mut child = Command::new(checker)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifests.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", stdout(&out), stderr(&out));
    (out.status.success(), text)
}

#[test]
fn the_chart_lints_and_renders_manifests_the_kubernetes_types_accept() {
    let (helm, _) = tools();
    let out = run(Command::new(helm).args(["lint", "--strict"]).arg(chart()));
    assert!(
        out.status.success(),
        "helm lint: {}{}",
        stdout(&out),
        stderr(&out)
    );

    let plain = template(&[]);
    let (ok, said) = check(&plain);
    assert!(ok && said.contains("2 documents valid"), "{said}\n{plain}");
    for want in [
        "kind: DaemonSet",
        "--rootfs=/host",
        "--kubelet-logs=/var/log",
        "--listen=$(POD_IP):9847",
        "add: [DAC_OVERRIDE]",
        "readOnlyRootFilesystem: true",
        "hostPID: true",
    ] {
        assert!(plain.contains(want), "{want} in\n{plain}");
    }
    assert!(!plain.contains("--cgroup-rates"), "{plain}");

    let all = template(&[
        "serviceMonitor.enabled=true",
        "prometheusRule.enabled=true",
        "cgroupRates.enabled=true",
        "webConfig.secretName=pagewise-web",
        "paths={/var/lib/postgresql,/srv/models}",
        "top=5",
    ]);
    let (ok, said) = check(&all);
    assert!(ok && said.contains("4 documents valid"), "{said}\n{all}");
    for want in [
        "kind: ServiceMonitor",
        "kind: PrometheusRule",
        "--cgroup-rates",
        "add: [DAC_OVERRIDE, PERFMON]",
        "--path=/srv/models",
        "--web-config=/etc/pagewise/web/web.yml",
        "secretName: pagewise-web",
        // The rules travel whole: an alert of contrib's file.
        "alert: PagewiseCgroupThrashing",
    ] {
        assert!(all.contains(want), "{want} in\n{all}");
    }

    // The checker is not a rubber stamp: a field the API does not have, a wrong type.
    let bad = plain.replacen("hostPID: true", "hostPID: true\n      hostPIDs: true", 1);
    let (ok, said) = check(&bad);
    assert!(!ok && said.contains("hostPIDs"), "{said}");
    let bad = plain.replacen("containerPort: 9847", "containerPort: \"ninety\"", 1);
    let (ok, said) = check(&bad);
    assert!(!ok && said.contains("DaemonSet"), "{said}");
}

#[test]
fn the_charts_rules_are_contribs_and_every_dashboard_panel_queries_pagewise() {
    let contrib = fs::read(Path::new(REPO).join("contrib/prometheus/pagewise.rules.yml")).unwrap();
    let chart = fs::read(chart().join("files/pagewise.rules.yml")).unwrap();
    assert!(
        contrib == chart,
        "deploy/helm/pagewise/files/pagewise.rules.yml differs from contrib's: copy it over"
    );
    let dash =
        fs::read_to_string(Path::new(REPO).join("deploy/grafana/pagewise-dashboard.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&dash).unwrap();
    let panels = doc["panels"].as_array().unwrap();
    assert!(panels.len() >= 8, "{} panels", panels.len());
    for p in panels {
        let expr = p["targets"][0]["expr"].as_str().unwrap_or_default();
        assert!(expr.contains("pagewise_"), "{}: {expr}", p["title"]);
    }
}
