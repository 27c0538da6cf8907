//! The sidecar image a release build was published with, fixed at build time: the default of
//! `--image` for `inject` and the webhook. A development build knows none and requires the flag.
//!
//! The release workflow (`scripts/release.sh`) sets two variables for `cargo build`:
//! `PME_RELEASE_IMAGE`, the repository it pushes to (e.g. `ghcr.io/passmower/passmower-elector`),
//! and, for the standalone binaries only, `PME_RELEASE_IMAGE_DIGEST`, the digest of the image
//! index it pushed. The binary inside the image cannot hold its own image's digest (the digest
//! covers the binary), so it defaults to `REPOSITORY:VERSION`; the standalone binaries are built
//! after the image and default to `REPOSITORY:VERSION@DIGEST`. A malformed value fails the build.

use crate::inject::names::VERSION;

/// The repository of this build's published image; `None` (or empty) in a development build.
const RELEASE_REPOSITORY: Option<&str> = option_env!("PME_RELEASE_IMAGE");
/// The digest of that image's index, when it was known at build time.
const RELEASE_DIGEST: Option<&str> = option_env!("PME_RELEASE_IMAGE_DIGEST");

// Checked while compiling: a release binary with a default no pod can pull is worse than none.
const _: () = assert!(
    is_repository(non_empty(RELEASE_REPOSITORY)),
    "PME_RELEASE_IMAGE must be an image repository without tag or digest, in lower case, \
     e.g. ghcr.io/passmower/passmower-elector"
);
const _: () = assert!(
    is_digest(non_empty(RELEASE_DIGEST)),
    "PME_RELEASE_IMAGE_DIGEST must be sha256: and 64 lower-case hex digits"
);
const _: () = assert!(
    non_empty(RELEASE_DIGEST).is_none() || non_empty(RELEASE_REPOSITORY).is_some(),
    "PME_RELEASE_IMAGE_DIGEST needs PME_RELEASE_IMAGE"
);

/// The image this build defaults to: `REPOSITORY:VERSION@DIGEST` in a release's standalone
/// binary, `REPOSITORY:VERSION` in the image's own, `None` in a development build.
pub fn release_image() -> Option<String> {
    resolve(
        non_empty(RELEASE_REPOSITORY),
        VERSION,
        non_empty(RELEASE_DIGEST),
    )
}

/// The repository this build was released to, if any (a reference to it is a published one).
pub fn release_repository() -> Option<&'static str> {
    non_empty(RELEASE_REPOSITORY)
}

/// The default image from what the build was given: no repository, no default; the version is
/// always the tag (releases publish version tags only), pinned by the digest when there is one.
pub fn resolve(repository: Option<&str>, version: &str, digest: Option<&str>) -> Option<String> {
    let repository = repository?;
    Some(match digest {
        Some(digest) => format!("{repository}:{version}@{digest}"),
        None => format!("{repository}:{version}"),
    })
}

/// What `passmower-elector --version` says about the default image.
pub fn describe() -> String {
    match release_image() {
        Some(image) => format!("sidecar image: {image} (the default of inject --image)"),
        None => {
            "sidecar image: none (a development build: inject and webhook need --image)".to_owned()
        }
    }
}

/// `option_env!` of an empty variable (a workflow step that sets it to "") counts as unset.
const fn non_empty(value: Option<&'static str>) -> Option<&'static str> {
    match value {
        Some(v) if !v.is_empty() => Some(v),
        _ => None,
    }
}

/// A repository: lower-case letters, digits and `._-/:` (a registry port), no tag after the
/// last `/`, no digest, not starting or ending with a separator. `None` passes.
const fn is_repository(value: Option<&str>) -> bool {
    let Some(value) = value else { return true };
    let b = value.as_bytes();
    if b.is_empty() || b[0] == b'/' || b[b.len() - 1] == b'/' {
        return false;
    }
    let mut last_slash = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let allowed = c.is_ascii_lowercase()
            || c.is_ascii_digit()
            || matches!(c, b'.' | b'_' | b'-' | b'/' | b':');
        if !allowed {
            return false;
        }
        if c == b'/' {
            last_slash = Some(i);
        }
        i += 1;
    }
    // A ':' is a registry's port (before the first '/'), never a tag in the last segment.
    let Some(last_slash) = last_slash else {
        return false;
    };
    let mut i = last_slash;
    while i < b.len() {
        if b[i] == b':' {
            return false;
        }
        i += 1;
    }
    true
}

/// `sha256:` and 64 lower-case hex digits. `None` passes.
const fn is_digest(value: Option<&str>) -> bool {
    let Some(value) = value else { return true };
    let b = value.as_bytes();
    let prefix = b"sha256:";
    if b.len() != prefix.len() + 64 {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        let ok = if i < prefix.len() {
            b[i] == prefix[i]
        } else {
            b[i].is_ascii_digit() || matches!(b[i], b'a'..=b'f')
        };
        if !ok {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_development_build_has_no_default_image() {
        assert_eq!(resolve(None, "0.1.0", None), None);
        // A digest alone is refused while compiling; at run time it would still give nothing.
        assert_eq!(resolve(None, "0.1.0", Some(DIGEST)), None);
    }

    #[test]
    fn the_image_binary_defaults_to_its_version_tag() {
        assert_eq!(
            resolve(Some("ghcr.io/passmower/passmower-elector"), "0.2.0", None).as_deref(),
            Some("ghcr.io/passmower/passmower-elector:0.2.0")
        );
    }

    #[test]
    fn a_standalone_binary_pins_the_image_by_digest() {
        assert_eq!(
            resolve(Some("registry.example.com:5000/pme"), "0.2.0", Some(DIGEST)).as_deref(),
            Some(format!("registry.example.com:5000/pme:0.2.0@{DIGEST}").as_str())
        );
    }

    #[test]
    fn build_time_values_are_checked() {
        for good in [
            "ghcr.io/passmower/passmower-elector",
            "registry.example.com:5000/team/pme",
            "localhost/x",
        ] {
            assert!(is_repository(Some(good)), "{good}");
        }
        for bad in [
            "",
            "passmower-elector",
            "ghcr.io/passmower/passmower-elector:0.1.0",
            "ghcr.io/passmower/passmower-elector@sha256:00",
            "ghcr.io/Passmower/passmower-elector",
            "ghcr.io/passmower/",
            "/x",
            "ghcr.io/pass mower/x",
        ] {
            assert!(!is_repository(Some(bad)), "{bad:?}");
        }
        assert!(is_digest(Some(DIGEST)));
        for bad in [
            "sha256:00",
            "sha512:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(!is_digest(Some(bad)), "{bad:?}");
        }
        assert!(is_repository(None) && is_digest(None));
        assert_eq!(non_empty(Some("")), None);
    }

    /// This test binary is a development build unless its builder exported the variables; in
    /// either case the default follows them.
    #[test]
    fn the_build_default_follows_the_build_variables() {
        let expected = resolve(
            non_empty(option_env!("PME_RELEASE_IMAGE")),
            env!("CARGO_PKG_VERSION"),
            non_empty(option_env!("PME_RELEASE_IMAGE_DIGEST")),
        );
        assert_eq!(release_image(), expected);
        assert!(describe().contains(expected.as_deref().unwrap_or("none")));
    }
}
