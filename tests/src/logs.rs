//! What the code under test logs, captured as text.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Every line logged at `INFO` or above on this thread while the guard of [`Logs::capture`]
/// lives, as the `fmt` subscriber writes it (no colours). Tasks must run on the capturing
/// thread (a current-thread runtime) for their lines to be seen.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Starts capturing on this thread until the guard drops.
    pub fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Forgets what was captured so far.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
