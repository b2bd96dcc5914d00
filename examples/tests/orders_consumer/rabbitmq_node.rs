//! A RabbitMQ node of the test's own, so it can be stopped and restarted without disturbing
//! the shared server at 127.0.0.1:5672 the other tests use: `rabbitmq-server` in the
//! foreground, its own node name, AMQP and distribution ports on loopback, its data, logs,
//! configuration, plugins (none) and Erlang cookie in a directory of its own. Starting takes
//! about 10 s, a restart on its data about 7 s. On drop, the node is killed and its directory
//! removed, whatever the test's outcome.

use std::fs::{File, OpenOptions};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::harness::{STEP, unique};

/// The server's own script. Debian's `/usr/sbin/rabbitmq-server` runs it through `su` as the
/// `rabbitmq` user, in `/var/lib/rabbitmq`, with its output in `/var/log/rabbitmq`; elsewhere
/// `rabbitmq-server` on `PATH` is the script itself.
const SCRIPT: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const POLL: Duration = Duration::from_millis(100);

pub(crate) struct PrivateRabbit {
    /// Where it listens for AMQP.
    pub(crate) addr: SocketAddr,
    node: String,
    dist_port: u16,
    dir: PathBuf,
    /// The script, leader of a process group of its own (with the Erlang VM) while it runs.
    child: Option<Child>,
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

impl PrivateRabbit {
    /// Makes its directory and starts it; waits until it accepts connections.
    pub(crate) fn start() -> Self {
        let name = unique("idem-rabbit-");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&name);
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(dir.join(sub)).expect("the node's directory");
        }
        let port = free_port();
        let dist_port = std::iter::repeat_with(free_port)
            .find(|other| *other != port)
            .expect("a second free port");
        let files = [
            ("enabled_plugins", "[].\n".to_owned()),
            // Read instead of /etc/rabbitmq/rabbitmq-env.conf (the shared node's name and port).
            ("rabbitmq-env.conf", String::new()),
            (
                "rabbitmq.conf",
                format!("listeners.tcp.1 = 127.0.0.1:{port}\n"),
            ),
        ];
        for (file, text) in files {
            std::fs::write(dir.join(file), text).expect("the node's configuration");
        }
        let mut node = Self {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            node: format!("{name}@localhost"),
            dist_port,
            dir,
            child: None,
        };
        node.up();
        node
    }

    /// Its `BROKER_URL` (`guest` may log in: the connections come from loopback).
    pub(crate) fn url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.addr)
    }

    /// Starts the node on its directory (what it stored before is read back) and waits until
    /// it accepts connections.
    pub(crate) fn up(&mut self) {
        assert!(self.child.is_none(), "the node is running already");
        let script = if Path::new(SCRIPT).exists() {
            SCRIPT
        } else {
            "rabbitmq-server"
        };
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.out"))
            .expect("the node's output file");
        let mut command = Command::new(script);
        for (var, _) in std::env::vars_os() {
            if var.to_string_lossy().starts_with("RABBITMQ_") {
                command.env_remove(var);
            }
        }
        let dir = |sub: &str| self.dir.join(sub);
        command
            // The Erlang cookie is made there, and read there on restart.
            .env("HOME", dir("home"))
            .env("RABBITMQ_CONF_ENV_FILE", dir("rabbitmq-env.conf"))
            .env("RABBITMQ_CONFIG_FILE", dir("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", dir("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir("log"))
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.addr.port().to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            // Erlang distribution on loopback only, and epmd too if this node has to start it.
            .env("ERL_FLAGS", "-kernel inet_dist_use_interface {127,0,0,1}")
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the output file"))
            .stderr(log)
            .process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("rabbitmq-server ({script}) is needed: {e}"));
        // Held before any wait, so a failed start is killed on drop too.
        self.child = Some(child);
        let deadline = Instant::now() + STEP;
        while TcpStream::connect(self.addr).is_err() {
            let running = self.child.as_mut().expect("the node");
            if let Some(status) = running.try_wait().expect("wait for rabbitmq-server") {
                panic!("rabbitmq-server exited ({status}):\n{}", self.output());
            }
            assert!(
                Instant::now() < deadline,
                "rabbitmq-server did not start in {STEP:?}:\n{}",
                self.output()
            );
            std::thread::sleep(POLL);
        }
    }

    /// SIGTERM, which the script passes to the Erlang VM: the node stops as `rabbitmqctl stop`
    /// stops it, closing its clients' connections (what they held unacked goes back to its
    /// queue) and keeping its durable queues and their persistent messages on disk. Waits until
    /// it has exited.
    pub(crate) fn down(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        signal(&child.id().to_string(), "-TERM");
        let deadline = Instant::now() + STEP;
        while child
            .try_wait()
            .expect("wait for rabbitmq-server")
            .is_none()
        {
            if Instant::now() >= deadline {
                signal(&group(&child), "-KILL");
                let _ = child.wait();
                panic!(
                    "rabbitmq-server did not stop in {STEP:?}:\n{}",
                    self.output()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGKILL to the script and the Erlang VM, as a crashed broker or host: nothing is closed
    /// or flushed; what the node had confirmed is on disk. Waits until it has exited.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&group(&child), "-KILL");
            let _ = child.wait();
        }
    }

    /// What the node printed (its start banner, or why it could not start).
    fn output(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(self.dir.join("server.out")) {
            let _ = std::io::Read::read_to_string(&mut file, &mut text);
        }
        text
    }
}

/// Sends `signal` (`-TERM`, `-KILL`) to `pid`, or to the process group `-pid`.
fn signal(pid: &str, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, "--", pid])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The process group `child` leads: the script and the Erlang VM it started.
fn group(child: &Child) -> String {
    format!("-{}", child.id())
}

impl Drop for PrivateRabbit {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
