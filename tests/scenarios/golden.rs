//! What the `inject` scenarios share: run the binary with stdin, read golden files.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[derive(Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal,
}

pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// The sidecar image the tests inject: a development build requires `--image`.
pub const IMAGE: &str = "registry.example.com/passmower-elector:0.1.0";

pub fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/inject")
        .join(name)
}

pub fn golden(name: &str) -> String {
    let path = golden_path(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `passmower-elector inject --image IMAGE ARGS…` (ARGS without the leading `inject`).
/// An `--image` among ARGS replaces the default one.
pub fn inject(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let image = format!("--image={IMAGE}");
    let mut all = vec!["inject"];
    if !args
        .iter()
        .any(|a| *a == "--image" || a.starts_with("--image="))
    {
        all.push(image.as_str());
    }
    all.extend_from_slice(args);
    run(&all, stdin, env)
}

/// Runs `passmower-elector ARGS` with `stdin` and extra environment, with every ELECTOR_*
/// variable (and HELM_NAMESPACE, which a helm plugin's shell may carry) of the test's own
/// environment removed so only what the test says applies.
pub fn run(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_passmower-elector"));
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ELECTOR_") || key == "HELM_NAMESPACE" {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env.iter().copied());
    let mut child = cmd.spawn().expect("spawn passmower-elector");
    let mut input = child.stdin.take().expect("stdin");
    // A failing inject may exit before reading everything; a broken pipe is then expected.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    let out = child
        .wait_with_output()
        .expect("wait for passmower-elector");
    Output {
        status: out
            .status
            .code()
            .map_or(ExitStatus::Signal, ExitStatus::Code),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
