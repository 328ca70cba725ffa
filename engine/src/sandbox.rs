//! The sandbox that runs model-written programs for `code_tests` graders: one bubblewrap
//! (Debian's `bubblewrap`) process per run, with every namespace of its own (no network, its own
//! processes, mounts, IPC and hostname), all capabilities dropped, a clean environment, only
//! `/usr` mounted and read-only, and a private, size-limited `/tmp`. Inside, `prlimit` sets the
//! CPU, memory, process, file-size and core limits before the interpreter starts; the wall
//! clock and the output size are enforced from outside.
//!
//! Started by root, a sandbox still has root's file access through the outer uid, so the
//! launcher first becomes an unprivileged uid of its own (one per pool slot, so one run's
//! processes never count against another's limit). Where no sandbox can run, code graders are
//! refused, never run unsandboxed.
//!
//! A pool bounds how many runs go at once, apart from generation: workers hand answers over as
//! they arrive and wait only for their own tests.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arbiter_domain::grading::code_tests::{
    classify, CodeOutcome, ProcessEnd, SandboxLimits, SandboxRuntime,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::{OnceCell, Semaphore};

/// The file descriptor bubblewrap reports the child's start and exit on.
const STATUS_FD: i32 = 3;
/// The first uid the pool's slots run as when the server runs as root (far above system and
/// user accounts, so no real account's files or processes are shared).
const FIRST_SLOT_UID: u32 = 2_000_000_000;

/// Runs the program read from stdin as HumanEval's harness does (`exec` with fresh globals, so
/// `if __name__ == "__main__":` blocks do not run), with its source registered so tracebacks
/// quote the failing line; an early `exit()` is a failure, not a pass.
pub const RUNNER: &str = r#"import linecache, sys, traceback
source = sys.stdin.read()
sys.stdin = open("/dev/null")
linecache.cache["program.py"] = (len(source), None, source.splitlines(True), "program.py")
try:
    exec(compile(source, "program.py", "exec"), {})
except SystemExit as stop:
    print("SystemExit: the program exited (code %r) before its tests finished" % (stop.code,), file=sys.stderr)
    sys.exit(1)
except BaseException:
    traceback.print_exc()
    sys.exit(1)
"#;

/// Where the sandbox's tools are and how many runs go at once.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// The bubblewrap binary (`bwrap`, found on `PATH`).
    pub bubblewrap: PathBuf,
    /// The interpreter, which must live under `/usr` (the only tree the sandbox sees).
    pub python: PathBuf,
    /// Runs at once.
    pub concurrency: usize,
}

impl SandboxConfig {
    /// The configuration from the environment: `ARBITER_SANDBOX_BWRAP`,
    /// `ARBITER_SANDBOX_PYTHON` (default `/usr/bin/python3`) and `ARBITER_SANDBOX_CONCURRENCY`
    /// (default: the machine's cores).
    pub fn from_env() -> SandboxConfig {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        SandboxConfig {
            bubblewrap: var("ARBITER_SANDBOX_BWRAP").map_or_else(|| "bwrap".into(), PathBuf::from),
            python: var("ARBITER_SANDBOX_PYTHON")
                .map_or_else(|| "/usr/bin/python3".into(), PathBuf::from),
            concurrency: var("ARBITER_SANDBOX_CONCURRENCY")
                .and_then(|value| value.parse().ok())
                .filter(|&count| count > 0)
                .unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
                }),
        }
    }
}

/// A ready sandbox pool.
pub struct Sandbox {
    config: SandboxConfig,
    runtime: SandboxRuntime,
    permits: Semaphore,
    /// Uids free for a run (as root); empty when the server is not root.
    free_uids: Mutex<Vec<u32>>,
    as_root: bool,
}

/// What one run printed and how it ended.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub outcome: CodeOutcome,
    pub stdout: String,
    pub duration: Duration,
}

impl Sandbox {
    /// The process's sandbox, set up on first use from the environment; the error says why
    /// none can run here.
    pub async fn shared() -> Result<Arc<Sandbox>, String> {
        static SHARED: OnceCell<Result<Arc<Sandbox>, String>> = OnceCell::const_new();
        SHARED
            .get_or_init(|| async {
                Sandbox::start(SandboxConfig::from_env())
                    .await
                    .map(Arc::new)
            })
            .await
            .clone()
    }

    /// Checks that the sandbox runs here and reads the versions it runs with.
    pub async fn start(config: SandboxConfig) -> Result<Sandbox, String> {
        if !config.python.starts_with("/usr/") {
            return Err(format!(
                "the interpreter {} is outside /usr, the only tree the sandbox mounts \
                 (set ARBITER_SANDBOX_PYTHON)",
                config.python.display()
            ));
        }
        let version = std::process::Command::new(&config.bubblewrap)
            .arg("--version")
            .output()
            .map_err(|err| {
                format!(
                    "bubblewrap (`{}`) cannot be run: {err}; install Debian's `bubblewrap` \
                     package or set ARBITER_SANDBOX_BWRAP",
                    config.bubblewrap.display()
                )
            })?;
        let isolation = String::from_utf8_lossy(&version.stdout).trim().to_string();
        // SAFETY: getuid has no preconditions and cannot fail.
        let as_root = unsafe { libc::getuid() } == 0;
        let slots = config.concurrency.max(1);
        let mut sandbox = Sandbox {
            runtime: SandboxRuntime {
                isolation,
                interpreter: String::new(),
            },
            permits: Semaphore::new(slots),
            free_uids: Mutex::new(if as_root {
                (0..slots as u32)
                    .map(|slot| FIRST_SLOT_UID + slot)
                    .collect()
            } else {
                Vec::new()
            }),
            as_root,
            config,
        };
        let probe = sandbox
            .run(
                "import sys\nprint('Python ' + sys.version.split()[0])\n",
                &SandboxLimits::default(),
            )
            .await;
        match probe.outcome {
            CodeOutcome::Passed => {
                sandbox.runtime.interpreter = probe.stdout.trim().to_string();
                Ok(sandbox)
            }
            CodeOutcome::SandboxError { reason } => Err(reason),
            other => Err(format!(
                "the sandbox's interpreter did not start cleanly: {other:?}"
            )),
        }
    }

    /// The isolation and interpreter versions, as manifests freeze them.
    pub fn runtime(&self) -> &SandboxRuntime {
        &self.runtime
    }

    /// Runs one program to its outcome, waiting for a free slot first.
    pub async fn run(&self, program: &str, limits: &SandboxLimits) -> RunReport {
        let _permit = self
            .permits
            .acquire()
            .await
            .expect("the semaphore is never closed");
        let uid = if self.as_root {
            self.free_uids.lock().ok().and_then(|mut uids| uids.pop())
        } else {
            None
        };
        let report = self.run_as(uid, program, limits).await;
        if let Some(uid) = uid {
            if let Ok(mut uids) = self.free_uids.lock() {
                uids.push(uid);
            }
        }
        report
    }

    async fn run_as(&self, uid: Option<u32>, program: &str, limits: &SandboxLimits) -> RunReport {
        let started = Instant::now();
        let report = |outcome: CodeOutcome, stdout: String| RunReport {
            outcome,
            stdout,
            duration: started.elapsed(),
        };
        let not_started = |reason: String| {
            report(
                CodeOutcome::SandboxError {
                    reason: format!("the sandbox could not start: {reason}"),
                },
                String::new(),
            )
        };
        let (status_read, status_write) = match std::io::pipe() {
            Ok(pipe) => pipe,
            Err(err) => return not_started(format!("no pipe for its status: {err}")),
        };
        let mut command = self.command(limits);
        if let Some(uid) = uid {
            command.uid(uid).gid(uid);
        }
        let status_fd = OwnedFd::from(status_write);
        let raw_status_fd = status_fd.as_raw_fd();
        // SAFETY: between fork and exec the closure only calls dup2 and fcntl, which are
        // async-signal-safe, on a descriptor that stays open until the child has spawned.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(raw_status_fd, STATUS_FD) < 0
                    || libc::fcntl(STATUS_FD, libc::F_SETFD, 0) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => return not_started(err.to_string()),
        };
        drop(status_fd);
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let cap = limits.output_kib as usize * 1024;
        let source = program.to_string();
        let feed = async move {
            // A program that never reads its input closes the pipe early; that is not an error.
            let _ = stdin.write_all(source.as_bytes()).await;
            drop(stdin);
        };
        let wall = Duration::from_secs(u64::from(limits.wall_seconds));
        let finished = tokio::time::timeout(wall, async {
            let ((), out, err) =
                tokio::join!(feed, read_capped(stdout, cap), read_capped(stderr, cap));
            (out, err)
        })
        .await;
        let end = match &finished {
            Err(_) => Some(ProcessEnd::WallTimeout),
            Ok(((_, true), _) | (_, (_, true))) => Some(ProcessEnd::OutputLimit),
            Ok(_) => None,
        };
        if end.is_some() {
            // Killing bubblewrap kills the sandbox: its first process dies with its parent, and
            // the rest of the process namespace with that.
            let _ = child.start_kill();
        }
        let exited = child.wait().await.ok().and_then(|status| {
            use std::os::unix::process::ExitStatusExt;
            status
                .code()
                .or_else(|| status.signal().map(|signal| 128 + signal))
        });
        let (stdout, stderr) = match finished {
            Ok(((out, _), (err, _))) => (out, err),
            Err(_) => (Vec::new(), Vec::new()),
        };
        let stderr = String::from_utf8_lossy(&stderr).into_owned();
        // Bubblewrap exits with its program's code (128 + n for signal n); it says on the status
        // descriptor that the program started, so its own failure to set up is told apart.
        // A program can only add to what that descriptor says, never take the start back.
        let started = child_started(status_read).await;
        let end = end.unwrap_or_else(|| match (started, exited) {
            (true, Some(code)) => ProcessEnd::Exited(code),
            (true, None) => ProcessEnd::NotStarted("the sandbox's exit status was lost".into()),
            (false, _) => ProcessEnd::NotStarted(format!(
                "the sandbox could not start: {}",
                stderr.trim().chars().take(500).collect::<String>()
            )),
        });
        report(
            classify(&end, &stderr, limits),
            String::from_utf8_lossy(&stdout).into_owned(),
        )
    }

    /// The bubblewrap command for one run under `limits`.
    fn command(&self, limits: &SandboxLimits) -> Command {
        let mut command = Command::new(&self.config.bubblewrap);
        let temp_bytes = u64::from(limits.temp_mib) * 1024 * 1024;
        let memory_bytes = u64::from(limits.memory_mib) * 1024 * 1024;
        command
            .args(["--unshare-all", "--die-with-parent", "--new-session"])
            .args(["--cap-drop", "ALL", "--clearenv"])
            .args(["--ro-bind", "/usr", "/usr"])
            .args(["--symlink", "usr/lib", "/lib"])
            .args(["--symlink", "usr/lib64", "/lib64"])
            .args(["--symlink", "usr/bin", "/bin"])
            .args(["--proc", "/proc", "--dev", "/dev"])
            .args(["--size", &temp_bytes.to_string(), "--tmpfs", "/tmp"])
            .args(["--chdir", "/tmp", "--hostname", "sandbox"])
            .args([
                "--setenv",
                "PATH",
                "/usr/bin:/bin",
                "--setenv",
                "HOME",
                "/tmp",
            ])
            .args(["--setenv", "LANG", "C.UTF-8"])
            .args(["--json-status-fd", &STATUS_FD.to_string(), "--"])
            .arg("/usr/bin/prlimit")
            // The soft limit sends SIGXCPU, which says "CPU time"; the hard one a second later
            // is SIGKILL, which would not.
            .arg(format!(
                "--cpu={}:{}",
                limits.cpu_seconds,
                limits.cpu_seconds + 1
            ))
            .arg(format!("--as={memory_bytes}"))
            .arg(format!("--nproc={}", limits.processes))
            .arg(format!("--fsize={temp_bytes}"))
            .args(["--core=0", "--"])
            .arg(&self.config.python)
            .args(["-I", "-c", RUNNER])
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }
}

/// Reads a stream to its end, keeping at most `cap` bytes; `true` when it had more.
async fn read_capped(mut stream: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return (kept, false),
            Ok(read) => {
                if kept.len() + read > cap {
                    kept.extend_from_slice(&buffer[..cap - kept.len()]);
                    return (kept, true);
                }
                kept.extend_from_slice(&buffer[..read]);
            }
        }
    }
}

/// Whether bubblewrap reported starting its program (`{"child-pid": …}` on its status
/// descriptor).
async fn child_started(pipe: std::io::PipeReader) -> bool {
    tokio::task::spawn_blocking(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::Read::take(pipe, 64 * 1024), &mut text);
        text.contains("\"child-pid\"")
    })
    .await
    .unwrap_or(false)
}
