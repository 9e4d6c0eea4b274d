//! The one capability gate of the end-to-end tests, kept free of anything of the `pagewise`
//! package (no `env!` of its build) so the C API's tests include this same file
//! (crates/pagewise-capi/tests/examples.rs), and so do the library's unit tests
//! (`pagewise_core::sys::testing::require`).

/// The capability gate every test uses: true when `ok`. When not, the test fails, naming what
/// is missing (`./install-deps` installs it; root is needed for tracing, mounts and setpriv) —
/// unless PAGEWISE_ALLOW_SKIP=1 is set, when it prints `skipped: WHY` and the caller returns.
/// A machine set up by the README runs every test: nothing is skipped silently.
pub fn require(ok: bool, why: &str) -> bool {
    if ok {
        return true;
    }
    if std::env::var_os("PAGEWISE_ALLOW_SKIP").is_some_and(|v| v == "1") {
        eprintln!("skipped: {why}");
        return false;
    }
    panic!("cannot run: {why} (run ./install-deps as root, or set PAGEWISE_ALLOW_SKIP=1 to skip)");
}
