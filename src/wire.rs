//! The names by which the roles find each other's objects in the cluster, each defined once:
//! the containers `inject` adds and `status` looks for, the annotations `inject` puts on
//! workloads and the elector on its Events, what the webhook reads and never injects (which the
//! guards share), the component of those Events, and the write fence's name and the first
//! words of its refusals, and the app's namespace variable. Every role takes them from here, so
//! no role imports another for a name.

/// The environment variable that tells Passmower which namespaces its operators reconcile:
/// `inject` writes its leader and follower values into `supervise`'s flags, and `supervise`
/// refuses a follower value that would reconcile anything.
pub const SELECTOR_VAR: &str = "NAMESPACE_SELECTOR";

/// The elector sidecar's container name.
pub const ELECTOR_CONTAINER: &str = "passmower-elector";
/// The initContainer that copies the binary into the pod.
pub const INSTALL_CONTAINER: &str = "passmower-elector-install";
/// Annotation on an injected workload naming its Lease, so companions can be re-derived.
pub const LEASE_ANNOTATION: &str = "passmower-elector.io/lease";
/// Annotation on every object `inject` generates: `Kind/name` of the workload it serves.
pub const GENERATED_FOR_ANNOTATION: &str = "passmower-elector.io/generated-for";

/// Pod annotation the webhook reads: the container to wrap, instead of `--container`. The
/// replica and pod guards read it too, so they admit what the webhook would inject.
pub const CONTAINER_ANNOTATION: &str = "passmower-elector.io/container";
/// Namespaces the webhook never injects, whatever their labels (the cluster's own); the
/// guards' rule of what the webhook injects leaves them out too.
pub const NEVER_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// The `source.component` and `reportingComponent` of every Event the elector records.
pub const COMPONENT: &str = "passmower-elector";
/// Annotations on an Event with the figures its message gives in words, for tools
/// (`passmower-elector status`): the term's epoch, how it began, and how long nobody led.
pub const EPOCH_ANNOTATION: &str = "passmower-elector.io/epoch";
pub const CAUSE_ANNOTATION: &str = "passmower-elector.io/cause";
pub const LEADERLESS_ANNOTATION: &str = "passmower-elector.io/leaderless-ms";

/// What every refusal of the write fence starts with: grep for it in Passmower's logs or the
/// audit log.
pub const DENIAL_PREFIX: &str = "passmower-elector write fence";

/// Name of the write fence's policy (and binding) that fences `service_account` of
/// `namespace`: named by what it protects, not by who installs it, so `inject` and the chart, a
/// renamed Deployment, or a second install for the same ServiceAccount all name one object, and
/// a second fence can never be ANDed with the first (each would refuse the other Lease's holder
/// for ever).
pub fn fence_policy_name(namespace: &str, service_account: &str) -> String {
    subdomain_name(&["passmower-elector-fence", namespace, service_account])
}

/// A cluster-wide object name built from `parts` joined by dots, cut to the 253 characters a
/// DNS subdomain allows and without the `.` or `-` a cut may leave at its end (a subdomain must
/// end in an alphanumeric).
pub fn subdomain_name(parts: &[&str]) -> String {
    let mut name: String = parts.join(".").chars().take(253).collect();
    while name.ends_with(['.', '-']) {
        name.pop();
    }
    name
}

/// Passmower's own Lease (`elect --native-lease`): the `leaseDurationSeconds` assumed when it
/// declares none (upstream's DEFAULT_LEASE_DURATION), and the longest one honoured, so a hand
/// edit of hours cannot keep the electors out for as long (upstream's own holder stands down
/// after its renew deadline whatever the Lease says). The electors and `status` judge it alike.
pub const NATIVE_LEASE_DEFAULT_DURATION: std::time::Duration = std::time::Duration::from_secs(15);
pub const NATIVE_LEASE_MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(300);
