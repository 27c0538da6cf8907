//! `inject` and the app container's user, run as the binary: the elector's token is mode 0600,
//! so the elector must run as the app's user. An image of unknown user (not upstream
//! Passmower's, which runs as root) with no runAsUser in the manifest is warned about on stderr
//! and in the manifest (exit 0), naming the fix; naming the UID silences it.

use crate::golden::{golden, inject, ExitStatus};

const WARNING: &str = "names no runAsUser (nor does the pod)";

/// The 2.2 golden input with its image replaced by `image`.
fn with_image(image: &str) -> String {
    golden("passmower.in.yaml").replace("docker.io/codemowers/passmower:2.2.0", image)
}

#[test]
fn an_image_of_unknown_user_without_run_as_user_is_warned_about() {
    let hardened = "registry.example.com/hardened/passmower:2.4.0";
    let out = inject(&["--namespace=auth"], &with_image(hardened), &[]);
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    let warning = out
        .stderr
        .lines()
        .find(|l| l.contains(WARNING))
        .unwrap_or_else(|| panic!("no warning on stderr: {}", out.stderr));
    assert!(
        warning.starts_with(
            "passmower-elector inject: warning: Deployment/passmower: container \"passmower\""
        ),
        "{warning}"
    );
    assert!(warning.contains(hardened), "{warning}");
    assert!(
        warning.contains("set runAsUser on the container (or the pod) to the image's user"),
        "{warning}"
    );
    assert!(
        out.stdout.contains(WARNING),
        "the manifest does not carry it"
    );

    // Upstream's image runs as root: no warning. A UID in the manifest: none either.
    let upstream = inject(&["--namespace=auth"], &golden("passmower.in.yaml"), &[]);
    assert_eq!(upstream.status, ExitStatus::Code(0), "{}", upstream.stderr);
    assert!(!upstream.stderr.contains(WARNING), "{}", upstream.stderr);
    let named = with_image(hardened).replace(
        "      securityContext:\n        fsGroup: 1000\n",
        "      securityContext:\n        fsGroup: 1000\n        runAsUser: 1000\n",
    );
    assert!(named.contains("runAsUser: 1000"), "{named}");
    let out = inject(&["--namespace=auth"], &named, &[]);
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    assert!(!out.stderr.contains(WARNING), "{}", out.stderr);
    // ... and the elector then runs as that UID, which is what makes the token readable.
    assert!(out.stdout.contains("runAsUser: 1000"), "{}", out.stdout);
}
