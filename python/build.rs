//! `pagewise.build_info()`: the version, commit, build date and target (pagewise-build-info),
//! the same line `pagewise --version` and libpagewise's `pagewise_build_info()` give.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    pagewise_build_info::emit();
}
