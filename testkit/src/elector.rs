//! The product's binary: where cargo built it, the command that runs it (or another
//! architecture's build of it, through an emulator), and one of its processes (a "pod"'s
//! elector, a supervisor, a webhook) as a test's child, driven by PID with its output captured.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::cluster::TestNs;
use crate::process;

/// The `passmower-elector` binary cargo built for this test run: beside the test executable's
/// `deps/` directory (`target/<profile>/deps/<tier>-<hash>` → `target/<profile>/
/// passmower-elector`), the file `CARGO_BIN_EXE_passmower-elector` names in the test crates.
/// The kit does not link the product, so it finds the binary from where it runs.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test executable's path");
        let deps = exe.parent().expect("the test executable's directory");
        assert!(
            deps.file_name().is_some_and(|n| n == "deps"),
            "{} is not in a cargo target's deps/ directory: run the tests with cargo",
            exe.display()
        );
        let bin = deps
            .parent()
            .expect("the profile directory")
            .join("passmower-elector");
        assert!(
            bin.is_file(),
            "{} is missing: cargo builds it with the tests",
            bin.display()
        );
        bin
    })
}

/// The product as a test runs it: a program and the arguments that come before the role.
/// [`Product::native`] is [`binary`] itself; [`Product::from_env`] is another build of it
/// (another architecture's), run through an emulator.
#[derive(Clone, Debug)]
pub struct Product {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl Product {
    /// The binary cargo built for this run, executed directly.
    pub fn native() -> Product {
        Product {
            program: binary().to_owned(),
            args: Vec::new(),
        }
    }

    /// `PME_ELECTOR_BINARY` (a build of the product, e.g. the arm64 release binary) run through
    /// `PME_ELECTOR_RUNNER` (a command and its arguments split at whitespace, e.g.
    /// `qemu-aarch64-static`; the binary directly when unset or empty), or `None` when
    /// `PME_ELECTOR_BINARY` is unset. scripts/check-arm64.sh builds the arm64 binary and
    /// prints its runner.
    pub fn from_env() -> Option<Product> {
        let bin = PathBuf::from(std::env::var_os("PME_ELECTOR_BINARY")?);
        assert!(
            bin.is_file(),
            "PME_ELECTOR_BINARY={} is not a file",
            bin.display()
        );
        let runner = std::env::var("PME_ELECTOR_RUNNER").unwrap_or_default();
        let mut words = runner.split_whitespace();
        Some(match words.next() {
            None => Product {
                program: bin,
                args: Vec::new(),
            },
            Some(first) => Product {
                program: PathBuf::from(first),
                args: words
                    .map(str::to_owned)
                    .chain([bin
                        .into_os_string()
                        .into_string()
                        .expect("PME_ELECTOR_BINARY is UTF-8")])
                    .collect(),
            },
        })
    }

    /// The program and arguments `passmower-elector ARGS…` is run as.
    pub fn command<'a>(&'a self, args: &[&'a str]) -> (&'a Path, Vec<&'a str>) {
        let all = self
            .args
            .iter()
            .map(String::as_str)
            .chain(args.iter().copied())
            .collect();
        (&self.program, all)
    }
}

/// A running `passmower-elector` process with its output captured to files. Killed (SIGKILL,
/// by PID) and reaped on drop; if the test is panicking, its log tail is printed first.
#[must_use = "the process is killed when dropped"]
pub struct ElectorProcess {
    name: String,
    child: Child,
    exited: Option<ExitStatus>,
    dir: tempfile::TempDir,
}

impl ElectorProcess {
    /// Runs `passmower-elector elect ARGS…` as pod `pod` of `ns`: `KUBECONFIG` is the
    /// namespace's elector identity, `POD_NAME`/`POD_NAMESPACE` as the downward API would set
    /// them. `--lease-name`/`--namespace` are not added; pass them in `args` as the test needs.
    pub fn elect(pod: &str, ns: &TestNs, args: &[&str]) -> ElectorProcess {
        Self::elect_with_kubeconfig(pod, ns, &ns.elector_kubeconfig, args)
    }

    /// As [`ElectorProcess::elect`] but with another kubeconfig (e.g. through a `FaultProxy`).
    pub fn elect_with_kubeconfig(
        pod: &str,
        ns: &TestNs,
        kubeconfig: &Path,
        args: &[&str],
    ) -> ElectorProcess {
        Self::elect_customized(pod, ns, kubeconfig, args, |_| {})
    }

    /// As [`ElectorProcess::elect_with_kubeconfig`], with `customize` applied to the command
    /// before it is spawned (e.g. a `pre_exec` that lowers a resource limit in the child).
    pub fn elect_customized(
        pod: &str,
        ns: &TestNs,
        kubeconfig: &Path,
        args: &[&str],
        customize: impl FnOnce(&mut Command),
    ) -> ElectorProcess {
        Self::elect_in_pod(pod, None, ns, kubeconfig, args, customize)
    }

    /// As [`ElectorProcess::elect_customized`], in a pod whose downward API also gives its UID
    /// (`POD_UID`), when `uid` is set.
    pub fn elect_in_pod(
        pod: &str,
        uid: Option<&str>,
        ns: &TestNs,
        kubeconfig: &Path,
        args: &[&str],
        customize: impl FnOnce(&mut Command),
    ) -> ElectorProcess {
        let product = Product::native();
        Self::elect_as(&product, pod, uid, ns, kubeconfig, args, customize)
    }

    /// As [`ElectorProcess::elect_in_pod`], running `product` (e.g. another architecture's
    /// build under an emulator) instead of this run's binary.
    pub fn elect_as(
        product: &Product,
        pod: &str,
        uid: Option<&str>,
        ns: &TestNs,
        kubeconfig: &Path,
        args: &[&str],
        customize: impl FnOnce(&mut Command),
    ) -> ElectorProcess {
        let mut all = vec!["elect"];
        all.extend_from_slice(args);
        let mut env = vec![
            ("KUBECONFIG", kubeconfig.as_os_str()),
            ("POD_NAME", OsStr::new(pod)),
            ("POD_NAMESPACE", OsStr::new(&ns.name)),
        ];
        if let Some(uid) = uid {
            env.push(("POD_UID", OsStr::new(uid)));
        }
        // An elector with no toggle has no consumer in these tests (the grant oracles read the
        // flag file), so it would never prove one and never contend; a flag still wins.
        if !args.iter().any(|a| a.starts_with("--toggle-url")) {
            env.push(("ELECTOR_CONSUMER_CHECK", OsStr::new("none")));
        }
        let (program, all) = product.command(&all);
        Self::spawn_program_customized(pod, program, &all, &env, customize)
    }

    /// Runs the binary with `args` (role first) and exactly `env` plus `PATH` and the
    /// `RUST_BACKTRACE`/`RUST_LOG`/`ELECTOR_LOG_*` debugging knobs of the test environment.
    /// Nothing else is inherited: a stray `ELECTOR_*` or `HTTPS_PROXY` must not change a test.
    pub fn spawn(name: &str, args: &[&str], env: &[(&str, &OsStr)]) -> ElectorProcess {
        Self::spawn_program(name, binary(), args, env)
    }

    /// As [`ElectorProcess::spawn`] for another program: a stand-in app, or the harness's own
    /// tests of this type.
    pub fn spawn_program(
        name: &str,
        program: &Path,
        args: &[&str],
        env: &[(&str, &OsStr)],
    ) -> ElectorProcess {
        Self::spawn_program_customized(name, program, args, env, |_| {})
    }

    /// As [`ElectorProcess::spawn_program`], with `customize` applied to the command last.
    pub fn spawn_program_customized(
        name: &str,
        program: &Path,
        args: &[&str],
        env: &[(&str, &OsStr)],
        customize: impl FnOnce(&mut Command),
    ) -> ElectorProcess {
        let dir = tempfile::Builder::new()
            .prefix(&format!("pme-{name}-"))
            .tempdir()
            .expect("elector tempdir");
        let stdout = fs::File::create(dir.path().join("stdout.log")).expect("stdout.log");
        let stderr = fs::File::create(dir.path().join("stderr.log")).expect("stderr.log");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .current_dir(dir.path());
        for (key, value) in std::env::vars_os() {
            let passed = key.to_str().is_some_and(|k| {
                matches!(k, "PATH" | "RUST_BACKTRACE" | "RUST_LOG") || k.starts_with("ELECTOR_LOG_")
            });
            if passed {
                cmd.env(key, value);
            }
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        customize(&mut cmd);
        let child = process::spawn_tracked(cmd)
            .unwrap_or_else(|e| panic!("spawn {} for {name}: {e}", program.display()));
        ElectorProcess {
            name: name.to_owned(),
            child,
            exited: None,
            dir,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// A scratch directory of this process (its working directory): a place for flag files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sends `sig` by PID. A no-op once the process has been reaped, so a recycled PID is
    /// never signalled.
    pub fn signal(&mut self, sig: Signal) {
        if self.try_exit_status().is_none() {
            kill(self.pid(), sig).unwrap_or_else(|e| panic!("kill -{sig} {}: {e}", self.name));
        }
    }

    /// As [`Self::signal`], but returns whether the signal was sent instead of panicking
    /// (false once the process has exited).
    pub fn signal_if_running(&mut self, sig: Signal) -> bool {
        self.try_exit_status().is_none() && kill(self.pid(), sig).is_ok()
    }

    /// Whether the process has been reaped. Until then its PID cannot be reused, so it (and a
    /// session or group it leads) can be signalled safely even after it exited.
    pub fn reaped(&self) -> bool {
        self.exited.is_some()
    }

    /// The exit status if the process has exited (reaping it), without waiting.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
            if self.exited.is_some() {
                // Reaped: the PID may be recycled now, so the exit handler must not kill it.
                process::forget_at_exit(self.child.id() as i32);
            }
        }
        self.exited
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit_status() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Where `--flag-file grant.json` lands: relative paths in the arguments resolve in
    /// [`Self::dir`], the process's working directory. (A test that shares one flag file
    /// between an elector and a supervisor, as a pod's emptyDir does, passes an absolute path.)
    pub fn flag_file(&self) -> PathBuf {
        self.dir.path().join("grant.json")
    }

    /// stdout and stderr so far.
    pub fn logs(&self) -> String {
        let read = |f: &str| fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        format!(
            "--- {} stdout ---\n{}--- {} stderr ---\n{}",
            self.name,
            read("stdout.log"),
            self.name,
            read("stderr.log")
        )
    }

    /// The paths of the captured output, for tests that grep it.
    pub fn log_paths(&self) -> (PathBuf, PathBuf) {
        (
            self.dir.path().join("stdout.log"),
            self.dir.path().join("stderr.log"),
        )
    }
}

impl Drop for ElectorProcess {
    fn drop(&mut self) {
        if self.try_exit_status().is_none() {
            let _ = kill(self.pid(), Signal::SIGKILL);
            // SIGKILL cannot be caught, and a stopped process dies of it too; the wait is brief.
            self.exited = self.child.wait().ok();
            process::forget_at_exit(self.child.id() as i32);
        }
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
    }
}
