//! A server a test starts that cannot outlive the test process: [`Watched`] runs it under a
//! watchdog `sh` that stops it when the test process closes the shell's standard input, on
//! drop or when the process exits, however it exits (the kernel closes the pipe then too), so no
//! server is left running after `cargo test`.

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::db::unique_name;

/// A free TCP port on 127.0.0.1 for a server to listen on.
///
/// # Panics
/// When the system has none.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A new, empty directory under the system's temporary one for a server named `what`: what
/// [`Watched::spawn`] removes once the server has stopped.
///
/// # Panics
/// When it cannot be created.
pub fn server_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{}-{what}", unique_name()));
    std::fs::create_dir_all(&dir).expect("a directory for the server");
    dir
}

/// A running server, stopped (and its directory removed) on drop or when the test process dies.
#[derive(Debug)]
pub struct Watched {
    dir: PathBuf,
    /// Closing it (drop, or the test process dying) makes the watchdog shell stop the server.
    watchdog: Option<ChildStdin>,
    shell: Child,
}

impl Watched {
    /// Runs `program` with `args`, its standard output and error appended to `dir/server.log`;
    /// `dir` (a [`server_dir`]) is removed once the server has stopped.
    ///
    /// # Panics
    /// When `sh` cannot be run.
    pub fn spawn<I, S>(program: impl AsRef<OsStr>, args: I, dir: &Path) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut shell = Command::new("sh")
            .arg("-c")
            // The server runs until the shell's stdin closes; then its directory goes too.
            .arg(
                r#"dir=$1; shift; "$@" >>"$dir/server.log" 2>&1 & pid=$!; read _; kill $pid; wait $pid; rm -rf "$dir""#,
            )
            .arg("sh")
            .arg(dir)
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run sh");
        let watchdog = shell.stdin.take();
        Self {
            dir: dir.to_owned(),
            watchdog,
            shell,
        }
    }

    /// What the server has written so far to `dir/server.log`: for a panic's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        drop(self.watchdog.take());
        let _ = self.shell.wait();
    }
}
