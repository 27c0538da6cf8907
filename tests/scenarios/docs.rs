//! The docs are the reference for flags: every flag each role accepts must be documented on that
//! role's page under docs/reference/ (or, for the flags every role shares, on
//! docs/reference/README.md), so a new flag cannot ship undocumented. The README stays a short
//! front page, user docs name no internal issue numbers, and every relative link between the
//! docs resolves, anchors included. The code layout page names every file of the roles it
//! describes (in their subfolders too), and no file that is not there.

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const ROLES: [&str; 5] = ["elect", "supervise", "inject", "webhook", "status"];

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn flags_of(role: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_passmower-elector"))
        .args([role, "--help"])
        .output()
        .expect("run --help");
    assert!(out.status.success(), "{role} --help failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-f, ").unwrap_or(l);
            l.strip_prefix("--").map(|rest| {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                format!("--{name}")
            })
        })
        .filter(|f| f != "--help")
        .collect()
}

/// Whether `page` documents `flag` in code: `` `--flag`` or ``--flag` ``.
fn documents(page: &str, flag: &str) -> bool {
    // `--restart-backoff-max` is documented as part of `--restart-backoff-initial` / `-max`.
    let short = flag.rsplit('-').next().unwrap_or_default();
    page.contains(&format!("`{flag}"))
        || page.contains(&format!("{flag}`"))
        || (flag.starts_with("--restart-backoff-") && page.contains(&format!("`-{short}`")))
}

#[test]
fn reference_documents_every_flag_of_every_role() {
    let common = read("docs/reference/README.md");
    for role in ROLES {
        let page = read(&format!("docs/reference/{role}.md"));
        let flags = flags_of(role);
        assert!(
            flags.len() > 5,
            "{role}: too few flags parsed from --help: {flags:?}"
        );
        for flag in flags {
            assert!(
                documents(&page, &flag)
                    || (["--log-format", "--log-level"].contains(&flag.as_str())
                        && documents(&common, &flag)),
                "docs/reference/{role}.md does not document `{role} {flag}`"
            );
        }
    }
}

#[test]
fn every_flag_has_an_environment_variable() {
    for role in ROLES {
        let out = Command::new(env!("CARGO_BIN_EXE_passmower-elector"))
            .args([role, "--help"])
            .output()
            .expect("help");
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        for flag in flags_of(role) {
            let var = format!(
                "ELECTOR_{}",
                flag.trim_start_matches("--")
                    .replace('-', "_")
                    .to_uppercase()
            );
            assert!(
                help.contains(&format!("[env: {var}=")),
                "{role} {flag} has no {var}"
            );
        }
    }
}

/// Every Markdown file a user reads: the README, docs/, the examples' READMEs.
fn user_docs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let root = Path::new(ROOT);
    let mut out = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    walk(&root.join("docs"), &mut out);
    walk(&root.join("examples"), &mut out);
    out
}

#[test]
fn readme_is_a_short_front_page_with_the_two_commands() {
    let readme = read("README.md");
    assert!(
        readme.len() <= 8 * 1024,
        "README.md is {} bytes, more than 8 KiB: move the detail into docs/",
        readme.len()
    );
    for command in ["\nscripts/demo.sh    #", "\nscripts/test.sh    #"] {
        assert!(readme.contains(command), "README.md lost {command:?}");
    }
}

#[test]
fn user_docs_name_no_issue_numbers() {
    let mut files = user_docs();
    files.retain(|p| !p.ends_with("CHANGELOG.md"));
    for chart in ["passmower-elector", "passmower-elector-webhook"] {
        files.push(Path::new(ROOT).join(format!("charts/{chart}/templates/NOTES.txt")));
        files.push(Path::new(ROOT).join(format!("charts/{chart}/values.yaml")));
    }
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        let lower = text.to_lowercase();
        for (at, _) in lower.match_indices("issue") {
            let rest = lower[at + "issue".len()..].trim_start_matches([' ', '#']);
            assert!(
                !rest.starts_with(|c: char| c.is_ascii_digit()),
                "{} names an issue number: {:?}",
                file.display(),
                &text[at..(at + 20).min(text.len())]
            );
        }
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(markdown: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of `](target)` links outside code blocks.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    out
}

#[test]
fn relative_links_between_the_docs_resolve() {
    let mut broken = Vec::new();
    for file in user_docs() {
        let text = std::fs::read_to_string(&file).expect("read");
        let dir = file.parent().expect("parent");
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", file.display()));
                continue;
            }
            if !anchor.is_empty() {
                let page = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&page).iter().any(|a| a == anchor) {
                    broken.push(format!("{}: {target} (no such heading)", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The sections of docs/design/layout.md that name every file of a folder: `## role` for each
/// role of `src/`, `## testkit` for the test kit and `## tests` for the test tiers, each with
/// the folder its file names are relative to.
const LAYOUT_SECTIONS: [(&str, &str); 8] = [
    ("election", "src/election"),
    ("elect", "src/elect"),
    ("inject", "src/inject"),
    ("status", "src/status"),
    ("supervise", "src/supervise"),
    ("webhook", "src/webhook"),
    ("testkit", "testkit/src"),
    ("tests", "tests"),
];

/// The files the layout page names in the section of `role`: every word that ends in `.rs`,
/// as a path from the repository root (under `dir` unless it starts with `src/`).
fn layout_files(role: &str, dir: &str) -> Vec<PathBuf> {
    let page = read("docs/design/layout.md");
    let heading = format!("## {role}");
    let section: Vec<&str> = page
        .lines()
        .skip_while(|l| l.trim_end() != heading)
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect();
    assert!(
        !section.is_empty(),
        "docs/design/layout.md has no section {heading:?}"
    );
    let mut files: Vec<PathBuf> = section
        .iter()
        .flat_map(|l| l.split(|c: char| c.is_whitespace() || "`|(),;:".contains(c)))
        .filter(|word| word.ends_with(".rs"))
        .map(|word| {
            if word.starts_with("src/") {
                PathBuf::from(word)
            } else {
                Path::new(dir).join(word)
            }
        })
        .collect();
    files.sort();
    files.dedup();
    files
}

/// The `.rs` files under `dir` (relative to the repository root), in its subfolders too.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(Path::new(ROOT).join(dir))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.expect("dir entry");
        let path = dir.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

#[test]
fn the_layout_page_names_every_file_of_its_roles_the_kit_and_the_tiers() {
    let mut missing = Vec::new();
    for (role, dir) in LAYOUT_SECTIONS {
        let named = layout_files(role, dir);
        let dir = Path::new(dir);
        let on_disk = rust_files(dir);
        assert!(
            on_disk.len() > 5,
            "{}: too few .rs files found",
            dir.display()
        );
        missing.extend(
            on_disk
                .into_iter()
                .filter(|file| !named.contains(file))
                .map(|file| file.display().to_string()),
        );
    }
    assert!(
        missing.is_empty(),
        "docs/design/layout.md does not name:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_file_the_layout_page_names_exists() {
    let mut gone = Vec::new();
    for (role, dir) in LAYOUT_SECTIONS {
        let named = layout_files(role, dir);
        assert!(named.len() > 5, "{role}: too few files parsed: {named:?}");
        gone.extend(
            named
                .into_iter()
                .filter(|file| !Path::new(ROOT).join(file).is_file())
                .map(|file| format!("{role}: {}", file.display())),
        );
    }
    assert!(
        gone.is_empty(),
        "docs/design/layout.md names files that do not exist:\n{}",
        gone.join("\n")
    );
}
