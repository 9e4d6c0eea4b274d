//! The observer that answers `cancelled()` from pagewise's signal flag.

use pagewise_core::Observer;
use std::sync::atomic::Ordering;

/// The observer of `record`, `run` and `assist -p`: cancelled once pagewise received SIGINT
/// or SIGTERM (or, while `record` and `run` supervise a command, SIGHUP or SIGQUIT). The
/// handlers are installed at the first poll, so they change nothing before: `record` and `run`
/// install them themselves when they start the command, `assist` polls once it is tracing.
pub struct Signals;

impl Observer for Signals {
    fn cancelled(&self) -> bool {
        pagewise_core::sys::interrupt_flag().load(Ordering::SeqCst)
    }
}
