//! The end-to-end tests: one binary, a module per verb (and per concern of the larger verbs).
//! Each drives the built `pagewise` (or the library) on real files and asserts on what the
//! kernel reports — cachestat on the real file, mincore through a mapping, memory.stat —
//! never on what pagewise says it did. Run one module with `cargo test --profile ci --test
//! e2e copy::` (or a single test by its path, `--exact copy::resume::...`).
//!
//! Tests that drive outside tool chains stay binaries of their own: the release artifacts
//! (`release.rs`), the kernel matrix (`vm_kernels.rs`), Python's suite (`python.rs`), the slow
//! disk (`slowdisk.rs`), the set-up's tools (`setup_tools.rs`); so do the repository's checks
//! that run nothing (`docs.rs`, `structure.rs`).

#[path = "../common/mod.rs"]
mod common;

mod assist;
mod bench;
mod cache_verbs;
mod cgroups;
mod cli;
mod copy;
mod deploy;
mod evict;
mod exporter;
mod exporter_util;
mod fs_matrix;
mod hostile;
mod json_schema;
mod load;
mod run;
mod stat;
mod top;
mod trace;
mod units;
