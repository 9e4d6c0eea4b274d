//! Kubernetes names of this node's containers and pods — namespace, pod, container — the names
//! cAdvisor's labels carry, so that series join with kube-state-metrics and cAdvisor without
//! `label_replace`.
//!
//! The kubelet writes them where any node agent can read them: for every container (running,
//! or exited and not yet collected) a symlink
//! `/var/log/containers/<pod>_<namespace>_<container>-<container ID>.log`, and for every pod a
//! directory `/var/log/pods/<namespace>_<pod>_<pod UID>/`. Only the names are read (the links
//! are not followed). Pod, namespace and container names are DNS labels or subdomains, which
//! never hold `_`, so the split is unambiguous; anything else in those directories is skipped.
//! The directories are outside input: at most [`MAX_ENTRIES`] names of each are taken, each at
//! most 255 bytes.

use super::container::Owner;
use std::collections::HashMap;
use std::path::Path;

/// The most entries read from each directory (a node runs at most a few hundred pods).
pub const MAX_ENTRIES: usize = 65_536;

/// A pod's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodName {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub pod: String,
}

/// A container's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerName {
    /// Its pod's namespace.
    pub namespace: String,
    /// Its pod's name.
    pub pod: String,
    /// Its name in the pod's spec.
    pub container: String,
}

/// The names found under a kubelet log root (`/var/log`): by container ID and by pod UID.
#[derive(Debug, Clone, Default)]
pub struct KubeNames {
    containers: HashMap<String, ContainerName>,
    pods: HashMap<String, PodName>,
    /// Entries left unread past [`MAX_ENTRIES`] (said once by the caller).
    pub truncated: bool,
}

/// What a cgroup's labels say in Kubernetes' words, where known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeLabels<'a> {
    /// The pod's namespace.
    pub namespace: Option<&'a str>,
    /// The pod's name.
    pub pod: Option<&'a str>,
    /// The container's name (None for the pod's own cgroup).
    pub container: Option<&'a str>,
}

impl KubeNames {
    /// Reads `root/containers` and `root/pods`; a missing directory is no names (a node
    /// without Kubernetes), not an error.
    pub fn read(root: &Path) -> KubeNames {
        let mut k = KubeNames::default();
        for name in names(&root.join("containers"), &mut k.truncated) {
            if let Some((id, c)) = parse_container_log(&name) {
                k.containers.insert(id.to_string(), c);
            }
        }
        for name in names(&root.join("pods"), &mut k.truncated) {
            if let Some((uid, p)) = parse_pod_dir(&name) {
                k.pods.insert(uid.to_string(), p);
            }
        }
        k
    }

    /// True when nothing was found.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.pods.is_empty()
    }

    /// The names of a cgroup's owner: the container's (by its ID), else the pod's (by its UID).
    pub fn labels(&self, owner: &Owner) -> KubeLabels<'_> {
        if let Some(c) = owner
            .container
            .as_deref()
            .and_then(|id| self.containers.get(id))
        {
            return KubeLabels {
                namespace: Some(&c.namespace),
                pod: Some(&c.pod),
                container: Some(&c.container),
            };
        }
        match owner.pod_uid.as_deref().and_then(|u| self.pods.get(u)) {
            Some(p) => KubeLabels {
                namespace: Some(&p.namespace),
                pod: Some(&p.pod),
                container: None,
            },
            None => KubeLabels::default(),
        }
    }
}

/// The names in `dir` (UTF-8, at most 255 bytes), at most [`MAX_ENTRIES`] of them.
fn names(dir: &Path, truncated: &mut bool) -> Vec<String> {
    let entries = std::fs::read_dir(dir).into_iter().flatten();
    let mut out = Vec::new();
    for (i, e) in entries.enumerate() {
        if i >= MAX_ENTRIES {
            *truncated = true;
            break;
        }
        let Ok(e) = e else { continue };
        if let Ok(n) = e.file_name().into_string() {
            if n.len() <= 255 {
                out.push(n);
            }
        }
    }
    out
}

/// A DNS-1123 label or subdomain (what pod, namespace and container names are): lowercase
/// alphanumerics, `-` and `.`, starting and ending alphanumeric, at most 253 bytes.
fn dns_name(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 253
        && s.bytes().all(|b| alnum(b) || b == b'-' || b == b'.')
        && alnum(s.as_bytes()[0])
        && alnum(s.as_bytes()[s.len() - 1])
}

/// `<pod>_<namespace>_<container>-<64 hex>.log` -> (ID, names).
pub fn parse_container_log(name: &str) -> Option<(&str, ContainerName)> {
    let stem = name.strip_suffix(".log")?;
    let (rest, id) = stem.rsplit_once('-')?;
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut parts = rest.split('_');
    let (pod, namespace, container) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || ![pod, namespace, container].iter().all(|s| dns_name(s)) {
        return None;
    }
    Some((
        id,
        ContainerName {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
        },
    ))
}

/// `<namespace>_<pod>_<UID>` (UID: 36 characters, hex and `-`) -> (UID, names).
pub fn parse_pod_dir(name: &str) -> Option<(&str, PodName)> {
    let mut parts = name.split('_');
    let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let uid_ok = uid.len() == 36 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    if parts.next().is_some() || !uid_ok || !dns_name(namespace) || !dns_name(pod) {
        return None;
    }
    Some((
        uid,
        PodName {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ID: &str = "3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f";
    const UID: &str = "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f";

    #[test]
    fn kubelet_names_parse() {
        let name = format!("web-7d9f8-abcde_shop_nginx-{ID}.log");
        let (id, c) = parse_container_log(&name).unwrap();
        assert_eq!(id, ID);
        assert_eq!(
            (c.pod.as_str(), c.namespace.as_str(), c.container.as_str()),
            ("web-7d9f8-abcde", "shop", "nginx")
        );
        let pod_dir = format!("kube-system_coredns-5d78c9869d-x2x9k_{UID}");
        let (uid, p) = parse_pod_dir(&pod_dir).unwrap();
        assert_eq!(
            (uid, p.namespace.as_str(), p.pod.as_str()),
            (UID, "kube-system", "coredns-5d78c9869d-x2x9k")
        );
        for bad in [
            format!("a_b_c-{}.log", &ID[..63]),
            format!("a_b-{ID}.log"),
            format!("a_b_c_d-{ID}.log"),
            format!("A_b_c-{ID}.log"),
            format!("a__c-{ID}.log"),
            format!("a_b_c-{ID}"),
        ] {
            assert!(parse_container_log(&bad).is_none(), "{bad}");
        }
        assert!(parse_pod_dir("ns_pod_notauid").is_none());
        assert!(parse_pod_dir(&format!("ns_pod_{UID}_x")).is_none());
    }

    #[test]
    fn labels_come_from_the_container_else_the_pod() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("containers")).unwrap();
        std::fs::create_dir_all(dir.path().join(format!("pods/shop_web_{UID}"))).unwrap();
        std::fs::write(
            dir.path()
                .join(format!("containers/web_shop_nginx-{ID}.log")),
            "",
        )
        .unwrap();
        std::fs::write(dir.path().join("containers/junk"), "").unwrap();
        let k = KubeNames::read(dir.path());
        let mut o = Owner {
            container: Some(ID.into()),
            pod_uid: Some(UID.into()),
            ..Default::default()
        };
        let l = k.labels(&o);
        assert_eq!(
            (l.namespace, l.pod, l.container),
            (Some("shop"), Some("web"), Some("nginx"))
        );
        o.container = None;
        let l = k.labels(&o);
        assert_eq!(
            (l.namespace, l.pod, l.container),
            (Some("shop"), Some("web"), None)
        );
        assert_eq!(
            KubeNames::read(&dir.path().join("missing")).labels(&o),
            KubeLabels::default()
        );
    }

    proptest! {
        /// Any name: no panic, and what parses rebuilds the name it came from.
        #[test]
        fn any_name_parses_or_not_without_panic(s in "\\PC{0,300}") {
            if let Some((id, c)) = parse_container_log(&s) {
                prop_assert_eq!(format!("{}_{}_{}-{}.log", c.pod, c.namespace, c.container, id), s.clone());
            }
            if let Some((uid, p)) = parse_pod_dir(&s) {
                prop_assert_eq!(format!("{}_{}_{}", p.namespace, p.pod, uid), s);
            }
        }
    }
}
