//! Shared helpers of the `inject` tests: run the binary with stdin, read golden files.

#![allow(dead_code)]

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

pub fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/inject")
        .join(name)
}

pub fn golden(name: &str) -> String {
    let path = golden_path(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `passmower-elector ARGS` with `stdin` and extra environment, with every ELECTOR_*
/// variable of the test's own environment removed so only what the test says applies.
pub fn run(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_passmower-elector"));
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ELECTOR_") {
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
