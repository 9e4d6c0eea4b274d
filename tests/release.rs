//! The release artifacts (`./release`), built once for this test binary and checked as a user
//! would use them: the CLI runs and needs nothing above glibc 2.17; the .deb installs, runs,
//! has its man page found and removes without a trace in a Debian chroot made by debootstrap;
//! the manylinux wheel installs into a fresh virtualenv and measures what the kernel shows; the
//! C tarball links dynamically and with `cc -static`; `make install` (contrib/install-extras,
//! which ./install-deps runs too) puts the man pages where `man -w pagewise` finds them.
//!
//! The build uses the `dist-check` profile (unoptimized, no debug info: the same code, link and
//! glibc floor as the release profile in a third of the time). PAGEWISE_SKIP_RELEASE=1 skips all of it, saying so
//! (it needs PyPI the first time, for ziglang, cargo-zigbuild and maturin, and Debian's mirror
//! for debootstrap; both are cached under /var/lib/pagewise-release).

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn skipped() -> bool {
    if std::env::var_os("PAGEWISE_SKIP_RELEASE").is_some_and(|v| v == "1") {
        eprintln!("skipped: PAGEWISE_SKIP_RELEASE=1");
        return true;
    }
    !common::require_root("the release checks (a chroot, dpkg, mounts)")
}

/// The artifacts of one `./release` run (PROFILE=dist-check), made by the first test that asks.
fn dist() -> &'static Path {
    static DIST: OnceLock<PathBuf> = OnceLock::new();
    DIST.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("release-dist");
        let o = Command::new("bash")
            .arg(Path::new(REPO).join("release"))
            .env("PROFILE", "dist-check")
            .env("OUT", &out)
            .output()
            .unwrap();
        eprintln!("{}", String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "./release failed: {o:?}");
        out
    })
}

fn sh(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The commit git has checked out, as the artifacts name it (12 hex digits).
fn head12() -> String {
    sh(Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(REPO))[..12]
        .to_owned()
}

/// The highest GLIBC_x.y symbol version an ELF file needs, as (x, y); None for none.
fn glibc_max(elf: &Path) -> Option<(u32, u32)> {
    let dump = sh(Command::new("objdump").arg("-T").arg(elf));
    dump.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut it = v.split('.').map(|n| n.parse::<u32>().ok());
            Some((it.next()??, it.next().flatten().unwrap_or(0)))
        })
        .max()
}

/// The bytes of `p` the kernel has cached (cachestat, or mincore before 6.5), as `stat` counts
/// them: whole pages, the last one up to the file's end.
fn cached_bytes(p: &Path) -> u64 {
    let pages = common::cached(p);
    (pages * pagewise_core::sys::page_size()).min(fs::metadata(p).unwrap().len())
}

/// A file of `size` bytes, read once so the kernel has it cached, with the bytes the kernel
/// says are cached.
fn cached_file(dir: &Path, size: usize) -> (PathBuf, u64) {
    let p = dir.join("data");
    common::write_file(&p, size);
    fs::read(&p).unwrap();
    let c = cached_bytes(&p);
    (p, c)
}

#[test]
fn the_cli_needs_no_glibc_above_2_17_and_reports_what_the_kernel_shows() {
    if skipped() {
        return;
    }
    let exe = dist().join(format!("pagewise-{VERSION}-x86_64-linux"));
    let max = glibc_max(&exe);
    assert!(
        max.is_none_or(|m| m <= (2, 17)),
        "{exe:?} needs GLIBC {max:?}"
    );
    // Nothing but glibc's own libraries is needed, so the .deb's `Depends: libc6` is whole.
    let dynamic = sh(Command::new("objdump").arg("-p").arg(&exe));
    for lib in dynamic
        .lines()
        .filter_map(|l| l.trim().strip_prefix("NEEDED"))
    {
        let lib = lib.trim();
        assert!(
            [
                "libc.so.6",
                "libm.so.6",
                "libpthread.so.0",
                "libdl.so.2",
                "librt.so.1",
                "libutil.so.1"
            ]
            .contains(&lib)
                || lib.starts_with("ld-linux-x86-64.so"),
            "{exe:?} needs {lib}, which libc6 does not provide"
        );
    }
    let v = sh(Command::new(&exe).arg("--version"));
    assert!(
        v.starts_with(&format!("pagewise {VERSION} (commit {}, built ", head12())),
        "{v}"
    );
    let dir = common::tmp();
    let (p, cached) = cached_file(dir.path(), 3 << 20);
    let doc: serde_json::Value =
        serde_json::from_str(&sh(Command::new(&exe).arg("stat").arg("--json").arg(&p))).unwrap();
    assert_eq!(doc["total"]["cached_bytes"].as_u64(), Some(cached), "{doc}");

    // Every artifact is in SHA256SUMS and matches it.
    let sums = fs::read_to_string(dist().join("SHA256SUMS")).unwrap();
    for e in fs::read_dir(dist()).unwrap() {
        let n = e.unwrap().file_name().into_string().unwrap();
        assert!(
            n == "SHA256SUMS" || sums.contains(&format!("  {n}\n")),
            "{n} not in SHA256SUMS"
        );
    }
    sh(Command::new("sha256sum")
        .arg("-c")
        .arg("SHA256SUMS")
        .current_dir(dist()));
}

/// A mount this test made, unmounted when dropped (also when the test fails).
struct Mounted(PathBuf);
impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A Debian (bookworm, minbase + man-db) root made by debootstrap the first time and kept as a
/// tarball under /var/lib/pagewise-release, unpacked into `dir`.
fn debian_root(dir: &Path) -> PathBuf {
    let cache = Path::new("/var/lib/pagewise-release/bookworm-minbase-man.tar");
    if !cache.exists() {
        let build = Path::new("/var/lib/pagewise-release/bookworm.partial");
        let _ = fs::remove_dir_all(build);
        fs::create_dir_all(build).unwrap();
        sh(Command::new("debootstrap").args([
            "--variant=minbase",
            "--include=man-db",
            "bookworm",
            build.to_str().unwrap(),
            "http://deb.debian.org/debian",
        ]));
        let part = cache.with_extension("tar.partial");
        sh(Command::new("tar")
            .arg("-C")
            .arg(build)
            .arg("-cf")
            .arg(&part)
            .arg("."));
        fs::rename(&part, cache).unwrap();
        fs::remove_dir_all(build).unwrap();
    }
    let root = dir.join("root");
    fs::create_dir(&root).unwrap();
    sh(Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-xf")
        .arg(cache));
    root
}

/// Every path under `root` but the ones dpkg and man-db keep as their own bookkeeping.
fn tree(root: &Path) -> Vec<String> {
    let out = sh(Command::new("find").arg(".").arg("-xdev").current_dir(root));
    let mut v: Vec<String> = out
        .lines()
        .filter(|l| {
            !(l.starts_with("./proc")
                || l.starts_with("./var/lib/dpkg")
                || l.starts_with("./var/cache/man")
                || l.starts_with("./var/log"))
        })
        .map(String::from)
        .collect();
    v.sort();
    v
}

#[test]
fn the_deb_installs_runs_and_removes_cleanly_in_a_debian_chroot() {
    if skipped() {
        return;
    }
    let deb = dist().join(format!("pagewise_{VERSION}_amd64.deb"));
    let info = sh(Command::new("dpkg-deb").arg("--info").arg(&deb));
    assert!(info.contains("Depends: libc6 (>= 2.17)"), "{info}");
    let files = sh(Command::new("dpkg-deb").arg("--contents").arg(&deb));
    for want in [
        "./usr/bin/pagewise",
        "./usr/share/man/man1/pagewise.1.gz",
        "./usr/share/man/man1/pagewise-copy.1.gz",
        "./usr/share/bash-completion/completions/pagewise",
        "./usr/share/zsh/vendor-completions/_pagewise",
        "./usr/share/fish/vendor_completions.d/pagewise.fish",
        "./usr/share/doc/pagewise/copyright",
        "./usr/share/doc/pagewise/changelog.gz",
        "./usr/share/doc/pagewise/examples/pagewise-exporter.service",
    ] {
        assert!(
            files.contains(&format!("{want}\n")),
            "{want} not in the .deb:\n{files}"
        );
    }

    let dir = tempfile::tempdir_in("/var/lib/pagewise-release").unwrap();
    let root = debian_root(dir.path());
    fs::copy(&deb, root.join("tmp/pagewise.deb")).unwrap();
    sh(Command::new("mount")
        .args(["-t", "proc", "proc"])
        .arg(root.join("proc")));
    let _proc = Mounted(root.join("proc"));
    let chroot = |args: &[&str]| -> String {
        sh(Command::new("chroot")
            .arg(&root)
            .args(args)
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C"))
    };
    let before = tree(&root);
    chroot(&["dpkg", "-i", "/tmp/pagewise.deb"]);
    assert_eq!(
        chroot(&["man", "-w", "pagewise"]).trim(),
        "/usr/share/man/man1/pagewise.1.gz"
    );
    assert!(chroot(&["pagewise", "--version"]).starts_with(&format!("pagewise {VERSION} (commit ")));
    // A tree the chroot's own files make: every file's line, and a total the kernel agrees with.
    let doc: serde_json::Value = serde_json::from_str(&chroot(&[
        "pagewise",
        "stat",
        "--json",
        "/usr/share/doc/pagewise",
    ]))
    .unwrap();
    assert!(doc["total"]["files"].as_u64().unwrap() >= 3, "{doc}");
    let cached = cached_bytes(&root.join("usr/share/doc/pagewise/copyright"));
    let one: serde_json::Value = serde_json::from_str(&chroot(&[
        "pagewise",
        "stat",
        "--json",
        "/usr/share/doc/pagewise/copyright",
    ]))
    .unwrap();
    assert_eq!(one["total"]["cached_bytes"].as_u64(), Some(cached), "{one}");
    chroot(&["dpkg", "-r", "pagewise"]);
    // dpkg forgets a removed package that had no conffiles: dpkg-query finds nothing.
    let q = Command::new("chroot")
        .arg(&root)
        .args(["dpkg-query", "-W", "pagewise"])
        .output()
        .unwrap();
    assert!(!q.status.success(), "dpkg still knows the package: {q:?}");
    assert_eq!(tree(&root), before, "dpkg -r left files behind");
    drop(_proc);
    let _ = fs::remove_dir_all(dir.path());
}

#[test]
fn the_manylinux_wheel_installs_in_a_fresh_venv_and_measures_the_kernel() {
    if skipped() {
        return;
    }
    let whl: Vec<PathBuf> = fs::read_dir(dist())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    assert_eq!(whl.len(), 1, "{whl:?}");
    let name = whl[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        name.starts_with(&format!("pagewise-{VERSION}-cp39-abi3-manylinux"))
            && name.contains("manylinux_2_17_x86_64"),
        "{name}"
    );
    assert!(
        dist().join(format!("pagewise-{VERSION}.tar.gz")).exists(),
        "no sdist"
    );
    let dir = common::tmp();
    let venv = dir.path().join("venv");
    sh(Command::new("python3").arg("-m").arg("venv").arg(&venv));
    sh(Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "--no-index", "--disable-pip-version-check"])
        .arg(&whl[0]));
    let (p, cached) = cached_file(dir.path(), 5 << 20);
    let out = sh(Command::new(venv.join("bin/python"))
        .arg("-c")
        .arg("import sys, pagewise; r = pagewise.stat(sys.argv[1]); print(r.cached_bytes, pagewise.build_info().commit)")
        .arg(&p)
        .current_dir(dir.path()));
    assert_eq!(out.trim(), format!("{cached} {}", head12()));
}

#[test]
fn the_c_tarball_links_dynamically_and_statically() {
    if skipped() {
        return;
    }
    let dir = common::tmp();
    let tgz = dist().join(format!("libpagewise-{VERSION}-x86_64-linux.tar.gz"));
    sh(Command::new("tar")
        .arg("-C")
        .arg(dir.path())
        .arg("-xzf")
        .arg(&tgz));
    let top = dir
        .path()
        .join(format!("libpagewise-{VERSION}-x86_64-linux"));
    let so = fs::canonicalize(top.join("lib/libpagewise.so")).unwrap();
    let max = glibc_max(&so);
    assert!(
        max.is_none_or(|m| m <= (2, 17)),
        "{so:?} needs GLIBC {max:?}"
    );
    let pc = |args: &[&str]| -> Vec<String> {
        sh(Command::new("pkg-config")
            .args(args)
            .arg("pagewise")
            .env("PKG_CONFIG_PATH", top.join("lib/pkgconfig")))
        .split_whitespace()
        .map(String::from)
        .collect()
    };
    let src = Path::new(REPO).join("crates/pagewise-capi/examples/direct_copy.c");
    let dynamic = dir.path().join("copy-dyn");
    sh(Command::new("cc")
        .arg("-o")
        .arg(&dynamic)
        .arg(&src)
        .args(pc(&["--cflags", "--libs"]))
        .arg(format!("-Wl,-rpath,{}", top.join("lib").display())));
    let stat = dir.path().join("copy-static");
    sh(Command::new("cc")
        .arg("-static")
        .arg("-o")
        .arg(&stat)
        .arg(&src)
        .args(pc(&["--cflags", "--static", "--libs"])));
    let file = sh(Command::new("file").arg(&stat));
    assert!(file.contains("statically linked"), "{file}");
    let (p, _) = cached_file(dir.path(), (4 << 20) + 123);
    for exe in [&dynamic, &stat] {
        let dst = dir.path().join("copy");
        let _ = fs::remove_file(&dst);
        let said = sh(Command::new(exe).arg(&p).arg(&dst));
        assert!(said.contains("written direct"), "{said}");
        // direct_copy writes through O_DIRECT: the copy is not in the page cache (checked
        // before this test reads it back).
        assert_eq!(common::cached(&dst), 0, "{exe:?} left the copy cached");
        assert_eq!(fs::read(&dst).unwrap(), fs::read(&p).unwrap());
    }
}

#[test]
fn make_install_puts_the_binary_man_pages_and_completions_where_man_and_shells_look() {
    if skipped() {
        return;
    }
    let dir = common::tmp();
    let dest = dir.path().join("dest");
    sh(Command::new("make")
        .arg("-C")
        .arg(REPO)
        .arg("install")
        .arg(format!("DESTDIR={}", dest.display()))
        .arg("PREFIX=/usr"));
    let v = sh(Command::new(dest.join("usr/bin/pagewise")).arg("--version"));
    assert!(
        v.starts_with(&format!("pagewise {VERSION} (commit ")),
        "{v}"
    );
    let man = dest.join("usr/share/man");
    let found = sh(Command::new("man")
        .arg("-M")
        .arg(&man)
        .args(["-w", "pagewise"]));
    assert_eq!(Path::new(found.trim()), man.join("man1/pagewise.1"));
    let found = sh(Command::new("man")
        .arg("-M")
        .arg(&man)
        .args(["-w", "pagewise-copy"]));
    assert_eq!(Path::new(found.trim()), man.join("man1/pagewise-copy.1"));
    // The page renders (man's own formatter) and names the verbs.
    let page = sh(Command::new("man")
        .arg("-M")
        .arg(&man)
        .arg("pagewise")
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100"));
    assert!(page.contains("evict") && page.contains("copy"), "{page}");
    for f in [
        "usr/share/bash-completion/completions/pagewise",
        "usr/share/zsh/site-functions/_pagewise",
        "usr/share/fish/vendor_completions.d/pagewise.fish",
    ] {
        let m = fs::metadata(dest.join(f)).unwrap();
        assert!(
            m.len() > 100 && m.permissions().mode() & 0o777 == 0o644,
            "{f}"
        );
    }
    let bash =
        fs::read_to_string(dest.join("usr/share/bash-completion/completions/pagewise")).unwrap();
    assert!(bash.contains("complete -F _pagewise"), "{bash}");
}

/// Directories `runc` will make for `cgroup` (a path below the hierarchies' roots) that do not
/// exist yet, in every hierarchy mounted under /sys/fs/cgroup (v1 makes the path in each),
/// deepest last: what to remove afterwards.
fn cgroup_dirs_to_make(cgroup: &str) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    // The hierarchies: /sys/fs/cgroup itself (v2), or the mounts beneath it (v1, hybrid).
    let top = Path::new("/sys/fs/cgroup");
    let dev = fs::metadata(top).map(|m| m.dev()).unwrap_or(0);
    let mut roots: Vec<PathBuf> = fs::read_dir(top)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| fs::metadata(p).is_ok_and(|m| m.is_dir() && m.dev() != dev))
                .collect()
        })
        .unwrap_or_default();
    roots.push(top.to_path_buf());
    let mut out = Vec::new();
    for r in roots {
        if !r.join("cgroup.procs").exists() {
            continue;
        }
        let mut p = r.clone();
        for c in cgroup.trim_start_matches('/').split('/') {
            p.push(c);
            if !p.exists() {
                out.push(p.clone());
            }
        }
    }
    out
}

/// A container run by runc, killed and deleted on drop, with the cgroup directories runc made
/// removed (children first).
struct Runc {
    id: String,
    made: Vec<PathBuf>,
}

impl Drop for Runc {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .args(["kill", &self.id, "KILL"])
            .output();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let _ = Command::new("runc")
            .args(["delete", "-f", &self.id])
            .output();
        for d in self.made.iter().rev() {
            let _ = fs::remove_dir(d);
        }
    }
}

/// Prometheus's answer to an instant query (curl against its HTTP API on loopback).
fn prom_query(port: u16, q: &str) -> Vec<serde_json::Value> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", "--data-urlencode"])
        .arg(format!("query={q}"))
        .arg(format!("http://127.0.0.1:{port}/api/v1/query"))
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    doc["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The OCI image: its configuration (user 65534, entrypoint pagewise, labels naming this
/// version and commit); then run by runc as the DaemonSet runs it — root with CAP_DAC_OVERRIDE
/// alone, read-only root, the host's root at /host, the host's cgroup tree, the host's PID and
/// network namespaces — it serves metrics that a real Prometheus scrapes, naming a
/// kubelet-style container made beneath our own cgroup with the figure of its memory.stat.
#[test]
fn the_oci_image_runs_under_runc_as_the_daemonset_runs_it_and_prometheus_scrapes_it() {
    if skipped() || !common::require_root("runc (containers, cgroups)") {
        return;
    }
    for tool in ["runc", "umoci", "prometheus", "curl"] {
        if !common::require(common::on_path(tool), &format!("{tool} (./install-deps)")) {
            return;
        }
    }
    let tar = dist().join(format!("pagewise-{VERSION}-oci.tar"));
    eprintln!("image: {} KiB", fs::metadata(&tar).unwrap().len() / 1024);
    let t = tempfile::tempdir().unwrap();
    let oci = t.path().join("oci");
    fs::create_dir(&oci).unwrap();
    sh(Command::new("tar").arg("-C").arg(&oci).arg("-xf").arg(&tar));
    // The image's configuration, through the layout: index -> manifest -> config.
    let blob = |digest: &str| -> serde_json::Value {
        let hex = digest.strip_prefix("sha256:").unwrap();
        serde_json::from_slice(&fs::read(oci.join("blobs/sha256").join(hex)).unwrap()).unwrap()
    };
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(oci.join("index.json")).unwrap()).unwrap();
    let manifest = blob(index["manifests"][0]["digest"].as_str().unwrap());
    let config = blob(manifest["config"]["digest"].as_str().unwrap());
    let c = &config["config"];
    assert_eq!(c["User"], "65534:65534", "{config}");
    assert_eq!(c["Entrypoint"][0], "/usr/bin/pagewise", "{config}");
    assert_eq!(c["Labels"]["org.opencontainers.image.version"], VERSION);
    assert_eq!(
        c["Labels"]["org.opencontainers.image.revision"],
        head12().as_str()
    );

    // A kubelet-style container beneath our own memory cgroup that has read 4 MiB.
    let Some(root) = common::ChildCgroup::new() else {
        return;
    };
    let uid = "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f";
    let id = "3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f";
    let pods = common::ChildCgroup::under(&root.dir, "kubepods.slice");
    let pod = common::ChildCgroup::under(
        &pods.dir,
        &format!("kubepods-pod{}.slice", uid.replace('-', "_")),
    );
    let ctr = common::ChildCgroup::under(&pod.dir, &format!("cri-containerd-{id}.scope"));
    let logs = t.path().join("log");
    fs::create_dir_all(logs.join("containers")).unwrap();
    fs::create_dir_all(logs.join(format!("pods/shop_web-0_{uid}"))).unwrap();
    fs::write(
        logs.join(format!("containers/web-0_shop_nginx-{id}.log")),
        "",
    )
    .unwrap();
    let data = t.path().join("data");
    common::cold_file(&data, 4 << 20);
    ctr.read_in(&data);

    let bundle = t.path().join("bundle");
    let image = format!("{}:{VERSION}", oci.display());
    sh(Command::new("umoci")
        .args(["unpack", "--image", &image])
        .arg(&bundle));
    let cgroup = format!("{}/pagewise-oci-{}", root.shown(), std::process::id());
    let made = cgroup_dirs_to_make(&cgroup);
    let port = common::free_port();
    let spec_path = bundle.join("config.json");
    let mut spec: serde_json::Value =
        serde_json::from_slice(&fs::read(&spec_path).unwrap()).unwrap();
    let host = |p: &Path| p.display().to_string();
    spec["process"]["terminal"] = false.into();
    spec["process"]["user"] = serde_json::json!({"uid": 0, "gid": 0});
    spec["process"]["args"] = serde_json::json!([
        "/usr/bin/pagewise",
        "exporter",
        "--listen",
        format!("127.0.0.1:{port}"),
        "--interval",
        "1s",
        "--rootfs",
        "/host",
        "--kubelet-logs",
        host(&logs),
        "--path",
        host(&data),
        "--cgroup",
        host(&root.dir),
    ]);
    let caps = serde_json::json!(["CAP_DAC_OVERRIDE"]);
    spec["process"]["capabilities"] =
        serde_json::json!({"bounding": caps, "effective": caps, "permitted": caps});
    spec["process"]["noNewPrivileges"] = true.into();
    spec["root"]["readonly"] = true.into();
    let mounts = spec["mounts"].as_array_mut().unwrap();
    mounts.retain(|m| m["destination"] != "/sys/fs/cgroup");
    mounts.push(
        serde_json::json!({"destination": "/host", "type": "bind", "source": "/",
        "options": ["rbind", "ro", "rslave"]}),
    );
    mounts.push(
        serde_json::json!({"destination": "/sys/fs/cgroup", "type": "bind",
        "source": "/sys/fs/cgroup", "options": ["rbind", "ro"]}),
    );
    spec["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["type"] != "network" && n["type"] != "pid");
    spec["linux"]["cgroupsPath"] = cgroup.clone().into();
    fs::write(&spec_path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();

    let name = format!("pagewise-test-{}", std::process::id());
    let log = fs::File::create(t.path().join("runc.log")).unwrap();
    let started = Command::new("runc")
        .args(["run", "-d", "--bundle"])
        .arg(&bundle)
        .arg(&name)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .status()
        .unwrap();
    let _container = Runc {
        id: name.clone(),
        made,
    };
    assert!(
        started.success(),
        "runc run: {}",
        fs::read_to_string(t.path().join("runc.log")).unwrap()
    );
    let state: serde_json::Value =
        serde_json::from_str(&sh(Command::new("runc").args(["state", &name]))).unwrap();
    let pid = state["pid"].as_u64().unwrap();
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap()
            .trim()
            .to_string()
    };
    assert!(field("Uid:").starts_with("0\t"), "{status}");
    assert_eq!(
        field("CapEff:"),
        "0000000000000002",
        "CAP_DAC_OVERRIDE alone"
    );

    let conf = t.path().join("prometheus.yml");
    fs::write(&conf, format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: pagewise\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")).unwrap();
    let pp = common::free_port();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", conf.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            t.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{pp}"))
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(t.path().join("prometheus.log")).unwrap())
        .spawn()
        .unwrap();
    let q = "pagewise_cgroup_file_bytes{namespace=\"shop\",pod=\"web-0\",container=\"nginx\"}";
    let start = std::time::Instant::now();
    let mut got = Vec::new();
    while got.is_empty() && start.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(500));
        got = prom_query(pp, q);
    }
    let _ = prom.kill();
    let _ = prom.wait();
    assert_eq!(
        got.len(),
        1,
        "{q}: {got:?}\n{}",
        fs::read_to_string(t.path().join("prometheus.log")).unwrap_or_default()
    );
    let v: f64 = got[0]["value"][1].as_str().unwrap().parse().unwrap();
    let kernel = ctr.file_bytes() as f64;
    assert!(
        (v - kernel).abs() <= kernel * 0.05 && v >= (4 << 20) as f64 * 0.9,
        "{v} vs {kernel}"
    );
    assert_eq!(got[0]["metric"]["id"], ctr.shown().as_str(), "{got:?}");
    drop(_container);
    drop(ctr);
    drop(pod);
    drop(pods);
    drop(root);
}
