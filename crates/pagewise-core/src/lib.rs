//! pagewise-core: exact control of the Linux page cache.
//!
//! Each verb is a plain function over a tree walk that returns a serialisable report; nothing
//! here parses arguments or prints. All `unsafe` lives in [`sys`]: the crate denies
//! `unsafe_code`, and only the `sys` files that make system calls allow it.

#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod assist;
pub mod bench;
pub mod cgroup;
pub mod chunks;
pub mod copy;
pub mod dio;
pub mod error;
pub mod evict;
pub mod exporter;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod json;
pub mod load;
pub mod names;
pub mod operator_path;
pub mod procfs;
pub mod replay;
pub mod residency;
pub mod run;
#[cfg(feature = "schema")]
pub mod schema;
pub mod shared_dir;
pub mod stat;
pub mod sys;
pub mod top;
pub mod trace;
pub mod verb;
pub mod walk;

pub use error::{Error, ErrorLog, FileError, Op};
pub use residency::{ByteRange, Method};
pub use verb::{FileResult, Observer, Outcome, Progress, Watch};
pub use walk::WalkOptions;
