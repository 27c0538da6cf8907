//! Checks from inside the pod that the write fence guards this install: a dry-run create of a
//! Secret, made with the pod's own ServiceAccount token, is what a cut-off leader's operator
//! write would be, and the apiserver's answer says whether a fence stands and which Lease it
//! follows.
//!
//! Why a dry run and not a read of the policy objects: the fence is cluster-scoped, and reading
//! it would need a ClusterRole the elector otherwise never has; and only the apiserver's answer
//! proves what it enforces for this ServiceAccount (a policy can exist and be bound to another
//! Lease, or be bound to another ServiceAccount's namespace by a mis-set `--namespace`). A dry
//! run stores nothing and runs every admission check.
//!
//! What an answer means depends on who holds the Lease when it was asked:
//! - a follower (another pod holds the Lease) that is **admitted** runs unfenced: a cut-off
//!   leader would not be stopped either ([`FenceState::Missing`]);
//! - any pod **refused by a fence that names another Lease** shares its ServiceAccount with
//!   another install, whose fence now also refuses this install's leader for ever
//!   ([`FenceState::Foreign`]);
//! - a follower refused by the fence of this Lease is fenced ([`FenceState::Active`]).
//!
//! A leader that is admitted learns nothing (fenced or not, its writes pass), and one refused by
//! the fence of its own Lease is seen before the apiserver's Lease informer caught up. A verdict
//! that raises an alarm is taken only when a second check, [`CONFIRM_AFTER`] later with the same
//! holder, agrees: right after a handover the apiserver may still judge by the previous holder.
//! The check never touches the election: it runs in its own task and reads the loop's status.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::events::{Details, EventRecorder, Kind};
use super::status::SharedStatus;
use crate::clock::BootInstant;
use crate::election::identity::HolderIdentity;
use crate::wire::DENIAL_PREFIX;

/// How long after a verdict that raises an alarm the check is made again before it is taken.
pub const CONFIRM_AFTER: Duration = Duration::from_secs(5);
/// The name prefix of the Secret the dry run would create (nothing is ever stored).
pub const PROBE_SECRET_PREFIX: &str = "passmower-elector-fence-check-";

/// What the checks found, as `passmower_elector_write_fence{state}` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceState {
    /// Not known yet: no check could tell (this pod has only led, the dry run was not allowed).
    Unknown,
    /// A follower's write was refused by the fence of this install's Lease.
    Active,
    /// A follower's write was admitted while another pod held the Lease.
    Missing,
    /// The fence on this ServiceAccount follows another Lease.
    Foreign,
}

impl FenceState {
    pub const ALL: [FenceState; 4] = [
        FenceState::Unknown,
        FenceState::Active,
        FenceState::Missing,
        FenceState::Foreign,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FenceState::Unknown => "unknown",
            FenceState::Active => "active",
            FenceState::Missing => "missing",
            FenceState::Foreign => "foreign",
        }
    }
}

/// The apiserver's answer to one dry-run write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Admitted,
    /// Refused by a passmower-elector fence that follows Lease `lease` (`namespace/name`).
    Fenced {
        lease: String,
    },
    /// Refused otherwise (RBAC, another admission check), or no answer: the check tells nothing.
    Inconclusive(String),
}

/// Who held the Lease, as the election loop saw it, when a check was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// This process leads.
    Leader,
    /// Another pod holds the Lease (its holder identity).
    Follower(String),
    /// Nothing to judge by: the Lease not yet seen, released, or held by this pod's previous
    /// elector process (whose writes the fence admits as this pod's).
    Undecided,
}

/// The role `status` gives at `now`.
pub fn role_of(status: &super::status::Status, now: BootInstant) -> Role {
    if status.is_leader_at(now) {
        return Role::Leader;
    }
    if !status.lease_observed || status.holder.is_empty() {
        return Role::Undecided;
    }
    let ours = HolderIdentity::parse(&status.identity);
    let theirs = HolderIdentity::parse(&status.holder);
    match (ours, theirs) {
        (Some(o), Some(t)) if o.same_pod(&t) => Role::Undecided,
        _ if status.holder == status.identity => Role::Undecided,
        _ => Role::Follower(status.holder.clone()),
    }
}

/// What one answer says, given the role before and after it and this install's Lease
/// (`namespace/name`). `None`: nothing new (keep the previous state).
pub fn judge(before: &Role, after: &Role, answer: &Answer, own_lease: &str) -> Option<FenceState> {
    if before != after || *before == Role::Undecided {
        return None;
    }
    match (answer, before) {
        (Answer::Fenced { lease }, _) if lease != own_lease => Some(FenceState::Foreign),
        (Answer::Fenced { .. }, Role::Follower(_)) => Some(FenceState::Active),
        (Answer::Admitted, Role::Follower(_)) => Some(FenceState::Missing),
        _ => None,
    }
}

/// Reads the answer out of an API result.
fn answer_of<T>(result: Result<T, kube::Error>) -> Answer {
    match result {
        Ok(_) => Answer::Admitted,
        Err(kube::Error::Api(status)) => match fence_lease(&status.message) {
            Some(lease) if status.code == 403 => Answer::Fenced { lease },
            _ => Answer::Inconclusive(format!("{} {}", status.code, status.message)),
        },
        Err(e) => Answer::Inconclusive(e.to_string()),
    }
}

/// The `namespace/name` of the Lease a fence's refusal names (see
/// `inject::fence::fence_policy_spec_for`'s message).
pub fn fence_lease(message: &str) -> Option<String> {
    let rest = &message[message.find(DENIAL_PREFIX)?..];
    let after = ["does not hold Lease ", "the holder of Lease "]
        .iter()
        .find_map(|marker| rest.find(marker).map(|i| &rest[i + marker.len()..]))?;
    let lease: String = after
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ';' && *c != ',')
        .collect();
    lease.contains('/').then_some(lease)
}

/// The checker: one per elector.
pub struct FenceCheck {
    pub client: Client,
    pub namespace: String,
    pub lease_name: String,
    pub period: Duration,
    pub timeout: Duration,
    pub status: SharedStatus,
    pub gauge: Family<Vec<(&'static str, &'static str)>, Gauge>,
    pub events: Option<EventRecorder>,
}

impl FenceCheck {
    /// Runs the checks for as long as the elector runs.
    pub fn spawn(self) {
        tokio::spawn(self.run());
    }

    async fn run(self) {
        let own_lease = format!("{}/{}", self.namespace, self.lease_name);
        let mut state = FenceState::Unknown;
        self.publish(state);
        let mut said_inconclusive = false;
        // The first check once the election has had a moment to see the Lease.
        tokio::time::sleep(CONFIRM_AFTER.min(self.period)).await;
        loop {
            let verdict = match self.check(&own_lease, &mut said_inconclusive).await {
                Some(v) if v != state && v != FenceState::Active => {
                    // An alarm is raised only when a second check agrees.
                    tokio::time::sleep(CONFIRM_AFTER).await;
                    self.check(&own_lease, &mut said_inconclusive)
                        .await
                        .filter(|again| *again == v)
                }
                other => other,
            };
            if let Some(v) = verdict.filter(|v| *v != state) {
                self.report(state, v, &own_lease);
                state = v;
                self.publish(state);
            }
            tokio::time::sleep(self.period).await;
        }
    }

    /// One dry-run write, judged by the roles before and after it.
    async fn check(&self, own_lease: &str, said_inconclusive: &mut bool) -> Option<FenceState> {
        let before = role_of(&self.status.get(), BootInstant::now());
        if before == Role::Undecided {
            return None;
        }
        let answer = self.dry_run().await;
        let after = role_of(&self.status.get(), BootInstant::now());
        if let Answer::Inconclusive(why) = &answer {
            if !std::mem::replace(said_inconclusive, true) {
                tracing::warn!(
                    lease = %own_lease,
                    answer = %why,
                    "cannot check the write fence: a dry-run create of a Secret by this pod's \
                     ServiceAccount got no answer that tells (it needs `create` on secrets, \
                     which Passmower's own Role grants); passmower_elector_write_fence stays \
                     at its last state"
                );
            }
        }
        judge(&before, &after, &answer, own_lease)
    }

    async fn dry_run(&self) -> Answer {
        let secret = Secret {
            metadata: ObjectMeta {
                generate_name: Some(PROBE_SECRET_PREFIX.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        let params = PostParams {
            dry_run: true,
            field_manager: Some("passmower-elector-fence-check".to_owned()),
        };
        let secrets = Api::<Secret>::namespaced(self.client.clone(), &self.namespace);
        match tokio::time::timeout(self.timeout, secrets.create(&params, &secret)).await {
            Ok(result) => answer_of(result),
            Err(_) => Answer::Inconclusive(format!("no answer within {:?}", self.timeout)),
        }
    }

    fn publish(&self, state: FenceState) {
        for s in FenceState::ALL {
            self.gauge
                .get_or_create(&vec![("state", s.as_str())])
                .set(i64::from(s == state));
        }
    }

    fn report(&self, from: FenceState, to: FenceState, own_lease: &str) {
        let (kind, reason, message) = match to {
            FenceState::Missing => (
                Kind::Warning,
                "WriteFenceMissing",
                format!(
                    "no write fence guards this install: a dry-run Secret write by this follower \
                     pod was admitted while another pod held Lease {own_lease}, so the apiserver \
                     would not stop a cut-off leader's operator writes; install the fence \
                     (inject without --no-fence, or the chart with fence.enabled=true) for this \
                     namespace and ServiceAccount"
                ),
            ),
            FenceState::Foreign => (
                Kind::Warning,
                "WriteFenceForeign",
                format!(
                    "the write fence on this pod's ServiceAccount follows another Lease than \
                     {own_lease}: another install shares the ServiceAccount, and its fence \
                     refuses every operator write of this install's leader; give each install \
                     its own ServiceAccount"
                ),
            ),
            FenceState::Active => (
                Kind::Normal,
                "WriteFenceActive",
                format!("the write fence of Lease {own_lease} refuses this follower's writes"),
            ),
            FenceState::Unknown => return,
        };
        match kind {
            Kind::Warning => tracing::error!(lease = %own_lease, state = to.as_str(), "{message}"),
            Kind::Normal => tracing::info!(lease = %own_lease, state = to.as_str(), "{message}"),
        }
        // The first Active says nothing new; a recovery from an alarm does.
        if to == FenceState::Active && from == FenceState::Unknown {
            return;
        }
        if let Some(events) = &self.events {
            events.record(kind, reason, message, Details::default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: &str = "auth/passmower-elector";
    const UID_A: &str = "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40";
    const UID_B: &str = "1a9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f41";

    fn follower() -> Role {
        Role::Follower(format!("b_{UID_B}_1"))
    }

    #[test]
    fn a_follower_admitted_runs_unfenced_and_one_refused_by_its_own_lease_is_fenced() {
        let f = follower();
        assert_eq!(
            judge(&f, &f, &Answer::Admitted, OWN),
            Some(FenceState::Missing)
        );
        let own = Answer::Fenced { lease: OWN.into() };
        assert_eq!(judge(&f, &f, &own, OWN), Some(FenceState::Active));
    }

    #[test]
    fn a_refusal_naming_another_lease_is_foreign_for_leader_and_follower() {
        let other = Answer::Fenced {
            lease: "auth/other-install".into(),
        };
        assert_eq!(
            judge(&Role::Leader, &Role::Leader, &other, OWN),
            Some(FenceState::Foreign)
        );
        let f = follower();
        assert_eq!(judge(&f, &f, &other, OWN), Some(FenceState::Foreign));
    }

    #[test]
    fn a_leader_learns_nothing_from_its_own_fence_or_an_admission() {
        let own = Answer::Fenced { lease: OWN.into() };
        assert_eq!(judge(&Role::Leader, &Role::Leader, &own, OWN), None);
        assert_eq!(
            judge(&Role::Leader, &Role::Leader, &Answer::Admitted, OWN),
            None
        );
    }

    #[test]
    fn a_role_that_changed_during_the_check_or_an_inconclusive_answer_says_nothing() {
        let f = follower();
        assert_eq!(judge(&f, &Role::Leader, &Answer::Admitted, OWN), None);
        assert_eq!(
            judge(&f, &Role::Follower("c_x_1".into()), &Answer::Admitted, OWN),
            None
        );
        assert_eq!(
            judge(&f, &f, &Answer::Inconclusive("403 rbac".into()), OWN),
            None
        );
        assert_eq!(
            judge(&Role::Undecided, &Role::Undecided, &Answer::Admitted, OWN),
            None
        );
    }

    #[test]
    fn the_lease_is_read_from_both_refusal_messages_of_the_fence() {
        let held = format!(
            "secrets is forbidden: ValidatingAdmissionPolicy 'passmower-elector-fence.auth.pm' \
             with binding 'passmower-elector-fence.auth.pm' denied request: {DENIAL_PREFIX}: pod \
             b does not hold Lease auth/other (holder a_{UID_A}_1); only the leader writes \
             operator objects"
        );
        assert_eq!(fence_lease(&held).as_deref(), Some("auth/other"));
        let unbound = format!(
            "{DENIAL_PREFIX}: the request carries no pod-bound ServiceAccount token, so it \
             cannot be tied to the holder of Lease auth/passmower-elector"
        );
        assert_eq!(
            fence_lease(&unbound).as_deref(),
            Some("auth/passmower-elector")
        );
        assert_eq!(fence_lease("secrets \"x\" is forbidden: User cannot"), None);
    }

    #[test]
    fn a_previous_elector_of_this_pod_holding_the_lease_is_not_another_pod() {
        let status = super::super::status::Status {
            identity: format!("a_{UID_A}_2"),
            holder: format!("a_{UID_A}_1"),
            lease_observed: true,
            ..Default::default()
        };
        assert_eq!(role_of(&status, BootInstant::now()), Role::Undecided);
        let other = super::super::status::Status {
            holder: format!("b_{UID_B}_1"),
            ..status
        };
        assert_eq!(
            role_of(&other, BootInstant::now()),
            Role::Follower(format!("b_{UID_B}_1"))
        );
    }
}
