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

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arbiter_domain::grading::code_tests::{
    classify, CodeOutcome, ProcessEnd, RunFacts, SandboxLimits, SandboxRuntime,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::{OnceCell, Semaphore};

/// The first uid the pool's slots run as when the server runs as root (far above system and
/// user accounts, so no real account's files or processes are shared).
const FIRST_SLOT_UID: u32 = 2_000_000_000;

/// Runs the program read from stdin as HumanEval's harness does (`exec` with fresh globals, so
/// `if __name__ == "__main__":` blocks do not run), with its source registered so tracebacks
/// quote the failing line. The first line of stdin is a per-run nonce: the runner writes
/// "<nonce> started" before the program and "<nonce> passed" only once `exec` has returned, so
/// a program that exits early (`exit()`, `os._exit(0)`, a patched `sys.exit`) never passes, as
/// in HumanEval's harness. It guards against exits, not against a program written to read the
/// runner and forge its line. Changing the runner or the sandbox's arguments can change
/// outcomes: bump the version in `CodeTests::cache_key` with it.
pub const RUNNER: &str = r#"import os, sys
def run(write=os.write, leave=os._exit):
    nonce = sys.stdin.readline().strip()
    write(1, ("%s started\n" % nonce).encode())
    import linecache, traceback
    source = sys.stdin.read()
    sys.stdin = open("/dev/null")
    linecache.cache["program.py"] = (len(source), None, source.splitlines(True), "program.py")
    try:
        exec(compile(source, "program.py", "exec"), {})
    except SystemExit as stop:
        sys.stderr.write("SystemExit: the program exited (code %r) before its tests finished\n" % (stop.code,))
        flush()
        leave(1)
    except BaseException:
        traceback.print_exc()
        flush()
        leave(1)
    flush()
    write(1, ("\n%s passed\n" % nonce).encode())
    leave(0)
def flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
run()
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

/// A uid taken from the pool, returned when dropped.
struct UidSlot<'a> {
    uid: u32,
    pool: &'a Mutex<Vec<u32>>,
}

impl Drop for UidSlot<'_> {
    fn drop(&mut self) {
        match self.pool.lock() {
            Ok(mut uids) => uids.push(self.uid),
            Err(poisoned) => poisoned.into_inner().push(self.uid),
        }
    }
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
    /// A failed start is tried again at the next call (a probe that failed under load must not
    /// disable code grading until the process restarts).
    pub async fn shared() -> Result<Arc<Sandbox>, String> {
        static SHARED: OnceCell<Arc<Sandbox>> = OnceCell::const_new();
        SHARED
            .get_or_try_init(|| async {
                Sandbox::start(SandboxConfig::from_env())
                    .await
                    .map(Arc::new)
            })
            .await
            .cloned()
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
        // Runs start with an empty environment, so bubblewrap is found on PATH once, here.
        let mut config = config;
        if let Some(found) = on_path(&config.bubblewrap) {
            config.bubblewrap = found;
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
        // As root, a run always has an unprivileged uid of its own, handed back however the
        // run ends; never root's own (whose processes no rlimit bounds).
        let slot = if self.as_root {
            let taken = self.free_uids.lock().ok().and_then(|mut uids| uids.pop());
            match taken {
                Some(uid) => Some(UidSlot {
                    uid,
                    pool: &self.free_uids,
                }),
                None => {
                    return RunReport {
                        outcome: CodeOutcome::SandboxError {
                            reason: "no unprivileged uid is free for the run".into(),
                        },
                        stdout: String::new(),
                        duration: Duration::ZERO,
                    }
                }
            }
        } else {
            None
        };
        self.run_as(slot.as_ref().map(|slot| slot.uid), program, limits)
            .await
    }

    async fn run_as(&self, uid: Option<u32>, program: &str, limits: &SandboxLimits) -> RunReport {
        let started = Instant::now();
        let mut command = self.command(limits);
        if let Some(uid) = uid {
            command.uid(uid).gid(uid);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                return RunReport {
                    outcome: CodeOutcome::SandboxError {
                        reason: format!("the sandbox could not start: {err}"),
                    },
                    stdout: String::new(),
                    duration: started.elapsed(),
                }
            }
        };
        let nonce = format!("{:032x}", rand::random::<u128>());
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        // One budget for stdout and stderr together.
        let budget = AtomicUsize::new(limits.output_kib as usize * 1024);
        let input = format!("{nonce}\n{program}");
        let feed = async move {
            // A program that never reads its input closes the pipe early; that is not an error.
            let _ = stdin.write_all(input.as_bytes()).await;
            drop(stdin);
        };
        let deadline =
            tokio::time::Instant::now() + Duration::from_secs(u64::from(limits.wall_seconds));
        // Either stream running over the budget stops the run at once.
        let overflow = tokio::sync::Notify::new();
        let reading = async {
            let ((), out, err) = tokio::join!(
                feed,
                read_capped(stdout, &budget, &overflow),
                read_capped(stderr, &budget, &overflow)
            );
            (out, err)
        };
        tokio::pin!(reading);
        let (mut finished, mut cut_short) = tokio::select! {
            finished = &mut reading => {
                let over = finished.0 .1 || finished.1 .1;
                (Some(finished), over.then_some(ProcessEnd::OutputLimit))
            }
            () = overflow.notified() => (None, Some(ProcessEnd::OutputLimit)),
            () = tokio::time::sleep_until(deadline) => (None, Some(ProcessEnd::WallTimeout)),
        };
        // A program that closed its pipes is still running: the wall clock bounds the wait too.
        let mut exited = None;
        if cut_short.is_none() {
            match tokio::time::timeout_at(deadline, child.wait()).await {
                Ok(status) => exited = status.ok(),
                Err(_) => cut_short = Some(ProcessEnd::WallTimeout),
            }
        }
        if cut_short.is_some() {
            // Killing bubblewrap kills the sandbox: its first process dies with its parent, and
            // the rest of the process namespace with that.
            let _ = child.start_kill();
            exited = child.wait().await.ok();
            // The pipes close with the sandbox: what was printed is still read, so the runner's
            // start line says the program had started.
            if finished.is_none() {
                finished = tokio::time::timeout(Duration::from_secs(2), &mut reading)
                    .await
                    .ok();
            }
        }
        let exited = exited.and_then(|status| {
            use std::os::unix::process::ExitStatusExt;
            status
                .code()
                .or_else(|| status.signal().map(|signal| 128 + signal))
        });
        let (stdout, stderr) = match finished {
            Some(((out, _), (err, _))) => (out, err),
            None => (Vec::new(), Vec::new()),
        };
        let stdout = String::from_utf8_lossy(&stdout).into_owned();
        let stderr = String::from_utf8_lossy(&stderr).into_owned();
        let (program_output, started_program, finished_tests) = markers(&stdout, &nonce);
        // A flood can spend the budget before the start line is kept; only a started program
        // prints that much (the sandbox's own errors are a line).
        let started_program = started_program || matches!(cut_short, Some(ProcessEnd::OutputLimit));
        let end = cut_short.unwrap_or(match exited {
            Some(code) => ProcessEnd::Exited(code),
            None => ProcessEnd::NotStarted("the sandbox's exit status was lost".into()),
        });
        let facts = RunFacts {
            end,
            started: started_program,
            finished_tests,
        };
        RunReport {
            outcome: classify(&facts, &stderr, limits),
            stdout: program_output,
            duration: started.elapsed(),
        }
    }

    /// The bubblewrap command for one run under `limits`.
    fn command(&self, limits: &SandboxLimits) -> Command {
        let mut command = Command::new(&self.config.bubblewrap);
        let temp_bytes = u64::from(limits.temp_mib) * 1024 * 1024;
        let memory_bytes = u64::from(limits.memory_mib) * 1024 * 1024;
        command
            .args(["--unshare-all", "--unshare-user", "--disable-userns"])
            .args(["--die-with-parent", "--new-session"])
            .args(["--cap-drop", "ALL", "--clearenv"])
            .args(["--ro-bind", "/usr", "/usr"])
            .args(["--symlink", "usr/lib", "/lib"])
            .args(["--symlink", "usr/lib64", "/lib64"])
            .args(["--symlink", "usr/bin", "/bin"])
            .args(["--proc", "/proc", "--dev", "/dev"])
            // Shared memory counts in no rlimit: a small private tmpfs of its own.
            .args(["--size", &temp_bytes.to_string(), "--tmpfs", "/dev/shm"])
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
            .arg("--")
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

/// A bare program name's full path on PATH (a path with a slash is used as it is).
fn on_path(program: &std::path::Path) -> Option<PathBuf> {
    if program.components().count() != 1 {
        return None;
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|folder| folder.join(program))
        .find(|candidate| candidate.is_file())
}

/// Reads a stream to its end while the shared budget lasts; `true` when it ran out.
async fn read_capped(
    mut stream: impl AsyncRead + Unpin,
    budget: &AtomicUsize,
    overflow: &tokio::sync::Notify,
) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return (kept, false),
            Ok(read) => {
                let taken = budget
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                        Some(left.saturating_sub(read))
                    })
                    .unwrap_or(0);
                if read > taken {
                    kept.extend_from_slice(&buffer[..taken]);
                    overflow.notify_one();
                    return (kept, true);
                }
                kept.extend_from_slice(&buffer[..read]);
            }
        }
    }
}

/// The program's own output, and whether the runner's start and pass lines are there.
fn markers(stdout: &str, nonce: &str) -> (String, bool, bool) {
    let start_line = format!("{nonce} started\n");
    let pass_line = format!("\n{nonce} passed\n");
    let Some(rest) = stdout.strip_prefix(&start_line) else {
        return (stdout.to_string(), false, false);
    };
    match rest.strip_suffix(&pass_line) {
        Some(output) => (output.to_string(), true, true),
        None => (rest.to_string(), true, false),
    }
}
