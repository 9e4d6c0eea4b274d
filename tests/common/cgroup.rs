//! Memory cgroups for the tests: made only beneath this process's own memory cgroup (or
//! beneath one of these), removed by a Drop guard, also when a test fails; only processes the
//! tests start are moved into them.

use super::{require, require_root};
use pagewise_core::cgroup::{self, Hierarchy};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A memory cgroup made by a test, removed on drop.
pub struct ChildCgroup {
    /// Its directory in the cgroup filesystem.
    pub dir: PathBuf,
}

impl ChildCgroup {
    /// A new group beneath our own memory cgroup; None (the gate says why) without one or
    /// without root.
    pub fn new() -> Option<ChildCgroup> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let own = match cgroup::own_memory_cgroup() {
            Ok(o) => o,
            Err(e) => {
                require(false, &format!("no memory cgroup: {e}"));
                return None;
            }
        };
        if !require_root("making a cgroup") {
            return None;
        }
        let n = N.fetch_add(1, Ordering::Relaxed);
        Some(ChildCgroup::under(
            &own,
            &format!("pagewise-test-{}-{n}", std::process::id()),
        ))
    }

    /// A new group `name` beneath `parent` (ours or one of these). On cgroup v2 the memory
    /// controller is first enabled for the parent's children (as a kubelet or systemd does for
    /// its slices), so the group has a memory.stat; a parent with processes of its own refuses
    /// that (v2's no-internal-processes rule) and the group goes without.
    pub fn under(parent: &Path, name: &str) -> ChildCgroup {
        let control = parent.join("cgroup.subtree_control");
        if fs::read_to_string(&control).is_ok_and(|c| !c.split_whitespace().any(|w| w == "memory"))
        {
            let _ = fs::write(&control, "+memory");
        }
        let dir = parent.join(name);
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        ChildCgroup { dir }
    }

    /// The path `pagewise cgroups` shows for it.
    pub fn shown(&self) -> String {
        cgroup::cgroup_name(&self.dir, &cgroup::memory_mounts())
    }

    /// `cksum FILE` moved into this group (the shell moves itself, then execs), waited for:
    /// its reads are charged here.
    pub fn read_in(&self, file: &Path) {
        let out = self.cksum(file, false).wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    /// `cksum FILE -` moved into this group: it reads the file, then its stdin, a pipe the
    /// test holds open, so it is alive until the test closes it.
    pub fn reader(&self, file: &Path) -> Child {
        self.cksum(file, true)
    }

    fn cksum(&self, file: &Path, then_stdin: bool) -> Child {
        let script = match then_stdin {
            true => "echo $$ > \"$1/cgroup.procs\" && exec cksum \"$2\" -",
            false => "echo $$ > \"$1/cgroup.procs\" && exec cksum \"$2\"",
        };
        Command::new("sh")
            .args(["-c", script, "sh"])
            .arg(&self.dir)
            .arg(file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The kernel's figure: file cache charged to the group (v2 `file`, v1 `total_cache`).
    pub fn file_bytes(&self) -> u64 {
        let text = fs::read_to_string(self.dir.join("memory.stat")).unwrap();
        let key = match Hierarchy::of(&self.dir) {
            Hierarchy::V2 => "file",
            Hierarchy::V1 => "total_cache",
        };
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
            .unwrap()
    }

    /// memory.stat's file bytes once `ok` holds of them, or after 5 s (two of the kernel's
    /// periodic stat flushes) whatever they are.
    pub fn file_bytes_once(&self, ok: impl Fn(u64) -> bool) -> u64 {
        let start = std::time::Instant::now();
        loop {
            let b = self.file_bytes();
            if ok(b) || start.elapsed() > std::time::Duration::from_secs(5) {
                return b;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for ChildCgroup {
    fn drop(&mut self) {
        // Its processes have exited; charged pages move to the parent on rmdir.
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!("warning: rmdir {}: {e}", self.dir.display());
        }
    }
}
