//! How a verb ends: an [`ExitCode`], or a [`CliError`] (fatal: `pagewise: message`, exit 1).
//! The one place exit statuses are numbers.

use pagewise_core::Outcome;
use std::fmt;

/// SIGINT's number: what an interruption is taken to be when the signal is not known.
const SIGINT: i32 = 2;

/// The exit status of a verb that ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// 0: everything asked was done.
    Success,
    /// 1: bad arguments, or the verb could not start.
    Fatal,
    /// 2: finished, but some files failed (each named on stderr).
    SomeFailed,
    /// 3: a trace-driven verb (`replay`, `evict --trace`, `load --trace`) had nothing to act
    /// on: the trace has no pages, every file in it was skipped (gone, or no longer the file
    /// recorded), or every traced page lies past its file's end now. A script that prepares
    /// a cold start with `evict --trace` learns that its trace is of no use.
    NothingToDo,
    /// The status of the command `record` or `run` supervised, as a shell gives it: its own
    /// exit code, 128 + N when it died of signal N, 127 / 126 when it could not be started.
    Status(i32),
    /// pagewise stopped early on signal N (`copy`): 128 + N, as shells report it (130 for
    /// SIGINT, 143 for SIGTERM).
    Signal(i32),
}

impl ExitCode {
    /// A finished verb: [`ExitCode::SomeFailed`] when any file failed, else success.
    pub fn from_outcome(o: &Outcome) -> ExitCode {
        ExitCode::from_errors(o.error_count)
    }

    /// [`ExitCode::from_outcome`] over the error count of several reports.
    pub fn from_errors(error_count: u64) -> ExitCode {
        if error_count > 0 {
            ExitCode::SomeFailed
        } else {
            ExitCode::Success
        }
    }

    /// A verb a signal can stop (`copy`): the signal's status when it was interrupted (`last`:
    /// the signal received, SIGINT when unknown), else [`ExitCode::from_outcome`].
    pub fn from_cancellable(o: &Outcome, last: Option<i32>) -> ExitCode {
        if o.interrupted {
            ExitCode::Signal(last.unwrap_or(SIGINT))
        } else {
            ExitCode::from_outcome(o)
        }
    }

    /// A library error of `record` / `run`: the status a shell would give (127 command not
    /// found, 126 not executable, else fatal).
    pub fn from_error(e: &pagewise_core::Error) -> ExitCode {
        match e.exit_code() {
            1 => ExitCode::Fatal,
            n => ExitCode::Status(n),
        }
    }

    /// The process exit status.
    pub fn code(self) -> i32 {
        match self {
            ExitCode::Success => 0,
            ExitCode::Fatal => 1,
            ExitCode::SomeFailed => 2,
            ExitCode::NothingToDo => 3,
            ExitCode::Status(n) => n,
            ExitCode::Signal(n) => 128 + n,
        }
    }
}

impl From<ExitCode> for i32 {
    fn from(c: ExitCode) -> i32 {
        c.code()
    }
}

/// A fatal error of the CLI: printed as `pagewise: {self}` (and as a JSON document with
/// `--json`), exit [`ExitCode::Fatal`].
#[derive(Debug)]
pub enum CliError {
    /// A value clap took that the verb refuses (`--batch must be at least 1`).
    Usage(String),
    /// A library call failed before doing anything: its error, after what it was about (a
    /// trace file) when given.
    Library {
        /// What the error is about, shown before it.
        about: Option<String>,
        /// The library's error.
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file pagewise reads or writes itself (`--from`, a trace, an output, a man page):
    /// `path: op failed: error`.
    File {
        /// The path, escaped for text.
        path: String,
        /// What was done to it (`read`, `write`, `rename`, ...).
        op: &'static str,
        /// The OS error.
        error: std::io::Error,
    },
    /// Anything else, already worded.
    Message(String),
}

impl CliError {
    /// A library error about `about` (shown `about: error`).
    pub fn about(
        about: impl Into<String>,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> CliError {
        CliError::Library {
            about: Some(about.into()),
            error: Box::new(error),
        }
    }

    /// A failed operation on a file of pagewise's own.
    pub fn file(path: impl Into<String>, op: &'static str, error: std::io::Error) -> CliError {
        CliError::File {
            path: path.into(),
            op,
            error,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(m) | CliError::Message(m) => f.write_str(m),
            CliError::Library { about: None, error } => {
                f.write_str(&in_flag_names(&error.to_string()))
            }
            CliError::Library {
                about: Some(a),
                error,
            } => write!(f, "{a}: {}", in_flag_names(&error.to_string())),
            CliError::File { path, op, error } => write!(f, "{path}: {op} failed: {error}"),
        }
    }
}

impl From<pagewise_core::Error> for CliError {
    fn from(e: pagewise_core::Error) -> CliError {
        CliError::Library {
            about: None,
            error: Box::new(e),
        }
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> CliError {
        CliError::Message(e.to_string())
    }
}

/// Option fields as library messages name them, and the flags that set them on the command
/// line: [`in_flag_names`]'s table.
const FLAG_NAMES: [(&str, &str); 4] = [
    ("`sync` off", "--no-sync"),
    ("`max_cache`", "--max-cache"),
    ("`bytes`", "--bytes"),
    ("`backend` tracefs", "--backend tracefs"),
];

/// The one place a library message (an error, a notice) is put in the command line's words:
/// the option fields it names (`` `max_cache` ``, as Python and C users set them) become the
/// flags that set them (`--max-cache`).
pub fn in_flag_names(message: &str) -> String {
    FLAG_NAMES
        .iter()
        .fold(message.to_string(), |m, (field, flag)| {
            m.replace(field, flag)
        })
}

/// [`in_flag_names`] over a report's notices, before it is printed or written as JSON.
pub fn outcome_in_flag_names(o: &mut pagewise_core::Outcome) {
    for n in &mut o.notices {
        *n = in_flag_names(n);
    }
}

/// A library error of `record` / `run`: the message, and the exit status a shell would give
/// (127 / 126 when the command could not be started).
pub fn command_error(verb: &str, e: pagewise_core::Error) -> ExitCode {
    eprintln!("pagewise {verb}: {}", in_flag_names(&e.to_string()));
    ExitCode::from_error(&e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_what_shells_expect() {
        assert_eq!(ExitCode::Success.code(), 0);
        assert_eq!(ExitCode::Fatal.code(), 1);
        assert_eq!(ExitCode::SomeFailed.code(), 2);
        assert_eq!(ExitCode::NothingToDo.code(), 3);
        assert_eq!(ExitCode::Status(127).code(), 127);
        assert_eq!(ExitCode::Signal(15).code(), 143);
        assert_eq!(i32::from(ExitCode::Signal(2)), 130);
    }

    #[test]
    fn outcomes_map_to_codes() {
        let mut o = Outcome::default();
        assert_eq!(ExitCode::from_outcome(&o), ExitCode::Success);
        o.error_count = 3;
        assert_eq!(ExitCode::from_outcome(&o), ExitCode::SomeFailed);
        assert_eq!(ExitCode::from_cancellable(&o, None), ExitCode::SomeFailed);
        o.interrupted = true;
        assert_eq!(ExitCode::from_cancellable(&o, None).code(), 130);
        assert_eq!(ExitCode::from_cancellable(&o, Some(15)).code(), 143);
    }

    #[test]
    fn errors_read_as_before() {
        let e = CliError::file("/x", "read", std::io::Error::from_raw_os_error(2));
        assert_eq!(
            e.to_string(),
            "/x: read failed: No such file or directory (os error 2)"
        );
        let e = CliError::about("t.trace", pagewise_core::trace::TraceError::BadMagic);
        assert_eq!(e.to_string(), "t.trace: not a pagewise trace (bad magic)");
        assert_eq!(CliError::Usage("--x".into()).to_string(), "--x");
    }

    #[test]
    fn library_messages_name_the_flags() {
        assert_eq!(
            in_flag_names("`sync` off: dirty pages were not written back and stay cached"),
            "--no-sync: dirty pages were not written back and stay cached"
        );
        assert_eq!(
            in_flag_names("drop-behind ...: `max_cache` may be exceeded"),
            "drop-behind ...: --max-cache may be exceeded"
        );
        let e = pagewise_core::Error::Invalid {
            what: "bytes",
            message: "v1 has no partial reclaim; leave out `bytes`".into(),
        };
        assert!(CliError::from(e).to_string().ends_with("leave out --bytes"));
    }
}
