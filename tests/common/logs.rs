//! Log lines captured from `tracing` on the test's thread.

use std::sync::{Arc, Mutex};

/// Log lines written while the guard lives (this thread only: the tests run on tokio's
/// current-thread runtime).
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Captures INFO and above written on this thread until the guard drops.
    pub fn capture(&self) -> tracing::subscriber::DefaultGuard {
        // A global subscriber that wants INFO (and writes nowhere): without one, a callsite
        // first reached by a test without capture, while no scoped subscriber exists, caches
        // "never interested", and a capturing test racing with that rebuild lost its line.
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let quiet = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::INFO)
                .with_writer(std::io::sink)
                .finish();
            let _ = tracing::subscriber::set_global_default(quiet);
        });
        let sink = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// The captured lines containing `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
