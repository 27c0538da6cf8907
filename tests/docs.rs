//! The README is the reference for flags: every flag each role accepts must be documented there,
//! so a new flag cannot ship undocumented.

use std::process::Command;

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

#[test]
fn readme_documents_every_flag_of_every_role() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    for role in ["elect", "supervise", "inject", "webhook"] {
        let flags = flags_of(role);
        assert!(
            flags.len() > 5,
            "{role}: too few flags parsed from --help: {flags:?}"
        );
        for flag in flags {
            // `--restart-backoff-max` is documented as part of `--restart-backoff-initial` / `-max`.
            let short = flag.rsplit('-').next().unwrap_or_default();
            let documented = readme.contains(&format!("`{flag}"))
                || readme.contains(&format!("{flag}`"))
                || (flag.starts_with("--restart-backoff-")
                    && readme.contains(&format!("`-{short}`")));
            assert!(documented, "README.md does not document `{role} {flag}`");
        }
    }
}

#[test]
fn every_flag_has_an_environment_variable() {
    for role in ["elect", "supervise", "inject", "webhook"] {
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
