//! Names for cgroups: which container runtime, container, Kubernetes pod or systemd unit a
//! cgroup path belongs to, read from the path alone (what cAdvisor and systemd-cgls show),
//! so `top`, `cgroups` and the exporter can say `docker 3f4e5a6b7c8d` instead of a 100-byte
//! path.
//!
//! The path forms recognised, for both cgroup drivers (systemd and cgroupfs):
//!
//! | runtime     | systemd driver                                | cgroupfs driver              |
//! |-------------|-----------------------------------------------|------------------------------|
//! | docker      | `.../docker-<id>.scope`                       | `/docker/<id>`               |
//! | containerd  | `.../cri-containerd-<id>.scope`               | `/kubepods/.../pod<uid>/<id>`|
//! | cri-o       | `.../crio-<id>.scope` (`crio-conmon-` too)    |                              |
//! | podman      | `.../libpod-<id>.scope` (`libpod-conmon-` too)| `/libpod_parent/libpod-<id>` |
//! | lxc         | `/lxc.payload.<name>`, `/lxc/<name>`          |                              |
//! | nspawn      | `/machine.slice/systemd-nspawn@<name>.service`, `machine-<name>.scope` |     |
//!
//! A Kubernetes pod is `kubepods[-<qos>]-pod<uid>.slice` (systemd; the UID's `-` written `_`)
//! or `pod<uid>` (cgroupfs). Any other last component ending in `.service` or `.scope` is a
//! systemd unit. Nothing here reads a file: a path that matches no form is just a path.

use serde::Serialize;

/// What a cgroup path says about who runs in it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Owner {
    /// Container runtime: `docker`, `containerd`, `cri-o`, `podman`, `lxc`, `nspawn`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<&'static str>,
    /// Container ID (hex, as the runtime prints it in full) or name (lxc, nspawn).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Kubernetes pod UID (with `-`), when the path is under a pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The systemd unit (`nginx.service`, `session-3.scope`) of the last unit component,
    /// when the group is not a container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

impl Owner {
    /// True when the path matched nothing.
    pub fn is_empty(&self) -> bool {
        *self == Owner::default()
    }

    /// One short name for tables: `docker 3f4e5a6b7c8d`, `pod 0c1d…/containerd 3f4e5a6b7c8d`,
    /// `pod 0c1d2e3f-...`, `nginx.service`; `None` when the path matched nothing.
    pub fn short(&self) -> Option<String> {
        let container = match (self.runtime, &self.container) {
            (Some(r), Some(c)) => Some(format!("{r} {}", short_id(c))),
            _ => None,
        };
        match (&self.pod_uid, container) {
            (Some(p), Some(c)) => Some(format!("pod {}/{c}", &p[..p.len().min(8)])),
            (Some(p), None) => Some(format!("pod {p}")),
            (None, Some(c)) => Some(c),
            (None, None) => self.unit.clone(),
        }
    }
}

/// A 64-hex container ID shortened to 12 as `docker ps` does; names are kept whole.
fn short_id(id: &str) -> &str {
    if id.len() == 64 && is_hex(id) {
        &id[..12]
    } else {
        id
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A container ID as runtimes make them: 64 hex digits (some test setups use fewer; at least
/// 12 are required so that `pod<uid>/<word>` does not read a name as an ID).
fn container_id(s: &str) -> Option<&str> {
    (s.len() >= 12 && s.len() <= 128 && is_hex(s)).then_some(s)
}

/// `prefix<id>.scope` -> id.
fn scoped<'a>(comp: &'a str, prefix: &str) -> Option<&'a str> {
    comp.strip_prefix(prefix)?
        .strip_suffix(".scope")
        .and_then(container_id)
}

/// Pod UID in a component: `kubepods-burstable-pod<uid_with_underscores>.slice` or
/// `pod<uid>`.
fn pod_uid(comp: &str) -> Option<String> {
    let raw = match comp.strip_suffix(".slice") {
        Some(slice) if slice.starts_with("kubepods") => &slice[slice.rfind("-pod")? + 4..],
        Some(_) => return None,
        None => comp.strip_prefix("pod")?,
    };
    let uid = raw.replace('_', "-");
    let ok = uid.len() >= 8
        && uid.len() <= 64
        && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    ok.then_some(uid)
}

/// The runtime and container of one path component (systemd driver forms, and the cgroupfs
/// forms that carry their own prefix).
fn container_of(comp: &str) -> Option<(&'static str, String)> {
    const SCOPES: [(&str, &str); 7] = [
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-conmon-", "cri-o"),
        ("crio-", "cri-o"),
        ("libpod-conmon-", "podman"),
        ("libpod-", "podman"),
        ("nerdctl-", "containerd"),
    ];
    for (prefix, runtime) in SCOPES {
        if let Some(id) = scoped(comp, prefix) {
            return Some((runtime, id.to_string()));
        }
    }
    if let Some(id) = comp.strip_prefix("libpod-").and_then(container_id) {
        return Some(("podman", id.to_string()));
    }
    if let Some(name) = comp.strip_prefix("lxc.payload.").filter(|n| !n.is_empty()) {
        return Some(("lxc", name.to_string()));
    }
    if let Some(name) = comp
        .strip_prefix("systemd-nspawn@")
        .and_then(|r| r.strip_suffix(".service"))
        .filter(|n| !n.is_empty())
    {
        return Some(("nspawn", name.to_string()));
    }
    None
}

/// What the cgroup path `path` (`/system.slice/docker-<id>.scope`, as [`super::cgroup_name`]
/// gives it) says about its owner. The deepest container wins; a pod is kept beside it.
pub fn owner(path: &str) -> Owner {
    let mut out = Owner::default();
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    for (i, comp) in comps.iter().enumerate() {
        let parent = i.checked_sub(1).map(|p| comps[p]);
        if let Some(uid) = pod_uid(comp) {
            out.pod_uid = Some(uid);
            continue;
        }
        if let Some((runtime, id)) = container_of(comp) {
            out.runtime = Some(runtime);
            out.container = Some(id);
            continue;
        }
        // cgroupfs driver: the container is a bare ID under its runtime's or pod's directory.
        let bare = match parent {
            Some("docker") => Some("docker"),
            Some("lxc") => Some("lxc"),
            Some(p) if pod_uid(p).is_some() => Some("containerd"),
            _ => None,
        };
        match bare {
            Some("lxc") => {
                out.runtime = Some("lxc");
                out.container = Some(comp.to_string());
            }
            Some(r) if container_id(comp).is_some() => {
                out.runtime = Some(r);
                out.container = Some(comp.to_string());
            }
            _ => {}
        }
    }
    if out.runtime.is_none() && out.pod_uid.is_none() {
        out.unit = comps
            .iter()
            .rev()
            .find(|c| c.ends_with(".service") || c.ends_with(".scope"))
            .map(|c| c.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081";

    #[test]
    fn docker_both_drivers() {
        for p in [
            format!("/system.slice/docker-{ID}.scope"),
            format!("/docker/{ID}"),
        ] {
            let o = owner(&p);
            assert_eq!(o.runtime, Some("docker"), "{p}");
            assert_eq!(o.container.as_deref(), Some(ID));
            assert_eq!(o.short().unwrap(), "docker 3f4e5a6b7c8d");
        }
    }

    #[test]
    fn kubernetes_pods() {
        let p = format!(
            "/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod0c1d2e3f_aaaa_bbbb_cccc_0123456789ab.slice/cri-containerd-{ID}.scope"
        );
        let o = owner(&p);
        assert_eq!(
            o.pod_uid.as_deref(),
            Some("0c1d2e3f-aaaa-bbbb-cccc-0123456789ab")
        );
        assert_eq!(o.runtime, Some("containerd"));
        assert_eq!(o.short().unwrap(), "pod 0c1d2e3f/containerd 3f4e5a6b7c8d");
        let o = owner(&format!(
            "/kubepods/besteffort/pod0c1d2e3f-aaaa-bbbb-cccc-0123456789ab/{ID}"
        ));
        assert_eq!(o.runtime, Some("containerd"));
        assert_eq!(o.container.as_deref(), Some(ID));
        let o = owner("/kubepods.slice/kubepods-pod0c1d2e3f_aaaa_bbbb_cccc_0123456789ab.slice");
        assert_eq!(
            o.short().unwrap(),
            "pod 0c1d2e3f-aaaa-bbbb-cccc-0123456789ab"
        );
        let o = owner(&format!("/kubepods.slice/x/crio-conmon-{ID}.scope"));
        assert_eq!(o.runtime, Some("cri-o"));
    }

    #[test]
    fn podman_lxc_nspawn_units() {
        assert_eq!(
            owner(&format!("/machine.slice/libpod-{ID}.scope")).runtime,
            Some("podman")
        );
        assert_eq!(
            owner(&format!("/libpod_parent/libpod-{ID}")).runtime,
            Some("podman")
        );
        assert_eq!(owner("/lxc.payload.web1").short().unwrap(), "lxc web1");
        assert_eq!(owner("/lxc/web1").short().unwrap(), "lxc web1");
        let o = owner("/machine.slice/systemd-nspawn@deb.service");
        assert_eq!(o.short().unwrap(), "nspawn deb");
        let o = owner("/system.slice/nginx.service");
        assert_eq!(o.unit.as_deref(), Some("nginx.service"));
        assert_eq!(o.short().unwrap(), "nginx.service");
        let o = owner("/user.slice/user-1000.slice/session-3.scope");
        assert_eq!(o.short().unwrap(), "session-3.scope");
    }

    #[test]
    fn plain_paths_and_junk() {
        assert!(owner("/").is_empty());
        assert!(owner("/process_api/b9749055c1573bf382195a59d421adfd").is_empty());
        assert!(owner("/docker/notanid").is_empty());
        assert!(owner("/kubepods.slice/kubepods-pod.slice").is_empty());
        assert!(owner("/system.slice/docker-.scope").unit.is_some());
        for junk in [
            "",
            "//",
            "/pod",
            "/docker/",
            "\u{1}/é/pod-/x.scope",
            "/a.slice/-pod_.slice",
        ] {
            let _ = owner(junk).short();
        }
    }

    #[test]
    fn fuzz_any_path() {
        use proptest::prelude::*;
        let comp = prop_oneof![
            "[a-z_.@-]{0,12}",
            "(docker-|cri-containerd-|crio-|libpod-|kubepods-pod|pod)[0-9a-f_-]{0,70}(\\.scope|\\.slice)?",
            "\\PC{0,8}",
        ];
        let path = proptest::collection::vec(comp, 0..6).prop_map(|v| v.join("/"));
        crate::fuzzing::fuzz("cgroup owner", 2048, path, |p| {
            let o = owner(&p);
            if let Some(s) = o.short() {
                assert!(!s.is_empty());
            }
        });
    }
}
