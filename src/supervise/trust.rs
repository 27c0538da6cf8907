//! Which objects the supervisor may obey: only those it can tie to its elector — a MAC under the
//! key in the elector's token file, for the incarnation that file names — and whose content stays
//! within what that elector announced. Everything else is refused, never obeyed.

use std::path::PathBuf;
use std::time::Duration;

use crate::clock::BootInstant;
use crate::grant::auth::{self, Token};
use crate::grant::Grant;

use super::mode;

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
                    tracing::error!(error = %e, uid = self.owners[0],
                        "cannot read the elector's token file, so no grant can be verified and the \
                         app runs as follower only; fix: run the elector container as the app's UID \
                         (inject does this when the app sets a non-root runAsUser), or the \
                         supervisor as root with --elector-uid set to the elector's UID");
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
