//! Which companion objects a target gets, and whether the stream lets them be added: the Role,
//! RoleBinding and PodDisruptionBudget, the write fence, the replica guard, the deny policy of
//! the idle namespace.
//! An object the stream already has is kept when `inject` generated it and refused otherwise;
//! one ServiceAccount has one write fence, for one Lease.

use std::collections::{HashMap, HashSet};

use serde_norway::Value;

use crate::inject::companions::fence;
use crate::inject::companions::guard;
use crate::inject::companions::rbac::{self, Generated, ObjectKey};
use crate::inject::companions::release_namespace::BoundAccounts;
use crate::inject::error::InjectError;
use crate::inject::names::{ELECTOR_CONTAINER, GENERATED_FOR_ANNOTATION};
use crate::inject::native_election::PassmowerElection;
use crate::inject::options::InjectOptions;
use crate::inject::target::Target;

/// What the stream holds that companions must agree with, and what was emitted so far.
pub(crate) struct Companions<'a> {
    opts: &'a InjectOptions,
    /// Objects in the input, and whether `inject` generated them (idempotence, no shadowing).
    existing: HashMap<ObjectKey, bool>,
    /// Namespace and selector of each PodDisruptionBudget in the input.
    existing_pdbs: Vec<(Option<String>, Value)>,
    emitted: HashSet<ObjectKey>,
    /// Each write fence in the stream or emitted so far, by name: the Lease it binds and whom
    /// it was made for. One ServiceAccount has one fence.
    fences: HashMap<String, FenceClaim>,
    /// Where the stream's bindings bind each ServiceAccount (the release namespace of a chart).
    bound_accounts: BoundAccounts,
}

impl<'a> Companions<'a> {
    pub(crate) fn new(opts: &'a InjectOptions) -> Self {
        Companions {
            opts,
            existing: HashMap::new(),
            existing_pdbs: Vec::new(),
            emitted: HashSet::new(),
            fences: HashMap::new(),
            bound_accounts: BoundAccounts::default(),
        }
    }

    /// Notes an object of the input (the first pass, before any target is rewritten).
    pub(crate) fn note(&mut self, object: &Value) {
        if let Some(key) = ObjectKey::of(object) {
            self.existing.insert(key, rbac::is_generated(object));
        }
        if let Some((name, claim)) = FenceClaim::of(object) {
            self.fences.insert(name, claim);
        }
        if let Some(pdb) = rbac::pdb_selector(object) {
            self.existing_pdbs.push(pdb);
        }
        self.bound_accounts.note(object);
    }

    /// The namespace of `info`'s pods as far as the stream and the options tell (its own, else
    /// `--namespace`, else where the stream binds its ServiceAccount); a `--namespace` the
    /// stream contradicts is an error.
    pub(crate) fn namespace_of(&self, info: &Target) -> Result<Option<String>, InjectError> {
        self.bound_accounts.namespace_of(info, self.opts)
    }

    /// The companions of `info` (found in `value`, which `already_injected` says an earlier
    /// `inject` rewrote) that are not yet in the stream nor emitted.
    pub(crate) fn for_target(
        &mut self,
        info: &Target,
        value: &Value,
        already_injected: bool,
    ) -> Result<Vec<Generated>, InjectError> {
        let opts = self.opts;
        let document = info.document;
        let workload = info.describe();
        let fence_only = opts.passmower_election == PassmowerElection::FenceOnly;
        if !opts.workload_only && info.service_account == "default" {
            return Err(shared_default_account(info));
        }
        let resolved = if opts.workload_only {
            None
        } else {
            self.namespace_of(info)?
        };
        let mut generated = Vec::new();
        if fence_only {
            generated = rbac::native_lease_companions(info);
        } else if !opts.workload_only {
            // A pod under two budgets cannot be evicted at all (the eviction API refuses it),
            // so node drains would hang: a budget of the stream that already selects the
            // workload's pods is adopted, whatever its selector looks like.
            let namespace = info.namespace.as_ref().or(opts.namespace.as_ref());
            let has_own_pdb = self.existing_pdbs.iter().any(|(ns, sel)| {
                ns.as_ref().or(opts.namespace.as_ref()) == namespace
                    && (*sel == info.selector || rbac::selects(sel, &info.pod_labels))
            });
            generated = rbac::companions(info, !has_own_pdb);
            // Later targets of the stream see this budget as the stream's.
            if let Some(pdb) = generated.iter().find_map(|g| rbac::pdb_selector(&g.value)) {
                self.existing_pdbs.push(pdb);
            }
        }
        if !opts.workload_only && opts.fence {
            if already_injected && !fence_only && !elector_knows_its_pod_uid(value) {
                return Err(InjectError::Manifest {
                    document,
                    workload,
                    reason: format!(
                        "was injected by an earlier passmower-elector whose {ELECTOR_CONTAINER} \
                         container has no POD_UID, so its holder identity names no pod UID and \
                         the write fence would refuse every operator write of its leader: \
                         inject the original manifests (the chart's output) again, or pass \
                         --no-fence"
                    ),
                });
            }
            let Some(namespace) = resolved.as_deref() else {
                return Err(InjectError::Manifest {
                    document,
                    workload,
                    reason: "names no namespace, and the write fence (a cluster-wide admission \
                             policy) must name the namespace of its ServiceAccount and Lease: \
                             pass --namespace NAMESPACE (the release namespace: helm gives a \
                             post-renderer none), or --no-fence to install without it"
                        .into(),
                });
            };
            let target = fence::FenceTarget {
                namespace,
                service_account: &info.service_account,
                lease: &info.lease,
            };
            let name = fence::fence_policy_name(namespace, &info.service_account);
            let generated_for = format!("{}/{}", info.kind.as_str(), info.name);
            let claim = FenceClaim {
                lease: format!("{namespace}/{}", info.lease),
                made_for: generated_for.clone(),
            };
            match self.fences.get(&name) {
                Some(other) if other.lease != claim.lease => {
                    return Err(InjectError::Manifest {
                        document,
                        workload,
                        reason: format!(
                            "runs as ServiceAccount {namespace}/{sa} with Lease {ours}, but the \
                             write fence of that ServiceAccount ({name}, for {by}) binds Lease \
                             {theirs}: the fence admits the ServiceAccount's operator writes \
                             from the holder of one Lease only, so the other workload's leader \
                             would be refused for ever. Give each workload its own \
                             ServiceAccount, let them share one Lease (--lease-name {lease}), or \
                             pass --no-fence",
                            sa = info.service_account,
                            ours = claim.lease,
                            by = other.made_for,
                            theirs = other.lease,
                            lease = other.lease.rsplit('/').next().unwrap_or_default(),
                        ),
                    })
                }
                Some(_) => {}
                None => {
                    self.fences.insert(name.clone(), claim);
                }
            }
            let holder = if fence_only {
                fence::Holder::PodName
            } else {
                fence::Holder::ElectorIdentity
            };
            for object in fence::write_fence_for(&name, &target, &generated_for, holder) {
                generated.push(rbac::Generated {
                    value: object,
                    notes: Vec::new(),
                });
            }
        }
        // The replica guard, where it is served and its namespace known (else the rewrite
        // carries a warning, `guard::left_out`); the chart's with --workload-only. Not for
        // fence-only: Passmower's own election keeps its replicas to one writer there.
        let namespace = resolved.as_deref();
        let guarded = opts.guard && !opts.workload_only && !fence_only;
        if let Some(namespace) = namespace.filter(|_| guarded) {
            if guard::left_out(opts, &workload, Some(namespace)).is_none() {
                let target = guard::GuardTarget {
                    namespace,
                    kind: info.kind,
                    name: &info.name,
                    webhook: None,
                    app_container: &opts.container,
                    native_lease: info.native_lease.as_deref(),
                };
                for object in guard::replica_guard(&target, &info.describe()) {
                    generated.push(rbac::Generated {
                        value: object,
                        notes: Vec::new(),
                    });
                }
            }
        }
        // With --workload-only the chart installs the idle-namespace guard (its denyIdleNamespace).
        if opts.deny_idle_namespace && !opts.workload_only && !fence_only {
            let namespace = resolved.as_deref();
            for policy in rbac::deny_idle_namespace(&opts.idle_namespace, namespace, &info.name) {
                generated.push(rbac::Generated {
                    value: policy,
                    notes: Vec::new(),
                });
            }
        }
        let mut new = Vec::new();
        for companion in generated {
            let key =
                rbac::ObjectKey::of(&companion.value).ok_or_else(|| InjectError::Manifest {
                    document,
                    workload: workload.clone(),
                    reason: "internal: generated object without kind or name".into(),
                })?;
            match self.existing.get(&key) {
                Some(true) => continue,
                Some(false) => {
                    return Err(InjectError::Manifest {
                        document,
                        workload,
                        reason: format!(
                            "the stream already has {key} not generated by passmower-elector; \
                             rename or remove it"
                        ),
                    })
                }
                None => {}
            }
            if self.emitted.insert(key) {
                new.push(companion);
            }
        }
        Ok(new)
    }
}

/// The refusal of a target that runs as its namespace's `default` ServiceAccount. The Lease
/// grant and the write fence are keyed on the ServiceAccount, and `default` is every pod's that
/// names none: any of them could stall the election, and the fence would refuse their Secret
/// writes and Pod creates. Switching the workload to an account of our own instead would strip
/// Passmower's own RBAC (bound to `default` there), so the user picks the account.
fn shared_default_account(info: &Target) -> InjectError {
    info.error(
        "runs as the namespace's default ServiceAccount (spec.template.spec.serviceAccountName \
         is unset or \"default\"), which every pod that names none shares: the Lease grant and \
         the write fence are keyed on the ServiceAccount, so any such pod could stall the \
         election and the fence would refuse their Secret writes and Pod creates. Set \
         spec.template.spec.serviceAccountName to a ServiceAccount of Passmower's own (and bind \
         Passmower's RBAC to it), or pass --workload-only and let the chart own the RBAC",
    )
}

/// What a write fence binding of the stream says: `namespace/name` of its Lease, and whom it
/// was made for (its generated-for annotation).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FenceClaim {
    lease: String,
    made_for: String,
}

impl FenceClaim {
    /// The claim of a write fence binding (inject's or the chart's: both carry the
    /// `write-fence` component label), or `None` for any other object.
    fn of(value: &Value) -> Option<(String, FenceClaim)> {
        let meta = value.get("metadata")?;
        if value.get("kind")?.as_str()? != "ValidatingAdmissionPolicyBinding"
            || meta
                .get("labels")?
                .get("app.kubernetes.io/component")?
                .as_str()?
                != "write-fence"
        {
            return None;
        }
        let param = value.get("spec")?.get("paramRef")?;
        let lease = format!(
            "{}/{}",
            param.get("namespace").and_then(Value::as_str).unwrap_or(""),
            param.get("name").and_then(Value::as_str).unwrap_or("")
        );
        let made_for = meta
            .get("annotations")
            .and_then(|a| a.get(GENERATED_FOR_ANNOTATION))
            .and_then(Value::as_str)
            .unwrap_or("another object of the stream")
            .to_owned();
        Some((
            meta.get("name")?.as_str()?.to_owned(),
            FenceClaim { lease, made_for },
        ))
    }
}

/// Whether the elector container of an injected workload's pod template sets `POD_UID`, which
/// the write fence needs in the holder identity (output of builds before the fence lacks it).
fn elector_knows_its_pod_uid(workload: &Value) -> bool {
    let spec = &workload["spec"]["template"]["spec"];
    ["initContainers", "containers"]
        .iter()
        .filter_map(|list| spec[*list].as_sequence())
        .flatten()
        .filter(|c| c["name"].as_str() == Some(ELECTOR_CONTAINER))
        .any(|c| {
            c["env"]
                .as_sequence()
                .is_some_and(|env| env.iter().any(|e| e["name"].as_str() == Some("POD_UID")))
        })
}
