//! moto, the S3 and DynamoDB protocol server that the tests of those stores, and of the examples
//! and the `idem` command on them, run against; and cargo-lambda, whose Lambda emulator runs
//! `payments-lambda`'s end-to-end test. Nothing is started by hand:
//!
//! - [`moto_endpoint`] is the server's URL. The first test of a process that asks for it starts
//!   it on a free loopback port: one server for the whole test binary, stopped when the process
//!   exits, however it exits ([`Watched`]). `JOBS_TEST_S3_ENDPOINT` names a server of one's own
//!   instead.
//! - [`cargo_lambda`] is the `cargo-lambda` executable (`CARGO_LAMBDA` names another).
//! - Both come from a virtualenv under `target/` ([`VENV`]), where the first test that needs them
//!   installs [`MOTO_VERSION`] and [`CARGO_LAMBDA_VERSION`] from PyPI if they are not there
//!   yet: once, under a lock file, whatever number of test processes run at once. What cannot be
//!   installed or started fails the test with the command that shows why; no test is skipped.
//!
//! The server runs through `.ci/moto_server.py`: moto's own server checks a conditional write's
//! precondition and then writes without a lock, so two racing writers can both win, where S3 and
//! DynamoDB let one. The launcher handles one request at a time, and the race tests on moto then
//! prove what they claim.

use std::ffi::OsStr;
use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::watched::{Watched, free_port, server_dir};

/// The moto release the tests run against.
pub const MOTO_VERSION: &str = "5.2.5";
/// The cargo-lambda release whose emulator runs `payments-lambda`'s test.
pub const CARGO_LAMBDA_VERSION: &str = "1.9.2";
/// The virtualenv both are installed in, under the workspace's root.
pub const VENV: &str = "target/moto-venv";

/// How long moto may take to listen once started (its imports are slow on a busy machine).
const START: Duration = Duration::from_secs(90);

/// The moto server's URL: `JOBS_TEST_S3_ENDPOINT`, or the server of this test process, started
/// (and its tools installed) on first use.
///
/// # Panics
/// When moto cannot be installed or does not start, with the command that shows why.
pub fn moto_endpoint() -> String {
    if let Some(url) = std::env::var("JOBS_TEST_S3_ENDPOINT")
        .ok()
        .filter(|url| !url.is_empty())
    {
        return url;
    }
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(Moto::start).url.clone()
}

/// The `cargo-lambda` executable: `CARGO_LAMBDA`, or the pinned one of [`VENV`], installed on
/// first use.
///
/// # Panics
/// When it is not installed and cannot be, with the command that shows why.
pub fn cargo_lambda() -> PathBuf {
    match std::env::var_os("CARGO_LAMBDA").filter(|path| !path.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => venv().join("bin/cargo-lambda"),
    }
}

/// The workspace's root, where `target/` and `.ci/` are.
fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the workspace")
}

/// The command that installs the tools by hand, from the workspace's root: what a panic names.
fn install_command() -> String {
    format!(
        "python3 -m venv {VENV} && {VENV}/bin/pip install 'moto[server]=={MOTO_VERSION}' \
         'cargo-lambda=={CARGO_LAMBDA_VERSION}'"
    )
}

/// [`VENV`], with the pinned tools installed: checked once per process, installed under a lock
/// file so that test processes running at once install them once.
fn venv() -> &'static Path {
    static VENV_DIR: OnceLock<PathBuf> = OnceLock::new();
    VENV_DIR.get_or_init(|| {
        let venv = workspace().join(VENV);
        let parent = venv.parent().expect("the virtualenv's parent");
        std::fs::create_dir_all(parent).expect("create target/");
        let lock = File::create(parent.join("moto-venv.lock")).expect("the install's lock file");
        lock.lock().expect("lock the install");
        if !installed(&venv) {
            install(&venv);
        }
        venv
    })
}

/// Whether the virtualenv has the pinned versions of both tools.
fn installed(venv: &Path) -> bool {
    let check = format!(
        "import importlib.metadata as m, sys; sys.exit(m.version('moto') != '{MOTO_VERSION}' \
         or m.version('cargo-lambda') != '{CARGO_LAMBDA_VERSION}')"
    );
    Command::new(venv.join("bin/python"))
        .args(["-c", &check])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Creates the virtualenv and installs the pinned tools in it.
fn install(venv: &Path) {
    eprintln!(
        "installing moto {MOTO_VERSION} and cargo-lambda {CARGO_LAMBDA_VERSION} into {VENV} \
         (once)"
    );
    let moto = format!("moto[server]=={MOTO_VERSION}");
    let lambda = format!("cargo-lambda=={CARGO_LAMBDA_VERSION}");
    run(Command::new("python3").args([OsStr::new("-m"), "venv".as_ref(), venv.as_os_str()]));
    run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", &moto, &lambda]));
}

/// Runs one step of the install; a failure panics with its output and the command to run.
fn run(command: &mut Command) {
    let output = command.output();
    let failure = match &output {
        Ok(output) if output.status.success() => return,
        Ok(output) => String::from_utf8_lossy(&output.stderr).into_owned(),
        Err(e) => e.to_string(),
    };
    panic!(
        "installing the test tools failed ({command:?}: {failure}); from the workspace's root, \
         run `{}` to see why (python3 needs its venv module: `apt-get install python3-venv`), \
         or set JOBS_TEST_S3_ENDPOINT to a moto server of your own",
        install_command()
    );
}

/// The moto server of this test process.
struct Moto {
    url: String,
    /// Stops the server when the process exits.
    _server: Watched,
}

impl Moto {
    /// Starts moto through `.ci/moto_server.py` on a free loopback port and waits until it
    /// listens.
    fn start() -> Self {
        let python = venv().join("bin/python");
        let launcher = workspace().join(".ci/moto_server.py");
        let port = free_port();
        let port_arg = port.to_string();
        let args = [launcher.as_os_str(), "-H".as_ref(), "127.0.0.1".as_ref()];
        let args = args.into_iter().chain(["-p".as_ref(), port_arg.as_ref()]);
        let server = Watched::spawn(&python, args, &server_dir("moto"));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + START;
        while TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto did not listen on {addr} within {START:?}: {}\nrun `{} {} -H 127.0.0.1 -p \
                 {port}` to see why",
                server.log(),
                python.display(),
                launcher.display(),
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            url: format!("http://{addr}"),
            _server: server,
        }
    }
}
