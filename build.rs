//! `pagewise --version`: the version, commit, build date and target (pagewise-build-info), the
//! same line libpagewise's `pagewise_build_info()` and Python's `pagewise.build_info()` give.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    pagewise_build_info::emit();
}
