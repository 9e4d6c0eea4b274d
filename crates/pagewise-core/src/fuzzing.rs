//! The one driver of the property (fuzz) harnesses of every parser of outside input: trace
//! files, size/range/duration arguments, the exporter's requests and configuration. Built for
//! the crate's own tests and, with the `fuzzing` feature, for the CLI's tests.
//!
//! In the test suite a harness runs `cases` inputs (a few seconds); with `PAGEWISE_FUZZ_SECS=N`
//! it runs batches with fresh seeds for N seconds (each batch's seed is its number, so a
//! failure names a batch that can be run again) and says how many inputs it tried.

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::cell::Cell;

/// Inputs per batch of a long run.
const LONG_BATCH: u32 = 10_000;

/// What a case returns: `()` (a failing case panics) or proptest's `Result`.
pub trait CaseResult {
    /// As proptest's result.
    fn into_result(self) -> Result<(), TestCaseError>;
}

impl CaseResult for () {
    fn into_result(self) -> Result<(), TestCaseError> {
        Ok(())
    }
}

impl CaseResult for Result<(), TestCaseError> {
    fn into_result(self) -> Result<(), TestCaseError> {
        self
    }
}

/// Runs `test` over `strategy`: `cases` inputs, or batches for `PAGEWISE_FUZZ_SECS` seconds.
/// Panics (failing the test) with proptest's minimal failing input; returns the number of
/// inputs tried.
pub fn fuzz<S: Strategy, R: CaseResult>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> R,
) -> u64
where
    S::Value: std::fmt::Debug,
{
    let secs: Option<u64> = std::env::var("PAGEWISE_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok());
    let start = std::time::Instant::now();
    let tried = Cell::new(0u64);
    for batch in 0u64.. {
        let config = Config {
            cases: if secs.is_some() { LONG_BATCH } else { cases },
            failure_persistence: None,
            ..Config::default()
        };
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&batch.to_le_bytes());
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
        let mut runner = TestRunner::new_with_rng(config, rng);
        let r = runner.run(&strategy, |v| {
            tried.set(tried.get() + 1);
            test(v).into_result()
        });
        if let Err(e) = r {
            panic!("{name} (batch {batch}): {e}");
        }
        if secs.is_none_or(|s| start.elapsed().as_secs() >= s) {
            break;
        }
    }
    eprintln!(
        "fuzz {name}: {} inputs in {:.1} s, nothing found",
        tried.get(),
        start.elapsed().as_secs_f64()
    );
    tried.get()
}
