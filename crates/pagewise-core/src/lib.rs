//! pagewise-core: exact control of the Linux page cache.
//!
//! Each verb is a plain function over a tree walk that returns a serialisable report; nothing
//! here parses arguments or prints. All `unsafe` lives in [`sys`].

pub mod assist;
pub mod chunks;
pub mod copy;
pub mod error;
pub mod evict;
pub mod json;
pub mod load;
pub mod names;
pub mod replay;
pub mod residency;
pub mod run;
pub mod sys;
pub mod trace;
pub mod walk;

pub use error::{Error, ErrorLog, FileError};
pub use residency::{ByteRange, Method, Progress};
pub use walk::WalkOptions;
