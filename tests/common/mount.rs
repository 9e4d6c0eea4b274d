//! Mounts the end-to-end tests make (tmpfs, bind, bindfs, an ext4 image on a loop device) and loop
//! devices, each undone on drop, also when the test fails.

use super::*;
use std::path::PathBuf;

/// A mount (tmpfs or bind) unmounted on drop, also when the test fails.
pub struct Mount {
    at: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Mount {
    /// A size-limited tmpfs on a fresh directory. Panics when it cannot be mounted (root can).
    pub fn tmpfs(size: &str) -> Mount {
        Mount::tmpfs_opts(&format!("size={size}"))
    }
    /// A tmpfs with these mount options (size=, nr_inodes=).
    pub fn tmpfs_opts(opts: &str) -> Mount {
        let d = tmp();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(d.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount -t tmpfs -o {opts} failed");
        Mount {
            at: d.path().to_path_buf(),
            _dir: Some(d),
        }
    }
    /// A size-limited tmpfs, or None (the reason printed by [`require`]: the test is skipped)
    /// where it cannot be mounted.
    pub fn try_tmpfs(size: &str) -> Option<Mount> {
        let d = tmp();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(d.path())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !require(ok, "mounting a tmpfs (root)") {
            return None;
        }
        Some(Mount {
            at: d.path().to_path_buf(),
            _dir: Some(d),
        })
    }
    /// `from` bind-mounted on `at`. Panics when it cannot be mounted (root can).
    pub fn bind(from: &Path, at: &Path) -> Mount {
        let ok = Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(at)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount --bind failed");
        Mount {
            at: at.to_path_buf(),
            _dir: None,
        }
    }
    /// FUSE: `back` mirrored on `at` by bindfs (a file system without O_TMPFILE); None (said
    /// by [`require`]) without bindfs, which install-deps installs.
    pub fn bindfs(back: &Path, at: &Path) -> Option<Mount> {
        let ok = Command::new("bindfs")
            .arg(back)
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        if !require(ok, "bindfs (FUSE; install-deps installs it)") {
            return None;
        }
        Some(Mount {
            at: at.to_path_buf(),
            _dir: None,
        })
    }
    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.at
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.at)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            // Busy (a process still inside): detach it lazily rather than leave it mounted.
            let _ = Command::new("umount").arg("-l").arg(&self.at).status();
        }
    }
}

/// A loop device over an image file, detached on drop.
pub struct Loop(pub String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// A small ext4 image on a loop device, mounted in a temp dir; unmounted and detached on drop
/// (also when the test fails).
pub struct LoopMount {
    /// The loop device (/dev/loopN).
    pub dev: Option<String>,
    /// Where the filesystem is mounted.
    pub mnt: PathBuf,
    mounted: bool,
}

impl LoopMount {
    /// The image in `dir`, mounted on `dir/mnt`; None (said by [`require`]) without mkfs.ext4
    /// or a loop device.
    pub fn new(dir: &Path) -> Option<LoopMount> {
        let ok = |c: &mut Command| c.status().is_ok_and(|s| s.success());
        let img = dir.join("img");
        File::create(&img).unwrap().set_len(32 << 20).unwrap();
        if !require(
            ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img)),
            "mkfs.ext4 (e2fsprogs)",
        ) {
            return None;
        }
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&img)
            .output();
        let dev = out
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        if !require(dev.is_some(), "losetup -f (util-linux, loop devices, root)") {
            return None;
        }
        let mut m = LoopMount {
            dev,
            mnt: dir.join("mnt"),
            mounted: false,
        };
        fs::create_dir(&m.mnt).unwrap();
        assert!(ok(Command::new("mount")
            .arg(m.dev.as_ref().unwrap())
            .arg(&m.mnt)));
        m.mounted = true;
        Some(m)
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted {
            // A process that just exited may hold it a moment longer (busy): retried for 2 s,
            // then detached lazily rather than left mounted.
            let umount = |lazy: bool| {
                let mut c = Command::new("umount");
                if lazy {
                    c.arg("-l");
                } else {
                    c.stderr(std::process::Stdio::null());
                }
                c.arg(&self.mnt).status().is_ok_and(|s| s.success())
            };
            let mut tries = 0;
            while !umount(false) {
                tries += 1;
                if tries == 20 {
                    umount(true);
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        if let Some(d) = &self.dev {
            let _ = Command::new("losetup").args(["-d", d]).status();
        }
    }
}
