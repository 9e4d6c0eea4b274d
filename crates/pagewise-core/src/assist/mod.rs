//! `assist`: prefetching for programs whose access pattern the kernel misreads (random reads
//! of 64 KiB–1 MiB chunks through mmap), from user space and for any filesystem.
//!
//! [`predictor`] is the pure logic; [`sim`] replays a recorded trace through it; the verb
//! [`assist()`] (`live`) follows a process tree's page faults on the kernel's tracepoints and
//! hands them to the [`Assistant`] (`assistant`), which issues the prefetches; `report` holds
//! what it reports.

mod assistant;
mod live;
pub mod predictor;
mod report;
pub mod sim;

pub use assistant::{Assistant, Prefetch};
pub use live::{assist, AssistOptions, EVENTS};
pub use predictor::{Access, Config, Detector, Predictor, Window};
pub use report::{AssistReport, LatencyBucket};
