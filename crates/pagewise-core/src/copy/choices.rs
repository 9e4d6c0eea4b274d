//! What several of [`CopyOptions`](super::CopyOptions)'s options can be: which attributes are
//! kept ([`Preserve`]), where sources go ([`Layout`]), what a symlink becomes ([`Links`]), how
//! an existing file is written ([`InPlace`]), rsync's alternate destinations ([`AltDest`]) and
//! backups ([`Backup`]). Plain data: imports nothing else of `copy`.

use std::path::PathBuf;

/// Which of a source's attributes its copy keeps. Owner is kept only as root; group as root,
/// or where the user belongs to the source's group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Preserve {
    /// Permission bits, set-id and sticky bits (rsync -p). Without: a new file gets the
    /// source's permission bits less the umask, an existing one keeps its own.
    pub perms: bool,
    /// The owner (rsync -o; only as root).
    pub owner: bool,
    /// The group (rsync -g).
    pub group: bool,
    /// Modification (and access) times (rsync -t).
    pub times: bool,
    /// Extended attributes but ACLs (rsync -X).
    pub xattrs: bool,
    /// POSIX ACLs (rsync -A).
    pub acls: bool,
}

impl Preserve {
    /// All of them (cp -p, cp -a, rsync -aAX).
    pub const ALL: Preserve = Preserve {
        perms: true,
        owner: true,
        group: true,
        times: true,
        xattrs: true,
        acls: true,
    };
    /// None of them.
    pub const NONE: Preserve = Preserve {
        perms: false,
        owner: false,
        group: false,
        times: false,
        xattrs: false,
        acls: false,
    };

    /// Whether any attribute is kept.
    pub fn any(self) -> bool {
        self != Preserve::NONE
    }

    /// Whether the extended attribute `name` is kept: ACLs (`system.posix_acl_*`) with
    /// `acls`, the others with `xattrs`.
    pub fn keeps_xattr(self, name: &[u8]) -> bool {
        if name.starts_with(b"system.posix_acl_") {
            self.acls
        } else {
            self.xattrs
        }
    }
}

/// rsync's in-place writes of an existing destination file (the file keeps its inode; a
/// reader may see it half written, and a failure leaves it so — what these options accept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InPlace {
    /// Through a temporary, linked or renamed into place when complete.
    #[default]
    No,
    /// --inplace: the data is written over the existing file, which is cut to the source's
    /// size.
    Whole,
    /// --append: only what the source has past the existing file's length is written (the
    /// rest is taken to be the same); a destination as long or longer is left.
    Append,
    /// --append-verify: as `Append`, after checking that the existing data is the source's
    /// (read without caching); when it is not, the whole file is written.
    AppendVerify,
}

/// Where each source goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Layout {
    /// cp's rules: into `dest` when it is a directory, else as `dest` (`SRC/.` and
    /// `no_target_directory` put a directory's contents into `dest` itself); a re-run that
    /// would nest a second copy gets a notice.
    #[default]
    Cp,
    /// rsync's: a source ending in `/` (or `/.`) puts its contents into `dest`; any other goes
    /// into `dest` under its name; `dest` is a directory unless there is one source, not a
    /// directory, and `dest` is not one (then it is the copy).
    Rsync,
    /// rsync's -R: a source `BASE/./PATH` (or `PATH`, all of it kept) goes to `dest/PATH`,
    /// the directories on PATH made as needed with their source's attributes; `dest` is a
    /// directory.
    RsyncRelative,
}

/// What happens to a symlink that is not followed ([`Dereference`] says which are).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Links {
    /// Copied as a symlink (cp -P, rsync -l).
    #[default]
    Copy,
    /// Left out, with a notice (rsync without -l: "skipping non-regular file").
    Skip,
    /// Copied when its target stays inside the copied tree, else left out (rsync -l
    /// --safe-links: an absolute target, or one climbing above the tree, is unsafe).
    SkipUnsafe,
    /// Copied when safe; an unsafe one is followed: what it points to is copied in its place
    /// (rsync --copy-unsafe-links).
    FollowUnsafe,
}

/// What rsync's alternate destination directories do with a file found unchanged there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AltKind {
    /// --link-dest: hard-link it into the destination.
    Link,
    /// --compare-dest: leave the file out of the destination.
    Compare,
    /// --copy-dest: copy it into the destination (without reading the source).
    Copy,
}

/// One of rsync's alternate destination directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AltDest {
    /// The directory.
    pub dir: PathBuf,
    /// What is done with an unchanged file found in it.
    pub kind: AltKind,
}

/// Where rsync's --backup keeps what a copy replaces or deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// --backup-dir: kept under the same relative path in this directory (a relative one is
    /// taken from the destination); None: beside the original.
    pub dir: Option<PathBuf>,
    /// --suffix: appended to the name (rsync: `~` without a directory, nothing with one).
    pub suffix: std::ffi::OsString,
}

/// Where a file is written before it gets its final name (rsync's `--temp-dir`,
/// `--partial-dir`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TempPlace {
    /// Beside the final name, in its own directory.
    #[default]
    Beside,
    /// In this one directory (a physical path, on the destination's file system):
    /// `--temp-dir`. Files are linked or renamed from there into place.
    Dir(PathBuf),
    /// In this subdirectory of each destination directory (one name, no `/`), made 0700 when
    /// first needed and removed at the end when empty: a relative `--partial-dir`, where a
    /// stopped file is kept and resumed from, and `--delay-updates`' `.~tmp~`. The name is
    /// left out of the copy and of `--delete`, as rsync's.
    Sub(std::ffi::OsString),
}

impl TempPlace {
    /// The subdirectory name of [`TempPlace::Sub`].
    pub fn sub(&self) -> Option<&std::ffi::OsStr> {
        match self {
            TempPlace::Sub(n) => Some(n),
            _ => None,
        }
    }
}
