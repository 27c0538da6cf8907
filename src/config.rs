//! Configuration values shared by the roles: parsing of durations and `KEY=VALUE` pairs, and
//! the one error type for bad configuration, which always ends the process with exit code 2.

use std::process::ExitCode;
use std::time::Duration;

/// Exit code for configuration errors (the same code clap uses for usage errors).
pub const CONFIG_EXIT_CODE: u8 = 2;

/// A configuration value that cannot be used: names the flag, the value and what is allowed.
#[derive(Debug, thiserror::Error)]
#[error("invalid {flag} {value:?}: {reason}")]
pub struct ConfigError {
    /// The flag as the user types it, e.g. `--renew-deadline`.
    pub flag: String,
    /// The offending value as given.
    pub value: String,
    /// Why it is refused and the allowed range.
    pub reason: String,
}

impl ConfigError {
    pub fn new(
        flag: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        ConfigError {
            flag: flag.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// Prints the error the way every role reports bad configuration and returns exit code 2.
    pub fn report(&self) -> ExitCode {
        eprintln!("passmower-elector: configuration error: {self}");
        ExitCode::from(CONFIG_EXIT_CODE)
    }
}

/// Parses a human duration (`15s`, `1m30s`, `500ms`, `0s`).
/// Used as a clap value parser, so clap names the flag in its error.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e}; expected a duration such as 15s, 1m30s or 500ms"))
}

/// Parses a human duration (`15s`, `1m30s`, `500ms`) that must be positive.
/// Used as a clap value parser, so clap names the flag in its error.
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be greater than zero (e.g. 15s)".into());
    }
    Ok(d)
}

/// Parses `KEY=VALUE`; the key must be a non-empty environment variable name.
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?} (no '=')"))?;
    let valid = !key.is_empty()
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "expected KEY=VALUE with KEY made of letters, digits and '_' (not starting with a digit), got key {key:?}"
        ));
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// Whether `s` is a DNS-1123 label (1 to 63 of a-z, 0-9 and '-', alphanumeric at both ends):
/// what a namespace name must be.
pub fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// Whether `s` is a DNS-1123 subdomain (at most 253 characters, DNS-1123 labels joined by '.'):
/// what a Lease name and a pod name must be.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// Formats a duration for messages: `15s`, `1m 30s`, `500ms`.
pub fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_human_form() {
        assert_eq!(parse_positive_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(
            parse_positive_duration("1m30s"),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(
            parse_positive_duration("250ms"),
            Ok(Duration::from_millis(250))
        );
    }

    #[test]
    fn zero_and_garbage_durations_are_refused() {
        assert!(parse_positive_duration("0s")
            .unwrap_err()
            .contains("greater than zero"));
        assert!(parse_positive_duration("-5s").is_err());
        assert!(parse_positive_duration("fast").is_err());
        assert!(parse_positive_duration("15").is_err());
    }

    #[test]
    fn key_value_pairs() {
        assert_eq!(parse_key_value("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert_eq!(
            parse_key_value("EMPTY="),
            Ok(("EMPTY".into(), String::new()))
        );
        assert!(parse_key_value("NOEQUALS").is_err());
        assert!(parse_key_value("=x").is_err());
        assert!(parse_key_value("1A=x").is_err());
        assert!(parse_key_value("A-B=x").is_err());
    }

    #[test]
    fn dns1123_labels_and_subdomains() {
        assert!(is_dns1123_label("a"));
        assert!(is_dns1123_label("a-1"));
        for bad in [
            "",
            "*",
            "a,b",
            "-a",
            "a-",
            "A",
            "a.b",
            "a_b",
            "é",
            &"a".repeat(64),
        ] {
            assert!(!is_dns1123_label(bad), "{bad:?}");
        }
        assert!(is_dns1123_subdomain("a.b-1.c"));
        assert!(is_dns1123_subdomain(
            &vec!["a".repeat(63); 4].join(".")[..253]
        ));
        for bad in [
            "",
            ".",
            "a.",
            ".a",
            "a..b",
            "A.b",
            "a_b.c",
            &format!("{}ab", "a.".repeat(126)),
        ] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?}");
        }
    }
}
