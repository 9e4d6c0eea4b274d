//! A progress line on stderr, fed by polling the library's atomic counters; hidden when stderr
//! is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use pagewise_core::Progress;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The progress line of one verb: a thread drawing it until [`ProgressLine::finish`].
pub struct ProgressLine {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProgressLine {
    /// Starts polling `progress` every 100 ms, if stderr is a terminal and `enabled`.
    pub fn start(verb: &'static str, progress: Arc<Progress>, enabled: bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        if !enabled || !std::io::stderr().is_terminal() {
            return ProgressLine { stop, thread: None };
        }
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {prefix} {msg} {bytes} ({binary_bytes_per_sec}) {elapsed}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_prefix(verb);
            let mut sized = false;
            while !s.load(Ordering::Relaxed) {
                show(&bar, &progress, &mut sized);
                std::thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        ProgressLine {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops drawing and clears the line.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Shows the counters once: a spinner with files and bytes while the total is unknown, then a
/// bar towards the total (`sized` remembers the switch).
fn show(bar: &ProgressBar, progress: &Progress, sized: &mut bool) {
    let files = progress.files.load(Ordering::Relaxed);
    let total = progress.total_bytes.load(Ordering::Relaxed);
    if total > 0 {
        if !*sized {
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {bytes}/{total_bytes} {msg} {binary_bytes_per_sec} ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            *sized = true;
        }
        bar.set_length(total);
        let tf = progress.total_files.load(Ordering::Relaxed);
        bar.set_message(format!("{files}/{tf} files"));
    } else {
        bar.set_message(format!("{files} files"));
    }
    bar.set_position(progress.bytes.load(Ordering::Relaxed));
    bar.tick();
}
