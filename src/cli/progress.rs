//! A progress line on stderr, fed by polling the library's atomic counters: redrawn in place
//! on a terminal (cut to its width, never wrapped), one line per second when asked for where
//! stderr is not a terminal (`copy --progress` in a pipe or a log), hidden otherwise.
//!
//! The ETA is shown only once the totals are final (the verb said it found everything); until
//! then the totals are marked as growing (`+`) and no ETA is guessed.

use super::render::bytes;
use pagewise_core::{sys, Progress};
use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// When the progress line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// Never.
    Off,
    /// When stderr is a terminal.
    Terminal,
    /// Always: redrawn on a terminal, one line per second elsewhere.
    Always,
}

/// The progress line of one verb: a thread drawing it until [`ProgressLine::finish`].
pub struct ProgressLine {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How fast the line is redrawn on a terminal, and written elsewhere.
const TTY_EVERY: Duration = Duration::from_millis(200);
const PIPE_EVERY: Duration = Duration::from_secs(1);
/// The rate is the bytes of the last this long (a steady figure, and one that follows
/// changes within seconds).
const RATE_WINDOW: Duration = Duration::from_secs(5);

impl ProgressLine {
    /// Starts polling `progress`, if stderr is a terminal and `enabled`.
    pub fn start(verb: &'static str, progress: Arc<Progress>, enabled: bool) -> Self {
        let show = if enabled { Show::Terminal } else { Show::Off };
        Self::start_as(verb, progress, show)
    }

    /// Starts polling `progress` as `show` says.
    pub fn start_as(verb: &'static str, progress: Arc<Progress>, show: Show) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tty = std::io::stderr().is_terminal();
        if show == Show::Off || (show == Show::Terminal && !tty) {
            return ProgressLine { stop, thread: None };
        }
        let s = stop.clone();
        // Named: it does no I/O, and tests tell it from the verb's threads (ionice).
        let thread = std::thread::Builder::new()
            .name("pw-progress".into())
            .spawn(move || {
                let every = if tty { TTY_EVERY } else { PIPE_EVERY };
                let mut line = Line::new(verb);
                // Short naps: `finish` must not wait out a whole period (a second in a pipe).
                let mut next = Instant::now() + every;
                while !s.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if now < next {
                        std::thread::sleep((next - now).min(Duration::from_millis(20)));
                        continue;
                    }
                    next = now + every;
                    let text = line.render(&progress, now);
                    let mut err = std::io::stderr().lock();
                    let _ = if tty {
                        let width = sys::terminal_columns(err.as_fd()).unwrap_or(80);
                        write!(err, "\r{}\x1b[K", cut(&text, usize::from(width) - 1))
                    } else {
                        writeln!(err, "{text}")
                    };
                    let _ = err.flush();
                }
                if tty {
                    let _ = write!(std::io::stderr(), "\r\x1b[K");
                } else {
                    // A log ends with where the verb got to (a run under a second has only this).
                    let text = line.render(&progress, Instant::now());
                    let _ = writeln!(std::io::stderr(), "{text}");
                }
            });
        ProgressLine {
            stop,
            thread: thread.ok(),
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

/// `text` cut to `width` characters (the terminal's: a wrapped line cannot be redrawn).
fn cut(text: &str, width: usize) -> &str {
    match text.char_indices().nth(width) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// What the line remembers between draws: when it started and recent byte counts (the rate).
struct Line {
    verb: &'static str,
    start: Instant,
    samples: VecDeque<(Instant, u64)>,
}

impl Line {
    fn new(verb: &'static str) -> Self {
        Line {
            verb,
            start: Instant::now(),
            samples: VecDeque::new(),
        }
    }

    /// The line for the counters now.
    fn render(&mut self, p: &Progress, now: Instant) -> String {
        let done = p.bytes.load(Ordering::Relaxed);
        let files = p.files.load(Ordering::Relaxed);
        let total = p.total_bytes.load(Ordering::Relaxed);
        let total_files = p.total_files.load(Ordering::Relaxed);
        let last = p.totals_final.load(Ordering::Relaxed);
        self.samples.push_back((now, done));
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW)
        {
            self.samples.pop_front();
        }
        let rate = match self.samples.front() {
            Some((t, b)) if now.duration_since(*t) >= Duration::from_millis(500) => {
                (done.saturating_sub(*b)) as f64 / now.duration_since(*t).as_secs_f64()
            }
            _ => 0.0,
        };
        let elapsed = clock(now.duration_since(self.start).as_secs());
        let speed = format!("{}/s", bytes(rate as u64));
        if total == 0 {
            return format!(
                "{} {} {files} files {speed} {elapsed}",
                self.verb,
                bytes(done)
            );
        }
        let grow = if last { "" } else { "+" };
        let pct = (done as f64 * 100.0 / total as f64).min(100.0);
        let eta = match (last, rate > 0.0) {
            (true, true) => format!(
                "ETA {}",
                clock((total.saturating_sub(done) as f64 / rate) as u64)
            ),
            (true, false) => "ETA -".into(),
            (false, _) => "ETA after planning".into(),
        };
        format!(
            "{} {}/{}{grow} {pct:.0}% {files}/{total_files}{grow} files {speed} {elapsed} {eta}",
            self.verb,
            bytes(done),
            bytes(total),
        )
    }
}

/// Seconds as `M:SS` or `H:MM:SS`.
fn clock(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagewise_core::Observer;

    #[test]
    fn no_eta_until_the_totals_are_final() {
        let p = Progress::default();
        let mut l = Line::new("copy");
        let t0 = Instant::now();
        p.planned(10, 1 << 30);
        p.add(1, 256 << 20);
        l.render(&p, t0);
        let s = l.render(&p, t0 + Duration::from_secs(1));
        assert!(
            s.contains("1.0 GiB+") && s.contains("ETA after planning"),
            "{s}"
        );
        p.add(1, 256 << 20);
        p.planned_all();
        let s = l.render(&p, t0 + Duration::from_secs(2));
        assert!(s.contains("50%") && s.contains("ETA 0:04"), "{s}");
        assert!(!s.contains('+'), "{s}");
    }

    #[test]
    fn lines_are_cut_to_the_terminal_not_wrapped() {
        assert_eq!(cut("abcdef", 3), "abc");
        assert_eq!(cut("ab", 3), "ab");
        assert_eq!(cut("ééé", 2), "éé");
        assert_eq!(clock(3725), "1:02:05");
        assert_eq!(clock(65), "1:05");
    }
}
