//! `assist`: prefetching for programs whose access pattern the kernel misreads (random reads
//! of 64 KiB–1 MiB chunks through mmap), from user space and for any filesystem.
//!
//! [`predictor`] is the pure logic; [`sim`] replays a recorded trace through it; [`live`]
//! watches a process tree's page faults on the kernel's tracepoints and issues the prefetches.

pub mod live;
pub mod predictor;
pub mod sim;

pub use predictor::{Access, Config, Detector, Predictor, Window};
