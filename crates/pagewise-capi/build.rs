//! Gives libpagewise.so its soname (libpagewise.so.MAJOR, MAJOR.MINOR while below 1.0, as
//! semver makes every 0.x minor a break), so programs linked against it keep loading the ABI
//! they were built for.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap();
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpagewise.so.{abi}");
    println!("cargo:rustc-env=PAGEWISE_ABI={abi}");
    println!("cargo:rerun-if-changed=build.rs");
    // pagewise_build_info(): the commit, date and target the CLI's --version prints too.
    pagewise_build_info::emit();
}
