//! Exit codes, named.

/// Everything asked was done.
pub const SUCCESS: i32 = 0;
/// Fatal: bad arguments, or the verb could not start.
pub const FATAL: i32 = 1;
/// Finished, but some files failed (each named on stderr).
pub const SOME_FAILED: i32 = 2;
/// Interrupted by SIGINT (128 + 2), as shells report it.
pub const INTERRUPTED: i32 = 130;
