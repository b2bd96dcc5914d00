//! What the code under test logs, captured as text.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use tracing::Dispatch;
use tracing::subscriber::NoSubscriber;

/// Every line logged at `INFO` or above on this thread while the guard of [`Logs::capture`]
/// lives, as the `fmt` subscriber writes it (no colours). Tasks must run on the capturing
/// thread (a current-thread runtime) for their lines to be seen.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Starts capturing on this thread until the guard drops.
    pub fn capture(&self) -> tracing::subscriber::DefaultGuard {
        // While one dispatcher alone is registered, tracing-core asks only the current thread's
        // whether a callsite is wanted, and caches the answer for every thread: another test's
        // thread, which captures nothing, reaching a callsite first would silence it here too.
        // A second, silent dispatcher kept for the whole process has it ask each registered one.
        static SILENT: OnceLock<Dispatch> = OnceLock::new();
        SILENT.get_or_init(|| Dispatch::new(NoSubscriber::default()));
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

#[cfg(test)]
mod tests {
    use super::Logs;

    fn say() {
        tracing::error!("reached");
    }

    /// Tests run on several threads of one process: a line logged on the capturing thread is
    /// seen even when a thread that captures nothing reached the same callsite first.
    #[test]
    fn a_callsite_another_thread_reached_first_is_still_captured() {
        let logs = Logs::default();
        let guard = logs.capture();
        std::thread::spawn(say).join().unwrap();
        say();
        drop(guard);
        assert!(logs.text().contains("reached"), "{:?}", logs.text());
    }
}
