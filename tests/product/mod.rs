//! The product's side of the test kit: what needs passmower-elector's own types, which the kit
//! (`pme-testkit`, no dependency on the product) cannot have. The elector's part in the
//! `supervise` scenarios (its token, grants signed as it signs them), the product's reader of
//! grant files for the grant oracle, the elector's RBAC for test namespaces, and the write
//! fence `inject` generates; in [`install`], the install pages' tests' view of the elector
//! and the replica guard. Compiled into each tier that needs it (`#[path]`), so each tier uses
//! a part of it.

pub mod install;

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::rbac::v1::PolicyRule;
use passmower_elector::clock::BootInstant;
use passmower_elector::grant::auth::{self, Key, Token};
use passmower_elector::grant::{self, Grant, Mode, Order};
use passmower_elector::inject::fence::{self, FenceTarget};
use pme_testkit::cluster::ELECTOR_SERVICE_ACCOUNT;
use pme_testkit::{supervise, BootTime, Cluster, GrantView, TestNs, DEFAULT_LEASE_NAME};

/// What the supervise scenarios use of the kit besides the sandbox and the supervisor.
pub use pme_testkit::supervise::{alive, boot_secs, environ_var, exists, http, zombie_children};

/// The product's binary, as cargo names it to the test crates.
pub const BIN: &str = env!("CARGO_BIN_EXE_passmower-elector");

// === the elector's RBAC ===

/// Exactly what an elector needs, and no more: the library's own statement of it
/// ([`passmower_elector::inject::elector_lease_rules`], which `inject` puts in the Role it
/// generates and the chart's Role is checked against), so tests grant what users get.
pub fn elector_lease_rules(lease_name: &str) -> Vec<PolicyRule> {
    passmower_elector::inject::elector_lease_rules(lease_name)
}

/// Test namespaces with the elector's RBAC.
pub trait ElectorNamespaces {
    /// A fresh namespace whose elector identity has exactly [`elector_lease_rules`] for
    /// [`DEFAULT_LEASE_NAME`].
    fn new_namespace(&self) -> impl std::future::Future<Output = TestNs> + Send;
}

impl ElectorNamespaces for Cluster {
    async fn new_namespace(&self) -> TestNs {
        self.new_namespace_with(DEFAULT_LEASE_NAME, &elector_lease_rules(DEFAULT_LEASE_NAME))
            .await
    }
}

// === the write fence ===

/// Installs the fence `inject` generates for `ns` (ServiceAccount `passmower`, its Lease).
pub async fn install_fence(admin: &kube::Client, ns: &TestNs) -> String {
    let name = fence::fence_policy_name(&ns.name, "passmower");
    let target = FenceTarget {
        namespace: &ns.name,
        service_account: ELECTOR_SERVICE_ACCOUNT,
        lease: &ns.lease_name,
    };
    let objects: Vec<serde_json::Value> =
        fence::write_fence(&name, &target, "Deployment/passmower")
            .iter()
            .map(|v| serde_json::to_value(v).expect("json"))
            .collect();
    pme_testkit::fence::install_fence_objects(admin, name, &objects).await
}

// === grants, read and signed ===

/// What the grant oracle needs of `g`.
pub fn view(g: &Grant) -> GrantView {
    GrantView {
        leader: g.mode == Mode::Leader,
        holder: g.holder.clone(),
        incarnation: g.incarnation,
        epoch: g.epoch,
        expiry: BootTime::from_nanos(g.expires_boottime_ns),
    }
}

/// A flag file read as the product reads it, for [`pme_testkit::GrantRecorder`].
pub fn read_grant(path: &Path) -> Result<Option<GrantView>, String> {
    grant::read_file(path)
        .map(|g| g.as_ref().map(view))
        .map_err(|e| e.to_string())
}

/// The renew deadline test grants announce: longer than any grant a test writes lasts.
pub const TEST_RENEW_DEADLINE: Duration = Duration::from_secs(120);
/// The kill grace test grants announce: longer than any supervisor's in these tests, so none is
/// clamped unless a test asks for it.
pub const TEST_ELECTOR_KILL_GRACE: Duration = Duration::from_secs(10);

/// A leader grant expiring `ttl` from now on CLOCK_BOOTTIME.
pub fn leader(incarnation: u64, seq: u64, ttl: Duration) -> Grant {
    Grant::leader(
        "pod-a",
        7,
        Order { incarnation, seq },
        "ns/passmower",
        BootInstant::now().saturating_add(ttl),
    )
}

pub fn follower(incarnation: u64, seq: u64) -> Grant {
    Grant::follower("pod-b", 8, Order { incarnation, seq }, "ns/passmower")
}

/// The forgery a MAC-less protocol allowed: `incarnation=now, seq=u64::MAX, expires=u64::MAX`. Before the MAC
/// it made the pod leader for ever and every real object after it looked stale.
pub fn forgeries() -> Vec<(&'static str, Grant)> {
    let now = BootInstant::now().as_nanos();
    let mut forged = leader(now, u64::MAX, Duration::from_secs(60));
    forged.expires_boottime_ns = u64::MAX;
    forged.renew_deadline_ns = u64::MAX;
    forged.kill_grace_ns = 1;
    let unsigned = forged.clone();
    // "Plausible": a well-formed MAC, under a key the forger made up.
    let mut plausible = forged.clone();
    Key::generate().expect("key").sign_grant(&mut plausible);
    // The running elector's incarnation, a mac copied from nowhere.
    let mut same_incarnation = leader(1, u64::MAX, Duration::from_secs(60));
    same_incarnation.expires_boottime_ns = u64::MAX;
    same_incarnation.mac = Some("ab".repeat(32));
    vec![
        ("unsigned", unsigned),
        ("signed with another key", plausible),
        ("the elector's incarnation, a made-up mac", same_incarnation),
    ]
}

fn sign_with(token: &Mutex<Token>, g: &Grant) -> Grant {
    let mut g = g.clone();
    if g.renew_deadline_ns == 0 && g.kill_grace_ns == 0 {
        g = g.with_limits(TEST_RENEW_DEADLINE, TEST_ELECTOR_KILL_GRACE);
    }
    token.lock().expect("token").key.sign_grant(&mut g);
    g
}

// === the elector's part in the supervise scenarios ===

/// The kit's [`supervise::Sandbox`], with the elector's part played: the token (incarnation 1
/// at first) in the volume, and the key that [`Sandbox::sign`], [`Sandbox::write_grant`] and
/// [`Supervisor::push`] sign with.
pub struct Sandbox {
    base: supervise::Sandbox,
    token: Arc<Mutex<Token>>,
}

impl Deref for Sandbox {
    type Target = supervise::Sandbox;

    fn deref(&self) -> &supervise::Sandbox {
        &self.base
    }
}

impl Sandbox {
    pub fn new() -> Self {
        let sb = Sandbox {
            base: supervise::Sandbox::new(),
            token: Arc::new(Mutex::new(Token {
                incarnation: 1,
                key: Key::generate().expect("key"),
            })),
        };
        sb.write_token();
        sb
    }

    fn write_token(&self) {
        let token = self.token.lock().expect("token").clone();
        auth::write_token(&auth::token_path(&self.flag_file()), &token).expect("write token");
    }

    /// A new elector incarnation: a new key in the token file.
    pub fn elector_restart(&self, incarnation: u64) {
        *self.token.lock().expect("token") = Token {
            incarnation,
            key: Key::generate().expect("key"),
        };
        self.write_token();
    }

    pub fn token_file(&self) -> PathBuf {
        auth::token_path(&self.flag_file())
    }

    /// `g` as the elector would emit it: with its limits and a MAC under the current key.
    pub fn sign(&self, g: &Grant) -> Grant {
        sign_with(&self.token, g)
    }

    /// The ack file's object, if it is one.
    pub fn ack_object(&self) -> Option<Grant> {
        grant::read_file(&self.path("grant.json.ack"))
            .ok()
            .flatten()
    }

    /// Writes `g`, signed, to the flag file.
    pub fn write_grant(&self, g: &Grant) {
        self.write_raw_grant(&self.sign(g));
    }

    /// Writes `g` to the flag file exactly as given (forgeries, unsigned objects).
    pub fn write_raw_grant(&self, g: &Grant) {
        grant::write_file(&self.flag_file(), g).expect("write flag file");
    }

    /// Whether the ack file's MAC verifies under the current key.
    pub fn ack_verifies(&self) -> bool {
        let Ok(Some(ack)) = grant::read_file(&self.path("grant.json.ack")) else {
            return false;
        };
        self.token.lock().expect("token").key.verify_ack(&ack)
    }
}

/// The kit's [`supervise::Supervisor`] of a [`Sandbox`]: pushes are signed with its elector's
/// key.
pub struct Supervisor {
    base: supervise::Supervisor,
    token: Arc<Mutex<Token>>,
}

impl Deref for Supervisor {
    type Target = supervise::Supervisor;

    fn deref(&self) -> &supervise::Supervisor {
        &self.base
    }
}

impl std::ops::DerefMut for Supervisor {
    fn deref_mut(&mut self) -> &mut supervise::Supervisor {
        &mut self.base
    }
}

impl Supervisor {
    fn of(sb: &Sandbox, base: supervise::Supervisor) -> Self {
        Supervisor {
            base,
            token: sb.token.clone(),
        }
    }

    /// See [`supervise::Supervisor::start`].
    pub fn start(sb: &Sandbox, flags: &[&str], command: &[&str]) -> Self {
        Self::of(sb, supervise::Supervisor::start(sb, flags, command))
    }

    /// See [`supervise::Supervisor::start_bin`].
    pub fn start_bin(bin: &str, sb: &Sandbox, flags: &[&str], command: &[&str]) -> Self {
        Self::of(
            sb,
            supervise::Supervisor::start_bin(bin, sb, flags, command),
        )
    }

    /// See [`supervise::Supervisor::start_as`].
    pub fn start_as(sb: &Sandbox, flags: &[&str], command: &[&str], uid: u32) -> Self {
        Self::of(sb, supervise::Supervisor::start_as(sb, flags, command, uid))
    }

    /// See [`supervise::Supervisor::start_wrapped`].
    pub fn start_wrapped(sb: &Sandbox, wrapper: &[&str], flags: &[&str], command: &[&str]) -> Self {
        Self::of(
            sb,
            supervise::Supervisor::start_wrapped(sb, wrapper, flags, command),
        )
    }

    /// See [`supervise::Supervisor::start_env`].
    pub fn start_env(sb: &Sandbox, env: &[(&str, &str)], flags: &[&str], command: &[&str]) -> Self {
        Self::of(
            sb,
            supervise::Supervisor::start_env(sb, env, flags, command),
        )
    }

    /// `POST /` of a grant object, signed as the sandbox's elector would; status and body.
    pub fn push(&self, g: &Grant) -> (u16, String) {
        self.push_raw(&sign_with(&self.token, g))
    }

    /// `POST /` of exactly `g` (forgeries, unsigned objects); returns status and body.
    pub fn push_raw(&self, g: &Grant) -> (u16, String) {
        self.base.post_grant(&g.to_json())
    }

    /// `g` signed as the sandbox's elector would, for a request sent by hand.
    pub fn sign(&self, g: &Grant) -> Grant {
        sign_with(&self.token, g)
    }
}

// === the kit finds the binary cargo built ===

#[test]
fn the_kit_runs_the_binary_cargo_built_for_these_tests() {
    assert_eq!(pme_testkit::elector::binary(), Path::new(BIN));
}
