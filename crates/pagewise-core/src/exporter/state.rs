//! The counters of textfile mode kept across runs: each `pagewise exporter --textfile DIR` run
//! reads them from `DIR/.pagewise.state` (a name node_exporter ignores: it reads `*.prom`),
//! adds its own refresh and errors, and writes them back (temporary + rename), so that
//! `pagewise_refreshes_total` and `pagewise_refresh_errors_total` increase from run to run.
//!
//! The file is outside input (anyone with write access to the directory may change it), so it
//! is parsed defensively: at most [`MAX_STATE`] bytes, `key value` lines, unknown keys ignored.
//! A file that is not ours or not whole is refused ([`StateError`]) and the counters start
//! again from 0: Prometheus takes that as a counter reset, never as a decrease.

/// Largest state file read, in bytes.
pub const MAX_STATE: usize = 4096;

/// The first line of a state file.
pub const MAGIC: &str = "# pagewise exporter textfile state v1";

/// The counters kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextfileState {
    /// Runs that refreshed (`pagewise_refreshes_total`).
    pub refreshes: u64,
    /// Errors over those runs (`pagewise_refresh_errors_total`).
    pub refresh_errors: u64,
}

/// Why a state file was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Longer than [`MAX_STATE`].
    #[error("longer than {MAX_STATE} bytes")]
    TooLarge,
    /// Not starting with [`MAGIC`].
    #[error("not a pagewise state file")]
    NotOurs,
    /// A line that is not `key value`, a value that is not a number, a key twice, or a key
    /// missing.
    #[error("line {0}: {1}")]
    Bad(usize, &'static str),
}

impl TextfileState {
    /// Parses a state file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<TextfileState, StateError> {
        if bytes.len() > MAX_STATE {
            return Err(StateError::TooLarge);
        }
        let text = std::str::from_utf8(bytes).map_err(|_| StateError::NotOurs)?;
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err(StateError::NotOurs);
        }
        let (mut refreshes, mut errors) = (None, None);
        for (i, line) in lines.enumerate() {
            let n = i + 2;
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line
                .split_once(' ')
                .ok_or(StateError::Bad(n, "not `key value`"))?;
            let slot = match key {
                "refreshes" => &mut refreshes,
                "refresh_errors" => &mut errors,
                _ => continue,
            };
            if slot.is_some() {
                return Err(StateError::Bad(n, "key given twice"));
            }
            let v = value.trim();
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(StateError::Bad(n, "not a number"));
            }
            *slot = Some(v.parse().map_err(|_| StateError::Bad(n, "too large"))?);
        }
        match (refreshes, errors) {
            (Some(refreshes), Some(refresh_errors)) => Ok(TextfileState {
                refreshes,
                refresh_errors,
            }),
            _ => Err(StateError::Bad(0, "a key is missing")),
        }
    }

    /// The file's text.
    pub fn to_text(&self) -> String {
        format!(
            "{MAGIC}\nrefreshes {}\nrefresh_errors {}\n",
            self.refreshes, self.refresh_errors
        )
    }

    /// After one more run that had `errors` errors (saturating).
    pub fn after_run(self, errors: u64) -> TextfileState {
        TextfileState {
            refreshes: self.refreshes.saturating_add(1),
            refresh_errors: self.refresh_errors.saturating_add(errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzzing::fuzz;

    #[test]
    fn round_trip_and_refusals() {
        let s = TextfileState {
            refreshes: 7,
            refresh_errors: 2,
        };
        assert_eq!(TextfileState::parse(s.to_text().as_bytes()), Ok(s));
        assert_eq!(s.after_run(3).refresh_errors, 5);
        assert_eq!(s.after_run(3).refreshes, 8);
        assert_eq!(
            TextfileState::parse(b"refreshes 1\n"),
            Err(StateError::NotOurs)
        );
        let twice = format!("{MAGIC}\nrefreshes 1\nrefreshes 2\nrefresh_errors 0\n");
        assert_eq!(
            TextfileState::parse(twice.as_bytes()),
            Err(StateError::Bad(3, "key given twice"))
        );
        let neg = format!("{MAGIC}\nrefreshes -1\nrefresh_errors 0\n");
        assert!(TextfileState::parse(neg.as_bytes()).is_err());
        let future = format!("{MAGIC}\nrefreshes 1\nlater 9\nrefresh_errors 0\n");
        assert!(TextfileState::parse(future.as_bytes()).is_ok());
        assert_eq!(
            TextfileState::parse(&vec![b'#'; MAX_STATE + 1]),
            Err(StateError::TooLarge)
        );
    }

    /// Any bytes, and mutations of a good file: a state or an error, never a panic; a state
    /// parsed is what its text says (it round-trips).
    #[test]
    fn fuzz_state_files() {
        use proptest::prelude::*;
        let good = (any::<u64>(), any::<u64>(), "[ -~\n]{0,30}", 0usize..80).prop_map(
            |(r, e, junk, at)| {
                let mut t = TextfileState {
                    refreshes: r,
                    refresh_errors: e,
                }
                .to_text()
                .into_bytes();
                let at = at.min(t.len());
                t.splice(at..at, junk.into_bytes());
                t
            },
        );
        let bytes = prop_oneof![proptest::collection::vec(any::<u8>(), 0..5000), good];
        fuzz("textfile-state", 512, bytes, |b| {
            if let Ok(s) = TextfileState::parse(&b) {
                assert_eq!(TextfileState::parse(s.to_text().as_bytes()), Ok(s));
                assert!(b.len() <= MAX_STATE);
            }
        });
    }
}
