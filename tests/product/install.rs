//! The install pages' tests, where they need the product's own names: the elector container
//! in a Deployment read back from the server, and the replica guard's refusal (its message
//! and the moment it takes effect). The rest of what they share is the kit's
//! `pme_testkit::install`.

use std::time::Duration;

use passmower_elector::inject::guard::GUARD_DENIAL_PREFIX;
use passmower_elector::inject::ELECTOR_CONTAINER;
use pme_testkit::install::deployment;
use pme_testkit::tools::{Ran, Sandbox};
use serde_json::Value;

/// The elector container of a Deployment's pod template, as a native or a classic sidecar.
pub fn elector(deployment: &Value) -> Option<&Value> {
    let pod = &deployment["spec"]["template"]["spec"];
    ["initContainers", "containers"]
        .iter()
        .filter_map(|list| pod[*list].as_array())
        .flatten()
        .find(|c| c["name"] == ELECTOR_CONTAINER)
}

/// The replica count and the elector's image of Passmower's Deployment in `ns`.
pub fn replicas_and_elector_image(sandbox: &Sandbox, ns: &str) -> (i64, Option<String>) {
    let d = deployment(sandbox, ns);
    (
        d["spec"]["replicas"].as_i64().unwrap_or(1),
        elector(&d).and_then(|c| c["image"].as_str().map(str::to_owned)),
    )
}

/// Panics unless `ran` failed with a replica-guard refusal that says `says`.
pub fn assert_refused_by_guard(ran: &Ran, says: &str) {
    assert!(
        !ran.success,
        "admitted, the guard should have refused:\n{}",
        ran.stdout
    );
    assert!(
        ran.stderr.contains(GUARD_DENIAL_PREFIX) && ran.stderr.contains(says),
        "refused without the guard's message ({says:?}):\n{}",
        ran.stderr
    );
}

/// Waits until the replica guard of Deployment `passmower` in `namespace` refuses (a server-side
/// dry run of two replicas without the elector): the apiserver loads a new admission policy
/// and its binding a moment after they are created, and admits until then. Panics after 30 s.
/// Only where the guard must refuse such a Deployment (no webhook label admits it).
pub fn wait_for_guard(sandbox: &Sandbox, namespace: &str) {
    let mut last = String::new();
    for _ in 0..120 {
        let ran = sandbox.bash(
            &format!(
                "kubectl -n {namespace} create deployment passmower \
                 --image=registry.example.com/probe:1 --replicas=2 --dry-run=server -o name"
            ),
            Duration::from_secs(60),
        );
        if !ran.success && ran.stderr.contains(GUARD_DENIAL_PREFIX) {
            return;
        }
        last = format!("{}{}", ran.stdout, ran.stderr);
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("the replica guard in {namespace} did not take effect within 30 s: {last}");
}
