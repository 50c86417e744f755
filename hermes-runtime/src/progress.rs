//! Progress of `process` and `evaluate`: an indicatif bar on a terminal (done/total, mean
//! reward, rate, ETA), plain lines when stderr is not a terminal (at every 10 % and at least
//! every 10 s), and a tracing writer that keeps log lines from tearing the bar.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bar currently drawn, so log lines can be printed above it.
static ACTIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Runs `f` with the active progress bar (if any) hidden.
fn suspended<R>(f: impl FnOnce() -> R) -> R {
    let bar = ACTIVE.lock().ok().and_then(|a| a.clone());
    match bar {
        Some(bar) => bar.suspend(f),
        None => f(),
    }
}

/// The tracing writer of the binaries: stderr, with the progress bar hidden while a log
/// line is written.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // One call per log event: secrets (URL credentials, known values) never reach stderr,
        // nor control characters of a message (tracing escapes ESC and BEL in field values;
        // `\r` and the rest would still rewrite the line). ESC stays: the formatter's colours.
        let text = String::from_utf8_lossy(buf);
        let text = crate::diagnostics::printable_keeping(&text, &['\n', '\t', '\x1b']);
        let clean = crate::config::redact::redact_text(&text);
        suspended(|| std::io::stderr().write_all(clean.as_bytes())).map(|()| buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LogWriter
    }
}

enum Output {
    Bar(ProgressBar),
    Plain(Mutex<Box<dyn Write + Send>>),
}

struct State {
    done: u64,
    reward_sum: f64,
    rewards: u64,
    printed_decile: u64,
    last_line: Instant,
    started: Instant,
}

/// Progress of one run.
pub struct Progress {
    label: &'static str,
    unit: &'static str,
    total: u64,
    output: Output,
    state: Mutex<State>,
}

/// `12s`, `3m04s`, `1h02m`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

impl Progress {
    /// A bar on stderr when it is a terminal, plain lines on stderr otherwise.
    pub fn new(label: &'static str, unit: &'static str, total: u64) -> Self {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(&format!(
                "{{prefix}} [{{bar:30.cyan/blue}}] {{pos}}/{{len}} {unit} | {{msg}} | {{per_sec}} | ETA {{eta}}"
            ))
            .expect("valid progress template")
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(label);
            bar.set_message("mean reward -");
            bar.enable_steady_tick(Duration::from_millis(200));
            if let Ok(mut active) = ACTIVE.lock() {
                *active = Some(bar.clone());
            }
            Self::with_output(label, unit, total, Output::Bar(bar))
        } else {
            Self::plain(label, unit, total, Box::new(LogWriter))
        }
    }

    /// Plain progress lines written to `out`.
    pub fn plain(
        label: &'static str,
        unit: &'static str,
        total: u64,
        out: Box<dyn Write + Send>,
    ) -> Self {
        Self::with_output(label, unit, total, Output::Plain(Mutex::new(out)))
    }

    fn with_output(label: &'static str, unit: &'static str, total: u64, output: Output) -> Self {
        let now = Instant::now();
        Progress {
            label,
            unit,
            total,
            output,
            state: Mutex::new(State {
                done: 0,
                reward_sum: 0.0,
                rewards: 0,
                printed_decile: 0,
                last_line: now,
                started: now,
            }),
        }
    }

    /// One more unit (group or item) finished with these rewards.
    pub fn advance(&self, rewards: &[f64]) {
        let mut s = self.state.lock().expect("progress lock poisoned");
        s.done += 1;
        s.reward_sum += rewards.iter().sum::<f64>();
        s.rewards += rewards.len() as u64;
        let mean = s.reward_sum / s.rewards.max(1) as f64;
        match &self.output {
            Output::Bar(bar) => {
                bar.set_message(format!("mean reward {mean:.3}"));
                bar.set_position(s.done);
            }
            Output::Plain(out) => {
                let decile = s.done * 10 / self.total.max(1);
                let due =
                    decile > s.printed_decile || s.last_line.elapsed() >= Duration::from_secs(10);
                if due && s.done < self.total {
                    s.printed_decile = decile;
                    s.last_line = Instant::now();
                    let elapsed = s.started.elapsed().as_secs_f64();
                    let rate = s.done as f64 / elapsed.max(1e-9);
                    let left = self.total.saturating_sub(s.done) as f64 / rate.max(1e-9);
                    let line = format!(
                        "{}: {}/{} {} ({}%) | mean reward {mean:.3} | {rate:.2} {}/s | ETA {}\n",
                        self.label,
                        s.done,
                        self.total,
                        self.unit,
                        s.done * 100 / self.total.max(1),
                        self.unit,
                        human_duration(Duration::from_secs_f64(left))
                    );
                    let _ = out
                        .lock()
                        .expect("progress output lock poisoned")
                        .write_all(line.as_bytes());
                }
            }
        }
    }

    /// Ends the bar (or prints the final plain line).
    pub fn finish(&self) {
        let s = self.state.lock().expect("progress lock poisoned");
        let mean = s.reward_sum / s.rewards.max(1) as f64;
        match &self.output {
            Output::Bar(bar) => {
                bar.finish_with_message(format!("mean reward {mean:.3}"));
                if let Ok(mut active) = ACTIVE.lock() {
                    *active = None;
                }
            }
            Output::Plain(out) => {
                let elapsed = s.started.elapsed();
                let rate = s.done as f64 / elapsed.as_secs_f64().max(1e-9);
                let line = format!(
                    "{}: {}/{} {} ({}%) | mean reward {mean:.3} | {rate:.2} {}/s | done in {}\n",
                    self.label,
                    s.done,
                    self.total,
                    self.unit,
                    s.done * 100 / self.total.max(1),
                    self.unit,
                    human_duration(elapsed)
                );
                let _ = out
                    .lock()
                    .expect("progress output lock poisoned")
                    .write_all(line.as_bytes());
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Output::Bar(bar) = &self.output {
            if !bar.is_finished() {
                bar.abandon();
            }
            if let Ok(mut active) = ACTIVE.lock() {
                *active = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn plain_lines_at_every_tenth_and_at_the_end() {
        let sink = Sink::default();
        let p = Progress::plain("process", "groups", 20, Box::new(sink.clone()));
        for i in 0..20 {
            p.advance(&[f64::from(i % 2)]);
        }
        p.finish();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 10, "{text}");
        assert!(lines[0].starts_with("process: 2/20 groups (10%) | mean reward 0.500 | "));
        assert!(lines[9].starts_with("process: 20/20 groups (100%) | mean reward 0.500 | "));
        assert!(lines[9].contains("done in"));
        assert_eq!(human_duration(Duration::from_secs(184)), "3m04s");
    }
}
