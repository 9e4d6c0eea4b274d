//! The C and C++ examples, end to end: install.sh builds the library (release) and installs it
//! into a temporary prefix; each example is compiled with `cc` / `c++` and
//! `pkg-config --cflags --libs pagewise`, run, and judged by what the kernel shows afterwards
//! (pagewise_core's stat: cachestat), never by what the example printed alone. One example is
//! also linked against libpagewise.a.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pagewise_core::evict::{evict, EvictOptions};
use pagewise_core::load::{load, LoadOptions};
use pagewise_core::stat::{stat, StatOptions};

/// The capability gate of the repository's tests: a missing tool fails the test, naming it,
/// unless PAGEWISE_ALLOW_SKIP=1 (then it prints `skipped: WHY`).
#[path = "../../../tests/common/require.rs"]
mod require;
use require::require;

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The target directory this test was built in (…/target/release/deps/examples-HASH).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// A scratch directory on a disk filesystem (not tmpfs, whose pages cannot be evicted).
fn scratch() -> tempfile::TempDir {
    if let Some(d) = std::env::var_os("PAGEWISE_TEST_TMPDIR") {
        return tempfile::tempdir_in(d).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let f = std::fs::File::open(tmp.path()).unwrap();
    if !pagewise_core::sys::is_shmem(f.as_fd()) {
        return tmp;
    }
    tempfile::tempdir_in(target_dir()).unwrap()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// `key=value` from an example's output.
fn field(out: &str, key: &str) -> String {
    let pat = format!("{key}=");
    let at = out.find(&pat).unwrap_or_else(|| panic!("{key} in {out}")) + pat.len();
    out[at..].split_whitespace().next().unwrap().to_string()
}

struct Installed {
    prefix: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Installed {
    /// install.sh into a fresh prefix (built with the test's own profile); or PAGEWISE_CAPI_PREFIX, a prefix install.sh already
    /// filled (the kernel matrix's guest, which cannot build).
    fn install() -> Installed {
        if let Some(p) = std::env::var_os("PAGEWISE_CAPI_PREFIX") {
            return Installed {
                prefix: p.into(),
                _tmp: None,
            };
        }
        let tmp = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("install.sh");
        // The profile this test was built with (…/target/PROFILE/deps/examples-HASH): the
        // library is built the same way, sharing the test build's compiled crates.
        let exe = std::env::current_exe().unwrap();
        let profile = exe
            .ancestors()
            .nth(2)
            .unwrap()
            .file_name()
            .unwrap()
            .to_owned();
        run(Command::new("bash")
            .arg(script)
            .arg(tmp.path())
            .env("PROFILE", profile)
            .env("CARGO_TARGET_DIR", target_dir()));
        Installed {
            prefix: tmp.path().to_path_buf(),
            _tmp: Some(tmp),
        }
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.prefix.join(rel)
    }
    fn pkg_config(&self, args: &[&str]) -> Vec<String> {
        let out = run(Command::new("pkg-config")
            .args(args)
            .arg("pagewise")
            .env("PKG_CONFIG_PATH", self.path("lib/pkgconfig")));
        stdout(&out).split_whitespace().map(String::from).collect()
    }
    /// Compiles examples/NAME with `cc` (C) or `c++` (C++17), warnings as errors.
    fn compile(&self, name: &str) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name);
        let exe = self.path(name.split('.').next().unwrap());
        let mut cmd = if name.ends_with(".cpp") {
            let mut c = Command::new("c++");
            c.arg("-std=c++17");
            c
        } else {
            let mut c = Command::new("cc");
            c.arg("-std=c11");
            c
        };
        cmd.args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", "-o"])
            .arg(&exe)
            .arg(&src)
            .args(self.pkg_config(&["--cflags", "--libs"]));
        run(&mut cmd);
        exe
    }
    /// Runs an example built against the shared library installed here.
    fn example(&self, exe: &Path) -> Command {
        let mut c = Command::new(exe);
        c.env("LD_LIBRARY_PATH", self.path("lib"));
        c
    }
}

/// Deterministic bytes.
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn cached(paths: &[&Path]) -> (u64, u64) {
    let r = stat(
        &StatOptions::new(paths.iter().map(|p| p.to_path_buf()).collect()),
        &(),
    )
    .unwrap();
    assert_eq!(r.outcome.error_count, 0, "{:?}", r.outcome.errors);
    (r.total.cached_bytes, r.total.bytes)
}

fn evict_now(p: &Path) {
    let r = evict(&EvictOptions::new(vec![p.to_path_buf()]), &()).unwrap();
    assert_eq!(r.total.stayed_bytes, 0);
}

#[test]
fn c_and_cpp_examples_build_run_and_leave_the_cache_as_the_kernel_shows() {
    if !require(
        have("cc") && have("c++") && have("pkg-config"),
        "cc, c++ and pkg-config are needed to build the C examples",
    ) {
        return;
    }
    let lib = Installed::install();
    for f in [
        "include/pagewise.h",
        "include/pagewise.hpp",
        "lib/libpagewise.a",
        "lib/libpagewise.so",
        "lib/pkgconfig/pagewise.pc",
    ] {
        assert!(lib.path(f).exists(), "{f} installed");
    }
    assert_eq!(
        lib.pkg_config(&["--modversion"]),
        [env!("CARGO_PKG_VERSION")]
    );
    let dir = scratch();

    // evict_tree: a tree loaded into the cache leaves it.
    let tree = dir.path().join("tree");
    let mut total = 0;
    for i in 0..24usize {
        let sub = tree.join(format!("d{}/e{}", i % 3, i % 2));
        std::fs::create_dir_all(&sub).unwrap();
        let data = bytes(i as u64, 1000 + i * 37_123);
        total += data.len() as u64;
        std::fs::write(sub.join(format!("f{i}")), data).unwrap();
    }
    load(&LoadOptions::new(vec![tree.clone()]), &()).unwrap();
    assert_eq!(cached(&[&tree]), (total, total), "loaded before");
    let exe = lib.compile("evict_tree.c");
    let out = stdout(&run(lib.example(&exe).arg(&tree)));
    assert_eq!(cached(&[&tree]), (0, total), "evicted, per cachestat");
    assert_eq!(field(&out, "files"), "24", "{out}");
    assert_eq!(field(&out, "cached_before"), total.to_string(), "{out}");

    // direct_copy: byte-identical, and neither file cached.
    let src = dir.path().join("src");
    let data = bytes(99, (12 << 20) + 4321);
    std::fs::write(&src, &data).unwrap();
    evict_now(&src);
    let exe = lib.compile("direct_copy.c");
    let dst = dir.path().join("dst");
    let out = stdout(&run(lib.example(&exe).arg(&src).arg(&dst)));
    assert!(out.contains("read direct, written direct"), "{out}");
    assert_eq!(cached(&[&src, &dst]), (0, 2 * data.len() as u64));
    assert!(std::fs::read(&dst).unwrap() == data, "byte-identical");

    // A failure names the path and the call, and fails the program.
    let out = lib
        .example(&exe)
        .arg(dir.path().join("missing"))
        .arg(dir.path().join("x"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing: open(O_DIRECT) failed: No such file or directory"),
        "{err}"
    );

    // cold_read (C++): locked while the Lock lives, then read cold with O_DIRECT: the hash
    // matches, nothing stays cached.
    evict_now(&src);
    let exe = lib.compile("cold_read.cpp");
    let out = stdout(&run(lib.example(&exe).arg(&src)));
    let fnv = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    assert_eq!(field(&out, "fnv1a64"), format!("{fnv:x}"), "{out}");
    assert_eq!(field(&out, "read_bytes"), data.len().to_string());
    assert_eq!(field(&out, "cached_while_locked"), data.len().to_string());
    assert!(field(&out, "locked_bytes").parse::<u64>().unwrap() >= data.len() as u64);
    assert_eq!(field(&out, "policy"), "direct");
    assert_eq!(cached(&[&src]), (0, data.len() as u64));

    // direct_copy linked against libpagewise.a: no libpagewise.so needed at run time.
    let static_exe = lib.path("direct_copy_static");
    let libs: Vec<String> = lib
        .pkg_config(&["--static", "--libs-only-l"])
        .into_iter()
        .filter(|l| l != "-lpagewise")
        .collect();
    run(Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&static_exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/direct_copy.c"))
        .args(lib.pkg_config(&["--cflags"]))
        .arg(lib.path("lib/libpagewise.a"))
        .args(libs));
    let ldd = stdout(&run(Command::new("ldd").arg(&static_exe)));
    assert!(!ldd.contains("libpagewise"), "{ldd}");
    let dst2 = dir.path().join("dst2");
    evict_now(&dst); // the comparison above read it through the cache
    run(Command::new(&static_exe).arg(&dst).arg(&dst2));
    assert_eq!(cached(&[&dst, &dst2]), (0, 2 * data.len() as u64));
    assert!(std::fs::read(&dst2).unwrap() == data, "byte-identical");
}

/// tests/c/arguments.c: the C API called from C with sizes, alignments, offsets and counts no
/// call can honour. Each is a negative errno with a message naming the call; none aborts
/// the program; the file is unchanged.
#[test]
fn impossible_arguments_from_c_are_errors_not_aborts() {
    if !require(
        have("cc") && have("pkg-config"),
        "cc and pkg-config are needed to build the C test",
    ) {
        return;
    }
    let lib = Installed::install();
    let dir = scratch();
    let exe = lib.path("arguments");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/arguments.c");
    run(Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O2",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .args(lib.pkg_config(&["--cflags", "--libs"])));
    let file = dir.path().join("f");
    std::fs::write(&file, b"0123456789").unwrap();
    let out = lib
        .example(&exe)
        .arg(&file)
        .arg(dir.path().join("copy"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.ends_with("alive\n"),
        "the program died ({}):\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (einval, enomem) = (-libc::EINVAL, -libc::ENOMEM);
    let want: &[(&str, i32, &str)] = &[
        ("alloc_huge", enomem, "pagewise_aligned_alloc: "),
        ("alloc_max", enomem, "pagewise_aligned_alloc: "),
        ("alloc_align", einval, "alignment"),
        ("alloc_align_max", einval, "alignment"),
        ("pread_max", einval, "pread failed"),
        ("pread_i64", einval, "pread failed"),
        ("pwrite_max", einval, "pwrite failed"),
        ("pwrite_i64", einval, "pwrite failed"),
        ("truncate_max", einval, "ftruncate failed"),
        ("policy_after", 0, ""),
        ("close", 0, ""),
        ("load_depth", einval, "depth"),
        ("load_threads", einval, "threads"),
        ("stat_threads", einval, "threads"),
        ("copy_chunk", einval, "chunk"),
        ("copy_depth", einval, "depth"),
        ("copy_threads", einval, "threads"),
    ];
    for &(name, errno, says) in want {
        let l = text
            .lines()
            .find(|l| l.starts_with(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} in\n{text}"));
        let (code, message) = l[name.len() + 1..].split_once(' ').unwrap();
        assert_eq!(code.parse::<i32>().unwrap(), errno, "{l}");
        assert!(message.contains(says), "{l}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"0123456789");
    assert!(!dir.path().join("copy").exists(), "no copy ran");
}
