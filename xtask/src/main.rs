//! `cargo xtask`: the list of every task the docs name, and `cargo xtask NAME [ARGS…]` to run
//! one. Each task is a script in `scripts/` (or `.ci/run`), run from the repository root with
//! the arguments given; this only gathers them in one place, so the scripts stay runnable on
//! their own.

mod tasks;

use std::path::Path;
use std::process::{Command, ExitCode};

use tasks::{CALLED_BY_TASKS, TASKS};

fn list() {
    println!("cargo xtask TASK [ARGS…], from anywhere in the repository:\n");
    let width = TASKS.iter().map(|t| t.name.len()).max().unwrap_or(0);
    for t in TASKS {
        println!(
            "  {:width$}  {}\n  {:width$}  ({})",
            t.name, t.what, "", t.script
        );
    }
    println!("\nScripts the tasks call, each runnable on its own (its first lines say how):");
    for script in CALLED_BY_TASKS {
        println!("  {script}");
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(name) = args
        .next()
        .filter(|n| n != "--help" && n != "-h" && n != "list")
    else {
        list();
        return ExitCode::SUCCESS;
    };
    let Some(task) = TASKS.iter().find(|t| t.name == name) else {
        eprintln!("cargo xtask: no task named {name:?}; the tasks are:\n");
        list();
        return ExitCode::from(2);
    };
    // xtask/ sits in the repository root.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."));
    let interpreter = if task.script.ends_with(".py") {
        "python3"
    } else {
        "bash"
    };
    let status = Command::new(interpreter)
        .arg(task.script)
        .args(args)
        .current_dir(root)
        .status();
    match status {
        Ok(status) => match status.code() {
            Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            // Ended by a signal: say so as a shell would (128 + signal is not portable here).
            None => ExitCode::from(1),
        },
        Err(e) => {
            eprintln!("cargo xtask {name}: cannot run {}: {e}", task.script);
            ExitCode::from(1)
        }
    }
}
