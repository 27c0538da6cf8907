//! `cargo xtask` is the contributors' front door: every script in `scripts/` is a task there or
//! one a task calls, every script a task names exists, and the development page points to it.

use std::path::Path;

#[path = "../../xtask/src/tasks.rs"]
mod tasks;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn every_script_is_a_task_or_called_by_one_and_every_task_runs_a_script_that_exists() {
    let listed: Vec<&str> = tasks::TASKS
        .iter()
        .map(|t| t.script)
        .chain(tasks::CALLED_BY_TASKS.iter().copied())
        .collect();
    let missing: Vec<&str> = listed
        .iter()
        .copied()
        .filter(|script| !Path::new(ROOT).join(script).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "xtask names scripts that do not exist: {missing:?}"
    );

    let mut unlisted = Vec::new();
    let entries = std::fs::read_dir(Path::new(ROOT).join("scripts")).expect("scripts/");
    for entry in entries {
        let name = entry.expect("dir entry").file_name();
        let name = name.to_string_lossy();
        if !(name.ends_with(".sh") || name.ends_with(".py")) {
            continue; // lib/ and release/: helpers sourced or called by a script
        }
        let script = format!("scripts/{name}");
        if !listed.contains(&script.as_str()) {
            unlisted.push(script);
        }
    }
    assert!(
        unlisted.len() + listed.len() > 20,
        "too few scripts seen: {listed:?}"
    );
    assert!(
        unlisted.is_empty(),
        "scripts neither a task of `cargo xtask` nor called by one (xtask/src/tasks.rs): \
         {unlisted:?}"
    );
    let undescribed: Vec<&str> = tasks::TASKS
        .iter()
        .filter(|t| t.what.trim().is_empty())
        .map(|t| t.name)
        .collect();
    assert!(
        undescribed.is_empty(),
        "tasks without a description: {undescribed:?}"
    );
    let mut names: Vec<&str> = tasks::TASKS.iter().map(|t| t.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), tasks::TASKS.len(), "two tasks share a name");
}

#[test]
fn the_development_page_and_the_alias_name_the_front_door() {
    let page = std::fs::read_to_string(Path::new(ROOT).join("docs/development.md"))
        .expect("docs/development.md");
    assert!(
        page.contains("cargo xtask"),
        "docs/development.md does not name `cargo xtask`"
    );
    let config = std::fs::read_to_string(Path::new(ROOT).join(".cargo/config.toml"))
        .expect(".cargo/config.toml");
    assert!(
        config.contains("xtask = \"run --quiet --package xtask --\""),
        ".cargo/config.toml has no xtask alias"
    );
}
