//! Which objects the supervisor may obey: only those it can tie to its elector — a MAC under the
//! key in the elector's token file, for the incarnation that file names — and whose content stays
//! within what that elector announced. Everything else is refused, never obeyed.

use std::path::PathBuf;
use std::time::Duration;

use crate::clock::BootInstant;
use crate::grant::auth::{self, Token};
use crate::grant::Grant;

use crate::supervise::mode;

/// How often a persistent token problem is logged again.
const COMPLAINT_INTERVAL: Duration = Duration::from_secs(30);

/// Why an object was refused; each maps to the toggle's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no MAC, or one that does not verify under the elector's key.
    Unauthenticated(String),
    /// 403: another incarnation than the token names, or no token to check against.
    Forbidden(String),
    /// 400: authentic, but outside what any consumer may accept (see [`mode::admissible`]).
    Invalid(String),
}

impl Refusal {
    pub fn reason(&self) -> &str {
        match self {
            Refusal::Unauthenticated(r) | Refusal::Forbidden(r) | Refusal::Invalid(r) => r,
        }
    }
}

/// Lets one line through per second and counts the rest.
#[derive(Debug, Default)]
pub struct LogThrottle {
    last: Option<BootInstant>,
    suppressed: u64,
}

impl LogThrottle {
    /// Whether to log now; `Some(n)`: yes, and `n` lines were suppressed since the last one.
    pub fn admit(&mut self, now: BootInstant) -> Option<u64> {
        if self
            .last
            .is_some_and(|t| now.saturating_since(t) < Duration::from_secs(1))
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// The elector's token as last read, and where to read it again.
pub struct Trust {
    path: PathBuf,
    /// UIDs a token file may be owned by: ours and the elector's (`--elector-uid`).
    owners: Vec<u32>,
    token: Option<Token>,
    last_complaint: Option<BootInstant>,
}

impl Trust {
    pub fn new(flag_file: &std::path::Path, elector_uid: u32) -> Self {
        let me = nix::unistd::geteuid().as_raw();
        let mut owners = vec![me];
        if elector_uid != me {
            owners.push(elector_uid);
        }
        Trust {
            path: auth::token_path(flag_file),
            owners,
            token: None,
            last_complaint: None,
        }
    }

    /// Reads the token file again. A token that cannot be read or trusted leaves the one
    /// already known in place: a planted or broken file must not make us forget the real key.
    pub fn reload(&mut self) {
        match auth::read_token(&self.path, &self.owners) {
            Ok(Some(token)) => {
                if self.token.as_ref() != Some(&token) {
                    tracing::info!(incarnation = token.incarnation, path = %self.path.display(),
                        "elector token loaded");
                    self.token = Some(token);
                }
            }
            Ok(None) => {
                if self.token.is_none() {
                    tracing::debug!(path = %self.path.display(), "no elector token yet");
                }
            }
            Err(e) => {
                let now = BootInstant::now();
                let due = self
                    .last_complaint
                    .is_none_or(|t| now.saturating_since(t) >= COMPLAINT_INTERVAL);
                if !due {
                    return;
                }
                self.last_complaint = Some(now);
                if e.is_permission_denied() {
                    let cause = unreadable_cause(&self.path);
                    tracing::error!(error = %e, uid = self.owners[0],
                        "cannot read the elector's token file {}: {cause}; so no grant can be \
                         verified and the app runs as follower only", self.path.display());
                } else {
                    tracing::error!(error = %e,
                        "the elector's token file cannot be trusted; grants of an incarnation it \
                         would name are refused (the app runs as follower until a trusted token \
                         names the elector)");
                }
            }
        }
    }

    /// Checks `g`: authentic (the token is read again once if it is not, in case the elector
    /// just restarted) and admissible at `now`.
    pub fn check(&mut self, g: &Grant, now: BootInstant) -> Result<(), Refusal> {
        if self.authenticate(g).is_err() {
            self.reload();
            self.authenticate(g)?;
        }
        mode::admissible(g, now).map_err(Refusal::Invalid)
    }

    fn authenticate(&self, g: &Grant) -> Result<(), Refusal> {
        let Some(token) = &self.token else {
            return Err(Refusal::Forbidden(format!(
                "no trusted elector token in {}: nothing can be verified",
                self.path.display()
            )));
        };
        if g.incarnation != token.incarnation {
            return Err(Refusal::Forbidden(format!(
                "incarnation {} is not the running elector's ({})",
                g.incarnation, token.incarnation
            )));
        }
        if g.mac.is_none() {
            return Err(Refusal::Unauthenticated(
                "no mac: the object is not signed by the elector".into(),
            ));
        }
        if !token.key.verify_grant(g) {
            return Err(Refusal::Unauthenticated(
                "mac does not verify under the elector's key".into(),
            ));
        }
        Ok(())
    }

    /// Signs an ack with the running elector's key; unsigned when no token is known (such an
    /// ack acknowledges nothing, which is the truth: nothing was obeyed).
    pub fn sign_ack(&self, ack: &mut Grant) {
        match &self.token {
            Some(t) => t.key.sign_ack(ack),
            None => ack.mac = None,
        }
    }
}

/// CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (capability numbers 1 and 2): either lets root read
/// a file another user owns with mode 0600.
const FILE_OVERRIDE_CAPS: u64 = (1 << 1) | (1 << 2);

/// Why this process cannot read the token at `path`, with the fix: from its effective UID and
/// capabilities (`/proc/self/status`) and the file's owner and mode.
fn unreadable_cause(path: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let (euid, cap_eff) = process_credentials(&status);
    let euid = euid.unwrap_or_else(|| nix::unistd::geteuid().as_raw());
    // lstat: the token is opened without following links, and the directory is readable.
    let file = std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.uid(), m.mode() & 0o7777));
    explain_unreadable(euid, cap_eff, file)
}

/// The effective UID (the second field of `Uid:`) and the effective capability set (`CapEff:`,
/// hex) from the text of `/proc/self/status`.
fn process_credentials(status: &str) -> (Option<u32>, Option<u64>) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let euid = field("Uid:")
        .and_then(|v| v.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok());
    let cap_eff = field("CapEff:").and_then(|v| u64::from_str_radix(v, 16).ok());
    (euid, cap_eff)
}

/// The cause of an EACCES on the token, and its fix. `file`: the token's owner and mode.
fn explain_unreadable(euid: u32, cap_eff: Option<u64>, file: Option<(u32, u32)>) -> String {
    let Some((owner, mode)) = file else {
        return format!("this process runs as uid {euid} and may not look it up in its directory");
    };
    let file = format!("owned by uid {owner}, mode {mode:04o}");
    if owner == euid {
        return format!(
            "it is {file}, and this process runs as that uid but the mode gives it no read \
             permission; the elector writes it 0600, so something else changed it"
        );
    }
    if euid == 0 {
        return match cap_eff {
            Some(caps) if caps & FILE_OVERRIDE_CAPS == 0 => format!(
                "it is {file}, and this process runs as uid 0 without CAP_DAC_OVERRIDE \
                 (capabilities dropped), so root reads only its own 0600 files; fix: run the \
                 elector container as uid 0 too (inject does this for a root app whose \
                 capabilities drop DAC_OVERRIDE; keep its capabilities dropped), or give the app \
                 container CAP_DAC_OVERRIDE back"
            ),
            _ => format!(
                "it is {file}, and this process runs as uid 0 with CAP_DAC_OVERRIDE, so a security \
                 module (SELinux, AppArmor) or the volume denies it; fix: run the elector \
                 container as uid 0 too, so the token is the supervisor's own file"
            ),
        };
    }
    format!(
        "it is {file}, and this process runs as uid {euid}; fix: run the elector container as the \
         app's UID {euid} (inject does this when the app sets a non-root runAsUser), or the \
         supervisor as root with --elector-uid set to the elector's UID"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::auth::Key;
    use crate::grant::Order;

    fn signed(key: &Key, incarnation: u64, seq: u64, ttl: Duration) -> Grant {
        let mut g = Grant::leader(
            "pod",
            1,
            Order { incarnation, seq },
            "ns/l",
            BootInstant::now().saturating_add(ttl),
        )
        .with_limits(Duration::from_secs(10), Duration::from_secs(3));
        key.sign_grant(&mut g);
        g
    }

    #[test]
    fn only_objects_signed_for_the_tokens_incarnation_pass_and_a_restart_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("grant.json");
        let me = nix::unistd::geteuid().as_raw();
        let mut trust = Trust::new(&flag, me);
        let now = BootInstant::now();
        let k1 = Key::generate().unwrap();
        let g = signed(&k1, 1, 1, Duration::from_secs(5));
        assert!(matches!(trust.check(&g, now), Err(Refusal::Forbidden(_))));

        let path = auth::token_path(&flag);
        auth::write_token(
            &path,
            &Token {
                incarnation: 1,
                key: k1.clone(),
            },
        )
        .unwrap();
        assert_eq!(
            trust.check(&g, now),
            Ok(()),
            "read again on the first failure"
        );

        let mut unsigned = g.clone();
        unsigned.mac = None;
        assert!(matches!(
            trust.check(&unsigned, now),
            Err(Refusal::Unauthenticated(_))
        ));
        let mut forged = g.clone();
        forged.seq = u64::MAX;
        assert!(matches!(
            trust.check(&forged, now),
            Err(Refusal::Unauthenticated(_))
        ));
        let other = signed(&Key::generate().unwrap(), 1, 2, Duration::from_secs(5));
        assert!(matches!(
            trust.check(&other, now),
            Err(Refusal::Unauthenticated(_))
        ));

        // A plausible forgery from a future incarnation, signed with its own key.
        let k3 = Key::generate().unwrap();
        let future = signed(&k3, now.as_nanos(), u64::MAX, Duration::from_secs(5));
        assert!(matches!(
            trust.check(&future, now),
            Err(Refusal::Forbidden(_))
        ));

        // The elector restarts: a new token names the new incarnation, and only that one.
        let k2 = Key::generate().unwrap();
        auth::write_token(
            &path,
            &Token {
                incarnation: 2,
                key: k2.clone(),
            },
        )
        .unwrap();
        assert_eq!(
            trust.check(&signed(&k2, 2, 1, Duration::from_secs(5)), now),
            Ok(())
        );
        assert!(matches!(trust.check(&g, now), Err(Refusal::Forbidden(_))));

        // Authentic but absurd: an expiry beyond the announced renew deadline.
        let far = signed(&k2, 2, 3, Duration::from_secs(60));
        assert!(matches!(trust.check(&far, now), Err(Refusal::Invalid(_))));
    }

    #[test]
    fn an_unreadable_token_is_explained_by_the_processes_uid_and_capabilities() {
        let status = "Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\n\
                      CapEff:\t00000000a80425f9\nCapBnd:\t000001ffffffffff\n";
        assert_eq!(process_credentials(status), (Some(0), Some(0xa80425f9)));
        assert_eq!(process_credentials(""), (None, None));

        let dropped = explain_unreadable(0, Some(0), Some((65532, 0o600)));
        assert!(
            dropped.contains(
                "owned by uid 65532, mode 0600, and this process runs as uid 0 without \
                 CAP_DAC_OVERRIDE (capabilities dropped)"
            ),
            "{dropped}"
        );
        assert!(dropped.contains("fix: run the elector container as uid 0"));
        // containerd's default set (with DAC_OVERRIDE): something else denies it.
        let lsm = explain_unreadable(0, Some(0xa80425fb), Some((65532, 0o600)));
        assert!(lsm.contains("with CAP_DAC_OVERRIDE"), "{lsm}");
        let other = explain_unreadable(1000, Some(0), Some((65532, 0o600)));
        assert!(
            other.contains("runs as uid 1000; fix: run the elector container as the app's UID"),
            "{other}"
        );
        let own = explain_unreadable(1000, Some(0), Some((1000, 0o000)));
        assert!(own.contains("no read permission"), "{own}");
    }

    #[test]
    fn an_untrusted_token_file_does_not_replace_the_known_key() {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("grant.json");
        let me = nix::unistd::geteuid().as_raw();
        let mut trust = Trust::new(&flag, me);
        let path = auth::token_path(&flag);
        let k1 = Key::generate().unwrap();
        auth::write_token(
            &path,
            &Token {
                incarnation: 1,
                key: k1.clone(),
            },
        )
        .unwrap();
        trust.reload();
        // Someone replaces it with a world-readable file naming their own key.
        let k9 = Key::generate().unwrap();
        auth::write_token(
            &path,
            &Token {
                incarnation: 9,
                key: k9.clone(),
            },
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let now = BootInstant::now();
        let planted = signed(&k9, 9, 1, Duration::from_secs(5));
        assert!(trust.check(&planted, now).is_err());
        assert_eq!(
            trust.check(&signed(&k1, 1, 2, Duration::from_secs(5)), now),
            Ok(())
        );
    }
}
