//! `inject` and Passmower's own election, run as the binary: whatever the image tag says,
//! `auto` turns upstream's election off so only the elector elects, and a tag that names no
//! plain release is warned about on stderr (exit 0), in the manifest and in its annotation.

use crate::golden::{golden, inject, ExitStatus};

/// The 2.2 golden input with its image replaced by `image`.
fn with_image(image: &str) -> String {
    golden("passmower.in.yaml").replace("docker.io/codemowers/passmower:2.2.0", image)
}

/// The lines of the output's app container env that set LEADER_ELECTION_ENABLED, with value.
fn enabled_values(stdout: &str) -> Vec<String> {
    let lines: Vec<&str> = stdout.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim() == "- name: LEADER_ELECTION_ENABLED")
        .map(|(i, _)| lines.get(i + 1).map_or("", |l| l.trim()).to_owned())
        .collect()
}

/// A 2.4 build tagged `2.0.0-dev` (what the 2.4 tree's own chart renders), a branch, a line,
/// a pre-release or a bare digest: the output sets `LEADER_ELECTION_ENABLED=false` and the run
/// warns on stderr, naming the tag; exit 0. A plain release of any generation gets the same
/// variable and no warning.
#[test]
fn every_tag_gets_upstreams_election_off_and_an_unreadable_one_a_warning() {
    let unreadable = [
        "ghcr.io/passmower/passmower:2.0.0-dev",
        "ghcr.io/passmower/passmower:latest",
        "ghcr.io/passmower/passmower:develop",
        "ghcr.io/passmower/passmower:2",
        "ghcr.io/passmower/passmower:2.4",
        "ghcr.io/passmower/passmower:2.4.0-rc.1",
        "ghcr.io/passmower/passmower@sha256:0123456789abcdef",
    ];
    for image in unreadable {
        let out = inject(&["--namespace=auth"], &with_image(image), &[]);
        assert_eq!(out.status, ExitStatus::Code(0), "{image}: {}", out.stderr);
        assert_eq!(
            enabled_values(&out.stdout),
            ["value: 'false'"],
            "{image}: {}",
            out.stdout
        );
        let shown = image
            .rsplit_once(':')
            .map(|(_, t)| t)
            .filter(|_| !image.contains('@'))
            .unwrap_or("digest alone");
        let warning = out
            .stderr
            .lines()
            .find(|l| l.contains("cannot tell whether this Passmower elects a leader itself"))
            .unwrap_or_else(|| panic!("{image}: no warning on stderr: {}", out.stderr));
        assert!(warning.contains(shown), "{image}: {warning}");
        assert!(
            warning.contains("LEADER_ELECTION_ENABLED=false is set either way"),
            "{warning}"
        );
        assert!(
            out.stdout
                .contains("cannot tell whether this Passmower elects a leader itself"),
            "{image}: the manifest does not carry the warning"
        );
        // `ours` turns it off the same way and keeps quiet.
        let ours = inject(
            &["--namespace=auth", "--passmower-election=ours"],
            &with_image(image),
            &[],
        );
        assert_eq!(ours.status, ExitStatus::Code(0), "{image}: {}", ours.stderr);
        assert_eq!(enabled_values(&ours.stdout), ["value: 'false'"], "{image}");
        assert!(
            !ours.stderr.contains("cannot tell whether"),
            "{}",
            ours.stderr
        );
    }
    for image in [
        "docker.io/codemowers/passmower:2.2.0",
        "ghcr.io/passmower/passmower:1.3.0",
        "ghcr.io/passmower/passmower:2.4.0",
        "ghcr.io/passmower/passmower:2.4.0@sha256:0123456789abcdef",
    ] {
        let out = inject(&["--namespace=auth"], &with_image(image), &[]);
        assert_eq!(out.status, ExitStatus::Code(0), "{image}: {}", out.stderr);
        assert_eq!(enabled_values(&out.stdout), ["value: 'false'"], "{image}");
        assert!(
            !out.stderr.contains("cannot tell whether"),
            "{}",
            out.stderr
        );
    }
}

/// `fence-only` keeps upstream's election: a `2.0.0-dev` build is taken (no longer refused
/// as "before 2.4.0"), with a warning that a Passmower without an election of its own would
/// run the operators in every replica.
#[test]
fn fence_only_warns_that_an_unreadable_tag_may_have_no_election() {
    let input = golden("passmower-2.4.in.yaml").replace(
        "ghcr.io/passmower/passmower:2.4.0",
        "ghcr.io/passmower/passmower:2.0.0-dev",
    );
    // The 2.4 chart's LEADER_ELECTION_ENABLED says the app elects itself: no warning.
    let out = inject(
        &["--namespace=auth", "--passmower-election=fence-only"],
        &input,
        &[],
    );
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    assert!(
        !out.stderr.contains("cannot tell whether"),
        "{}",
        out.stderr
    );
    // Without it, only the tag could tell.
    let bare: String = {
        let lines: Vec<&str> = input.lines().collect();
        let mut kept = Vec::new();
        let mut skip = 0;
        for l in &lines {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            if l.trim() == "- name: LEADER_ELECTION_ENABLED" {
                skip = 1;
                continue;
            }
            kept.push(*l);
        }
        kept.join("\n") + "\n"
    };
    assert!(!bare.contains("LEADER_ELECTION_ENABLED"), "{bare}");
    let out = inject(
        &["--namespace=auth", "--passmower-election=fence-only"],
        &bare,
        &[],
    );
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("\"2.0.0-dev\" is no release version")
            && out.stderr.contains("every replica would run the operators"),
        "{}",
        out.stderr
    );
}

/// `fence-only` adds no container, so a development build runs it without `--image` (the one
/// mode a 2.4 user can deploy before anything is built): the same objects as with an image.
#[test]
fn fence_only_runs_without_an_image() {
    let input = golden("passmower-2.4.in.yaml");
    let args = [
        "inject",
        "--namespace=auth",
        "--passmower-election=fence-only",
    ];
    let out = crate::golden::run(&args, &input, &[]);
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    let with_image = inject(&args[1..], &input, &[]);
    assert_eq!(
        with_image.status,
        ExitStatus::Code(0),
        "{}",
        with_image.stderr
    );
    assert_eq!(out.stdout, with_image.stdout);
    // The other modes still need one.
    let ours = crate::golden::run(
        &["inject", "--namespace=auth", "--passmower-election=ours"],
        &input,
        &[],
    );
    assert_eq!(ours.status, ExitStatus::Code(2), "{}", ours.stderr);
    assert!(ours.stderr.contains("--image"), "{}", ours.stderr);
}
