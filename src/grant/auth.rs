//! Tying grant and ack objects to one elector incarnation: the token file that carries its key,
//! the canonical strings, and their HMAC-SHA256.
//!
//! The toggle listens on loopback, which every container of the pod shares, and the flag file
//! lives on a volume more than one container can write. So a consumer obeys only objects whose
//! `mac` verifies under the key of the elector incarnation they name, and the elector counts only
//! acks whose `mac` verifies under its own key. The key is 256 random bits the elector writes at
//! start to `<flag-file>.token` (mode 0600) and never sends anywhere.
//!
//! Canonical strings (UTF-8, fields joined by `|`, integers in decimal without padding, free
//! strings prefixed with their length in bytes and `:` so no content can shift a field):
//!
//! ```text
//! grant: grant-v1|MODE|LEN:HOLDER|EPOCH|INCARNATION|SEQ|LEN:LEASE|EXPIRES_BOOTTIME_NS|RENEW_DEADLINE_NS|KILL_GRACE_NS
//! ack:   ack-v1|MODE|INCARNATION|SEQ|LEADER_START_FAILURES
//! ack:   ack-v2|MODE|INCARNATION|SEQ|LEADER_START_FAILURES|LEADER_STARTS|LEADER_CRASHES
//! ack:   ack-v3|MODE|INCARNATION|SEQ|LEADER_START_FAILURES|LEADER_STARTS|LEADER_CRASHES|LEADER_UNHEALTHY|LEADER_PROBE_FAILURES
//! ```
//!
//! An ack whose `leader_unhealthy` and `leader_probe_failures` are not both 0 is signed as
//! `ack-v3`; otherwise one whose `leader_starts` and `leader_crashes` are both 0 (or absent) as
//! `ack-v1`, anything else as `ack-v2`: consumers that count nothing (or probe nothing) keep
//! the shorter forms, and a count taken out of an ack changes its form and so breaks its MAC.
//!
//! `expires_at` (for humans) and `mac` itself are not covered. The two prefixes keep a grant's
//! MAC from ever passing as an ack's: a copy of the elector's own follower object in the ack
//! file must not look like the consumer's acknowledgement of it.

use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use super::Grant;
use crate::atomic_file;

/// Key length in bytes (256 bits, the HMAC-SHA256 block-size-safe choice).
pub const KEY_LEN: usize = 32;

/// Largest token file read; a real one is about 110 bytes.
const MAX_TOKEN_FILE: u64 = 4 * 1024;

/// One elector incarnation's MAC key.
#[derive(Clone)]
pub struct Key {
    raw: [u8; KEY_LEN],
    hmac: hmac::Key,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        // Only ever compared to tell whether a re-read token changed; not a secret comparison.
        self.raw == other.raw
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("the kernel's random number generator is unavailable; refusing to run with a predictable grant key")]
    NoRandomness,
}

impl Key {
    /// 256 fresh bits from the kernel's CSPRNG (getrandom). There is no fallback: a guessable
    /// key would let anything on the pod's loopback forge a grant.
    pub fn generate() -> Result<Key, AuthError> {
        let mut raw = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut raw)
            .map_err(|_| AuthError::NoRandomness)?;
        Ok(Key::from_bytes(raw))
    }

    pub fn from_bytes(raw: [u8; KEY_LEN]) -> Key {
        Key {
            raw,
            hmac: hmac::Key::new(hmac::HMAC_SHA256, &raw),
        }
    }

    fn from_hex(text: &str) -> Option<Key> {
        let bytes = decode_hex(text)?;
        let raw: [u8; KEY_LEN] = bytes.try_into().ok()?;
        Some(Key::from_bytes(raw))
    }

    fn to_hex(&self) -> String {
        encode_hex(&self.raw)
    }

    fn tag(&self, message: &str) -> String {
        encode_hex(hmac::sign(&self.hmac, message.as_bytes()).as_ref())
    }

    fn verify(&self, message: &str, mac: Option<&str>) -> bool {
        let Some(tag) = mac.and_then(decode_hex) else {
            return false;
        };
        // Constant-time comparison inside ring.
        hmac::verify(&self.hmac, message.as_bytes(), &tag).is_ok()
    }

    /// Sets `g.mac` for `g` as a grant (flag file, toggle push).
    pub fn sign_grant(&self, g: &mut Grant) {
        g.mac = Some(self.tag(&grant_canonical(g)));
    }

    pub fn verify_grant(&self, g: &Grant) -> bool {
        self.verify(&grant_canonical(g), g.mac.as_deref())
    }

    /// Sets `a.mac` for `a` as an ack (ack file, body of a 2xx toggle answer).
    pub fn sign_ack(&self, a: &mut Grant) {
        a.mac = Some(self.tag(&ack_canonical(a)));
    }

    pub fn verify_ack(&self, a: &Grant) -> bool {
        self.verify(&ack_canonical(a), a.mac.as_deref())
    }
}

/// The string a grant's `mac` covers; see the module documentation.
pub fn grant_canonical(g: &Grant) -> String {
    format!(
        "grant-v1|{}|{}:{}|{}|{}|{}|{}:{}|{}|{}|{}",
        g.mode,
        g.holder.len(),
        g.holder,
        g.epoch,
        g.incarnation,
        g.seq,
        g.lease.len(),
        g.lease,
        g.expires_boottime_ns,
        g.renew_deadline_ns,
        g.kill_grace_ns,
    )
}

/// The string an ack's `mac` covers; see the module documentation.
pub fn ack_canonical(a: &Grant) -> String {
    if a.leader_unhealthy != 0 || a.leader_probe_failures != 0 {
        format!(
            "ack-v3|{}|{}|{}|{}|{}|{}|{}|{}",
            a.mode,
            a.incarnation,
            a.seq,
            a.leader_start_failures,
            a.leader_starts,
            a.leader_crashes,
            a.leader_unhealthy,
            a.leader_probe_failures
        )
    } else if a.leader_starts == 0 && a.leader_crashes == 0 {
        format!(
            "ack-v1|{}|{}|{}|{}",
            a.mode, a.incarnation, a.seq, a.leader_start_failures
        )
    } else {
        format!(
            "ack-v2|{}|{}|{}|{}|{}|{}",
            a.mode,
            a.incarnation,
            a.seq,
            a.leader_start_failures,
            a.leader_starts,
            a.leader_crashes
        )
    }
}

/// The content of `<flag-file>.token`: which elector incarnation the key belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub incarnation: u64,
    pub key: Key,
}

#[derive(Serialize, Deserialize)]
struct TokenFile {
    incarnation: u64,
    key: String,
}

/// Path of the token file kept beside a flag file: `<flag-file>.token`.
pub fn token_path(flag_file: &Path) -> PathBuf {
    let mut name = flag_file.as_os_str().to_owned();
    name.push(".token");
    PathBuf::from(name)
}

/// Writes the token atomically with mode 0600 (set by fchmod, whatever the umask).
pub fn write_token(path: &Path, token: &Token) -> io::Result<()> {
    let body = TokenFile {
        incarnation: token.incarnation,
        key: token.key.to_hex(),
    };
    let mut bytes = serde_json::to_vec(&body).map_err(io::Error::other)?;
    bytes.push(b'\n');
    atomic_file::write_with_mode(path, &bytes, 0o600)
}

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the elector's token file {path}: {source}")]
    Unreadable { path: PathBuf, source: io::Error },
    /// Not a small regular file: a FIFO, a device, a directory, or too large to be a token.
    #[error("refusing the token file {path}: {source}")]
    NotRegular { path: PathBuf, source: io::Error },
    /// Owned by another UID, or readable or writable by group or others.
    #[error("refusing the token file {path}: {reason}")]
    Untrusted { path: PathBuf, reason: String },
    #[error("the token file {path} is malformed: {source}")]
    Malformed {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("the token file {path} is malformed: key is not {} hex digits", KEY_LEN * 2)]
    BadKey { path: PathBuf },
}

impl TokenError {
    /// The file exists but this process may not read it: the containers run as different UIDs.
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, TokenError::Unreadable { source, .. }
            if source.kind() == io::ErrorKind::PermissionDenied)
    }
}

/// Reads the token file; `Ok(None)` when it does not exist (no elector has started yet).
///
/// Trusted only if it is a small regular file (opened no-follow, non-blocking) owned by one of
/// `owners` (this process's UID and the elector's) with no permission bits for group or others:
/// a file another UID could have planted or read holds no secret worth the name.
pub fn read_token(path: &Path, owners: &[u32]) -> Result<Option<Token>, TokenError> {
    let unreadable = |source| TokenError::Unreadable {
        path: path.to_owned(),
        source,
    };
    let untrusted = |reason: String| TokenError::Untrusted {
        path: path.to_owned(),
        reason,
    };
    let Some(file) = atomic_file::open_for_read(path).map_err(unreadable)? else {
        return Ok(None);
    };
    let meta = file.metadata().map_err(unreadable)?;
    atomic_file::check_regular(&meta, MAX_TOKEN_FILE).map_err(|source| TokenError::NotRegular {
        path: path.to_owned(),
        source,
    })?;
    if !owners.contains(&meta.uid()) {
        return Err(untrusted(format!(
            "owned by uid {}, not by a trusted uid {owners:?} (this process's or --elector-uid)",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(untrusted(format!(
            "mode {:o} lets group or others read or write it; the elector writes it 0600",
            meta.mode() & 0o777
        )));
    }
    let bytes = atomic_file::read_open_file(file, MAX_TOKEN_FILE).map_err(unreadable)?;
    let parsed: TokenFile =
        serde_json::from_slice(&bytes).map_err(|source| TokenError::Malformed {
            path: path.to_owned(),
            source,
        })?;
    let key = Key::from_hex(&parsed.key).ok_or_else(|| TokenError::BadKey {
        path: path.to_owned(),
    })?;
    Ok(Some(Token {
        incarnation: parsed.incarnation,
        key,
    }))
}

fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// Lower- or upper-case hex to bytes; `None` for odd lengths or other characters.
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    let value = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    digits
        .chunks_exact(2)
        .map(|pair| Some(value(pair[0])? << 4 | value(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::BootInstant;
    use crate::grant::{Mode, Order};
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    fn key(byte: u8) -> Key {
        Key::from_bytes([byte; KEY_LEN])
    }

    fn sample() -> Grant {
        Grant::leader(
            "pod-a_1a2b3c4d",
            7,
            Order {
                incarnation: 829_374_651_234,
                seq: 42,
            },
            "passmower/passmower",
            BootInstant::from_nanos(829_391_234_567),
        )
        .with_limits(Duration::from_secs(10), Duration::from_secs(3))
    }

    /// The documented canonical string, byte for byte: non-Rust consumers implement this.
    #[test]
    fn canonical_strings_are_the_documented_ones() {
        assert_eq!(
            grant_canonical(&sample()),
            "grant-v1|leader|14:pod-a_1a2b3c4d|7|829374651234|42|19:passmower/passmower|\
             829391234567|10000000000|3000000000"
        );
        let mut ack = sample();
        ack.mode = Mode::Stopped;
        ack.leader_start_failures = 2;
        assert_eq!(ack_canonical(&ack), "ack-v1|stopped|829374651234|42|2");
        ack.leader_starts = 5;
        ack.leader_crashes = 1;
        assert_eq!(ack_canonical(&ack), "ack-v2|stopped|829374651234|42|2|5|1");
        ack.leader_probe_failures = 7;
        assert_eq!(
            ack_canonical(&ack),
            "ack-v3|stopped|829374651234|42|2|5|1|0|7"
        );
        ack.leader_unhealthy = 2;
        assert_eq!(
            ack_canonical(&ack),
            "ack-v3|stopped|829374651234|42|2|5|1|2|7"
        );
    }

    /// The counts are covered: an ack whose counts were changed, or dropped, fails.
    #[test]
    fn an_acks_leader_counts_are_signed() {
        let k = key(3);
        let mut ack = sample();
        ack.mode = Mode::Leader;
        ack.leader_starts = 4;
        ack.leader_crashes = 2;
        ack.leader_unhealthy = 1;
        ack.leader_probe_failures = 3;
        k.sign_ack(&mut ack);
        assert!(k.verify_ack(&ack));
        for edit in [
            |a: &mut Grant| a.leader_starts = 3,
            |a: &mut Grant| a.leader_crashes = 0,
            |a: &mut Grant| {
                a.leader_starts = 0;
                a.leader_crashes = 0;
            },
            |a: &mut Grant| a.leader_unhealthy = 0,
            |a: &mut Grant| a.leader_probe_failures = 4,
            |a: &mut Grant| {
                a.leader_unhealthy = 0;
                a.leader_probe_failures = 0;
            },
        ] {
            let mut forged = ack.clone();
            edit(&mut forged);
            assert!(!k.verify_ack(&forged), "{forged:?}");
        }
    }

    /// A known-answer vector for docs/protocol.md: HMAC-SHA256 with the key 32 × 0x01.
    #[test]
    fn the_mac_is_hex_hmac_sha256_of_the_canonical_string() {
        let mut g = sample();
        key(1).sign_grant(&mut g);
        let mac = g.mac.clone().unwrap();
        assert_eq!(mac.len(), 64);
        assert!(mac
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        let direct = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, &[1u8; KEY_LEN]),
            grant_canonical(&g).as_bytes(),
        );
        assert_eq!(mac, encode_hex(direct.as_ref()));
        // The test vector of docs/protocol.md (also checked with Python's hmac module).
        assert_eq!(
            mac,
            "89c316b224fe0fae055fcfea63317c8f024b60714bf27215ddc6bf3c1c746aff"
        );
    }

    #[test]
    fn every_covered_field_is_bound_by_the_mac() {
        let k = key(7);
        let mut g = sample();
        k.sign_grant(&mut g);
        assert!(k.verify_grant(&g));
        assert!(!key(8).verify_grant(&g), "another key");
        let tamperings: [fn(&mut Grant); 11] = [
            |g| g.mode = Mode::Follower,
            |g| g.holder.push('x'),
            |g| g.epoch += 1,
            |g| g.incarnation += 1,
            |g| g.seq = u64::MAX,
            |g| g.lease.push('x'),
            |g| g.expires_boottime_ns = u64::MAX,
            |g| g.renew_deadline_ns += 1,
            |g| g.kill_grace_ns += 1,
            |g| g.mac = None,
            |g| g.mac = Some("zz".repeat(32)),
        ];
        for tamper in tamperings {
            let mut t = g.clone();
            tamper(&mut t);
            assert!(!k.verify_grant(&t), "tampered object verified: {t:?}");
        }
        // Humans' field is not covered.
        let mut t = g.clone();
        t.expires_at = Some("whenever".into());
        assert!(k.verify_grant(&t));
    }

    #[test]
    fn a_grant_mac_never_passes_as_an_ack_mac() {
        let k = key(3);
        let mut g = Grant::follower(
            "",
            0,
            Order {
                incarnation: 1,
                seq: 2,
            },
            "ns/l",
        );
        k.sign_grant(&mut g);
        assert!(!k.verify_ack(&g));
        k.sign_ack(&mut g);
        assert!(k.verify_ack(&g));
        g.leader_start_failures = 9;
        assert!(!k.verify_ack(&g));
    }

    #[test]
    fn length_prefixes_keep_a_separator_in_a_name_from_shifting_fields() {
        let order = Order {
            incarnation: 1,
            seq: 2,
        };
        let a = Grant::follower("a|1", 0, order, "ns/l");
        let b = Grant::follower("a", 0, order, "1|ns/l");
        assert_ne!(grant_canonical(&a), grant_canonical(&b));
    }

    #[test]
    fn token_round_trip_with_owner_and_mode_checks() {
        let dir = tempfile::tempdir().unwrap();
        let path = token_path(&dir.path().join("grant.json"));
        assert!(path.ends_with("grant.json.token"));
        let me = nix::unistd::geteuid().as_raw();
        assert!(read_token(&path, &[me]).unwrap().is_none());
        let token = Token {
            incarnation: 99,
            key: Key::generate().unwrap(),
        };
        write_token(&path, &token).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(read_token(&path, &[me]).unwrap(), Some(token.clone()));

        // Owned by someone else: refused (the test cannot chown, so trust another uid instead).
        let e = read_token(&path, &[me.wrapping_add(1)]).unwrap_err();
        assert!(e.to_string().contains("owned by uid"), "{e}");

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_token(&path, &[me]).unwrap_err();
        assert!(e.to_string().contains("group or others"), "{e}");

        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(dir.path(), &path).unwrap();
        assert!(read_token(&path, &[me]).is_err());

        // A FIFO is refused without blocking.
        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read_token(&path, &[me]).is_err());
        });
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(5)), Ok(true));
    }

    #[test]
    fn generated_keys_differ_and_hex_round_trips() {
        let a = Key::generate().unwrap();
        let b = Key::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(Key::from_hex(&a.to_hex()), Some(a.clone()));
        assert!(Key::from_hex("abc").is_none());
        assert!(Key::from_hex(&"g".repeat(64)).is_none());
        assert_eq!(format!("{a:?}"), "Key(<redacted>)");
    }
}
