//! What the pod's previous elector process left on the shared volume, read before this process
//! writes anything there: its token (incarnation and key), its last flag-file object and the
//! consumer's ack — each trusted only if its MAC verifies under that key for that incarnation,
//! so nothing another container could write without the key can start an adoption.

use std::path::Path;

use crate::clock::BootInstant;
use crate::election::adoption::{Inheritance, InheritedAck};
use crate::grant::auth::{self, Key};
use crate::grant::{self, Grant, Mode};

/// Reads the previous elector's objects; `None` when there is no trusted token (first start of
/// the pod, or a file this UID did not write), or no flag-file object verifies under it.
pub fn read(flag_file: &Path, now: BootInstant) -> Option<Inheritance> {
    let me = nix::unistd::geteuid().as_raw();
    let token = match auth::read_token(&auth::token_path(flag_file), &[me]) {
        Ok(Some(token)) => token,
        Ok(None) => return None,
        Err(e) => {
            tracing::info!(error = %e, "no trusted token of a previous elector; nothing to adopt");
            return None;
        }
    };
    let last = match grant::read_file(flag_file) {
        Ok(Some(g)) if g.incarnation == token.incarnation && token.key.verify_grant(&g) => g,
        Ok(Some(g)) => {
            tracing::info!(
                incarnation = g.incarnation,
                token_incarnation = token.incarnation,
                "the flag file's object does not verify under the previous elector's token; \
                 nothing to adopt"
            );
            return None;
        }
        Ok(None) => return None,
        Err(e) => {
            tracing::info!(error = %e, "cannot read the previous elector's flag file");
            return None;
        }
    };
    let ack = grant::read_file(&grant::ack_path(flag_file)).ok().flatten();
    Some(Inheritance {
        holder: last.holder.clone(),
        leader_until: leader_until(&last, now),
        epoch: last.epoch,
        consumer: consumer_state(ack.as_ref(), &token.key, token.incarnation),
    })
}

/// The expiry of `last` when it is a leader grant a consumer would obey at `now`: none further
/// ahead than the renew deadline it announces (a supervisor refuses such a grant, so no app
/// runs under it).
fn leader_until(last: &Grant, now: BootInstant) -> Option<BootInstant> {
    (last.mode == Mode::Leader && last.check_leader_bound(now).is_ok()).then(|| last.expiry())
}

/// What the consumer's ack says, if it verifies under `key`. A leader ack counts only for
/// `incarnation`: the supervisor acks the object it obeyed, and signs with the token it trusts.
fn consumer_state(ack: Option<&Grant>, key: &Key, incarnation: u64) -> InheritedAck {
    match ack {
        Some(a) if key.verify_ack(a) => match a.mode {
            Mode::Leader if a.incarnation == incarnation => InheritedAck::Leader {
                failures: a.leader_start_failures,
            },
            Mode::Leader => InheritedAck::Unknown,
            Mode::Follower => InheritedAck::Follower,
            Mode::Stopped => InheritedAck::Stopped,
        },
        _ => InheritedAck::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::grant::auth::Token;
    use crate::grant::Order;

    const R: Duration = Duration::from_secs(10);

    struct Volume {
        _dir: tempfile::TempDir,
        flag: std::path::PathBuf,
        key: Key,
    }

    /// A volume as elector incarnation 7 left it: its token, `last` in the flag file (signed),
    /// and `ack` in the ack file (signed with the ack MAC), if given.
    fn volume(last: Grant, ack: Option<Grant>) -> Volume {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("grant.json");
        let key = Key::generate().unwrap();
        auth::write_token(
            &auth::token_path(&flag),
            &Token {
                incarnation: 7,
                key: key.clone(),
            },
        )
        .unwrap();
        let mut last = last.with_limits(R, Duration::from_secs(3));
        key.sign_grant(&mut last);
        grant::write_file(&flag, &last).unwrap();
        if let Some(mut ack) = ack {
            key.sign_ack(&mut ack);
            grant::write_file(&grant::ack_path(&flag), &ack).unwrap();
        }
        Volume {
            _dir: dir,
            flag,
            key,
        }
    }

    fn leader(seq: u64, expires: BootInstant) -> Grant {
        Grant::leader(
            "pod-a_u_1",
            4,
            Order {
                incarnation: 7,
                seq,
            },
            "ns/l",
            expires,
        )
    }

    #[test]
    fn a_verified_leader_grant_and_ack_are_inherited() {
        let now = BootInstant::now();
        let expires = now.saturating_add(Duration::from_secs(5));
        let mut ack = leader(9, expires);
        ack.leader_start_failures = 2;
        let v = volume(leader(9, expires), Some(ack));
        let inh = read(&v.flag, now).expect("inherited");
        assert_eq!(inh.holder, "pod-a_u_1");
        assert_eq!(inh.leader_until, Some(expires));
        assert_eq!(inh.epoch, 4);
        assert_eq!(inh.consumer, InheritedAck::Leader { failures: 2 });
    }

    #[test]
    fn forged_or_foreign_objects_are_not_inherited() {
        let now = BootInstant::now();
        let expires = now.saturating_add(Duration::from_secs(5));
        let v = volume(leader(9, expires), Some(leader(9, expires)));
        // A flag file rewritten without the key: nothing to adopt.
        let mut forged = grant::read_file(&v.flag).unwrap().unwrap();
        forged.seq = 10;
        grant::write_file(&v.flag, &forged).unwrap();
        assert_eq!(read(&v.flag, now), None);
        // An ack without a valid MAC says nothing about the app.
        let v = volume(leader(9, expires), None);
        let mut ack = leader(9, expires);
        Key::generate().unwrap().sign_ack(&mut ack);
        grant::write_file(&grant::ack_path(&v.flag), &ack).unwrap();
        assert_eq!(read(&v.flag, now).unwrap().consumer, InheritedAck::Unknown);
        // A leader ack of another incarnation does not tie the app to this grant.
        let mut other = leader(9, expires);
        other.incarnation = 6;
        v.key.sign_ack(&mut other);
        grant::write_file(&grant::ack_path(&v.flag), &other).unwrap();
        assert_eq!(read(&v.flag, now).unwrap().consumer, InheritedAck::Unknown);
    }

    #[test]
    fn a_follower_object_or_an_absurd_expiry_is_no_leader_grant() {
        let now = BootInstant::now();
        let follower = Grant::follower(
            "pod-b_u_1",
            4,
            Order {
                incarnation: 7,
                seq: 3,
            },
            "ns/l",
        );
        let mut stopped = follower.clone();
        stopped.mode = Mode::Stopped;
        let v = volume(follower, Some(stopped));
        let inh = read(&v.flag, now).unwrap();
        assert_eq!(inh.leader_until, None);
        assert_eq!(inh.consumer, InheritedAck::Stopped);
        let far = now.saturating_add(R + Duration::from_secs(1));
        let v = volume(leader(9, far), Some(leader(9, far)));
        assert_eq!(read(&v.flag, now).unwrap().leader_until, None);
    }

    #[test]
    fn nothing_is_inherited_without_a_token() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read(&dir.path().join("grant.json"), BootInstant::now()),
            None
        );
    }
}
