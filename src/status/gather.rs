//! What `status` reads, with `get` and `list` only: the Lease, the Deployment and its pods, the
//! electors' Events on the Lease, the write fence's policy and binding, and the apiserver's
//! count of the fence's refusals. Every read is bounded in time, and a read that fails (RBAC,
//! a timeout) becomes what the report says about that part, never the end of the report.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Event, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ListParams;
use kube::{Api, Client};

use super::StatusConfig;
use crate::election::identity;
use crate::wire::{fence_policy_name, COMPONENT, ELECTOR_CONTAINER, LEASE_ANNOTATION};

/// The longest any one read may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One read: `Ok(None)` when the object does not exist, `Err` with why it could not be read.
pub type Read<T> = Result<Option<T>, String>;

/// Everything `status` read.
#[derive(Debug)]
pub struct Gathered {
    pub namespace: String,
    /// `--deployment`, and what reading it gave.
    pub deployment: Option<(String, Read<Deployment>)>,
    pub lease_name: String,
    /// Where the Lease's name came from, for the screen.
    pub lease_name_from: &'static str,
    pub lease: Read<Lease>,
    /// The Deployment's pods, or (with `--lease` alone) the pods the Lease's Events name.
    pub pods: Result<Vec<Pod>, String>,
    /// The Events on the Lease recorded by the electors, oldest first.
    pub events: Result<Vec<Event>, String>,
    pub fence: FenceRead,
    /// Passmower's own Lease, when the electors hold it beside theirs (`elect --native-lease`):
    /// its name and what was read.
    pub native: Option<(String, Read<Lease>)>,
}

/// The write fence as read: its name (per ServiceAccount), its two objects, and the refusals
/// the apiserver counted for it.
#[derive(Debug)]
pub struct FenceRead {
    pub name: String,
    pub service_account: String,
    pub policy: Read<ValidatingAdmissionPolicy>,
    pub binding: Read<ValidatingAdmissionPolicyBinding>,
    /// `Ok(n)`: the apiserver's `apiserver_validating_admission_policy_check_total` with
    /// `enforcement_action="deny"` for the policy; `Err`: why it is not visible.
    pub refusals: Result<u64, String>,
}

/// The metric the apiserver counts admission policy checks in.
pub const POLICY_CHECK_METRIC: &str = "apiserver_validating_admission_policy_check_total";

pub async fn gather(client: &Client, namespace: &str, config: &StatusConfig) -> Gathered {
    let deployment = match &config.deployment {
        Some(name) => {
            let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
            Some((name.clone(), bounded(api.get_opt(name)).await))
        }
        None => None,
    };
    let template = deployment
        .as_ref()
        .and_then(|(_, d)| d.as_ref().ok()?.as_ref())
        .and_then(|d| d.spec.as_ref()?.template.spec.clone());
    // The Deployment's pods: the template of a webhook install carries no elector, its pods do.
    let selected = match deployment
        .as_ref()
        .and_then(|(_, d)| d.as_ref().ok()?.as_ref())
        .and_then(|d| d.spec.as_ref().map(|s| s.selector.clone()))
    {
        Some(selector) => Some(list_pods(client, namespace, Some(&selector)).await),
        None => None,
    };
    let (lease_name, lease_name_from) = lease_name(config, template.as_ref(), selected.as_ref());
    let lease =
        bounded(Api::<Lease>::namespaced(client.clone(), namespace).get_opt(&lease_name)).await;
    let events = lease_events(client, namespace, &lease_name).await;
    let pods = match selected {
        Some(pods) => pods,
        None if deployment.is_some() => Ok(Vec::new()),
        None => pods_named(client, namespace, &lease, &events).await,
    };
    let native_name = template
        .as_ref()
        .and_then(elector_native_lease)
        .or_else(|| {
            pods.as_ref()
                .ok()?
                .iter()
                .find_map(|p| p.spec.as_ref().and_then(elector_native_lease))
        });
    let native = match native_name {
        Some(name) => {
            let read =
                bounded(Api::<Lease>::namespaced(client.clone(), namespace).get_opt(&name)).await;
            Some((name, read))
        }
        None => None,
    };
    // The fence is per ServiceAccount: the pods' (a pod spec without one runs as `default`).
    let service_account = template
        .as_ref()
        .or_else(|| pods.as_ref().ok()?.first()?.spec.as_ref())
        .map(|s| {
            s.service_account_name
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".to_owned())
        });
    let fence = match service_account {
        Some(sa) => fence(client, namespace, &sa).await,
        None => {
            let why = "no Deployment or pod tells which ServiceAccount it fences".to_owned();
            FenceRead {
                name: String::new(),
                service_account: String::new(),
                policy: Err(why.clone()),
                binding: Err(why.clone()),
                refusals: Err(why),
            }
        }
    };
    Gathered {
        namespace: namespace.to_owned(),
        deployment,
        lease_name,
        lease_name_from,
        lease,
        pods,
        events,
        fence,
        native,
    }
}

/// A read with [`READ_TIMEOUT`]; the error in words, with the fix for RBAC.
async fn bounded<T>(read: impl std::future::Future<Output = kube::Result<Option<T>>>) -> Read<T> {
    match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(e)) => Err(describe(&e)),
        Err(_) => Err(format!(
            "no answer within {}",
            crate::config::human(READ_TIMEOUT)
        )),
    }
}

fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if status.code == 403 => {
            format!("forbidden: {}", status.message)
        }
        other => other.to_string(),
    }
}

/// The Lease to report on: `--lease`; else what the elector container of the Deployment's
/// template or of its pods names (`--lease-name`, `ELECTOR_LEASE_NAME`), or the pods' Lease
/// annotation (the admission webhook's); else the Deployment's name, as `inject` names it.
fn lease_name(
    config: &StatusConfig,
    template: Option<&PodSpec>,
    pods: Option<&Result<Vec<Pod>, String>>,
) -> (String, &'static str) {
    if let Some(lease) = &config.lease {
        return (lease.clone(), "--lease");
    }
    if let Some(name) = template.and_then(elector_lease_name) {
        return (
            name,
            "the elector container of the Deployment's pod template",
        );
    }
    let pods = pods.and_then(|p| p.as_ref().ok());
    for pod in pods.into_iter().flatten() {
        if let Some(name) = pod.spec.as_ref().and_then(elector_lease_name) {
            return (name, "the elector container of the Deployment's pods");
        }
        if let Some(name) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LEASE_ANNOTATION))
        {
            return (name.clone(), "the pods' Lease annotation");
        }
    }
    (
        config.deployment.clone().unwrap_or_default(),
        "the Deployment's name",
    )
}

/// The `--lease-name` of the elector container of `spec`, if it has one.
pub fn elector_lease_name(spec: &PodSpec) -> Option<String> {
    elector_setting(spec, "--lease-name", "ELECTOR_LEASE_NAME")
}

/// The `--native-lease` of the elector container of `spec`, if it holds Passmower's own Lease.
pub fn elector_native_lease(spec: &PodSpec) -> Option<String> {
    elector_setting(spec, "--native-lease", "ELECTOR_NATIVE_LEASE").filter(|n| !n.is_empty())
}

/// A flag of the elector container of `spec` (`--flag=V`, `--flag V`), else its variable.
fn elector_setting(spec: &PodSpec, flag: &str, variable: &str) -> Option<String> {
    let elector: &Container = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .find(|c| c.name == ELECTOR_CONTAINER)?;
    let args: Vec<&str> = elector
        .command
        .iter()
        .flatten()
        .chain(elector.args.iter().flatten())
        .map(String::as_str)
        .collect();
    for (i, arg) in args.iter().enumerate() {
        if let Some(value) = arg.strip_prefix(flag).and_then(|a| a.strip_prefix('=')) {
            return Some(value.to_owned());
        }
        if *arg == flag {
            return args.get(i + 1).map(|s| s.to_string());
        }
    }
    elector
        .env
        .iter()
        .flatten()
        .find(|e| e.name == variable)
        .and_then(|e| e.value.clone())
}

/// A label selector as the `labelSelector` query parameter writes it.
pub fn selector_string(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            _ => format!("!{}", e.key),
        });
    }
    parts.join(",")
}

async fn list_pods(
    client: &Client,
    namespace: &str,
    selector: Option<&LabelSelector>,
) -> Result<Vec<Pod>, String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = match selector {
        Some(s) => ListParams::default().labels(&selector_string(s)),
        None => ListParams::default(),
    };
    let mut pods = bounded(async { api.list(&params).await.map(|l| Some(l.items)) })
        .await?
        .unwrap_or_default();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(pods)
}

/// With `--lease` alone: the pods of the namespace that the Lease's holder or its Events name.
async fn pods_named(
    client: &Client,
    namespace: &str,
    lease: &Read<Lease>,
    events: &Result<Vec<Event>, String>,
) -> Result<Vec<Pod>, String> {
    let mut names: Vec<String> = events
        .iter()
        .flatten()
        .filter_map(|e| e.reporting_instance.as_deref().map(pod_of_identity))
        .collect();
    if let Some(holder) = lease
        .as_ref()
        .ok()
        .and_then(Option::as_ref)
        .and_then(|l| l.spec.as_ref()?.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
    {
        names.push(pod_of_identity(holder));
    }
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let all = list_pods(client, namespace, None).await?;
    Ok(all
        .into_iter()
        .filter(|p| p.metadata.name.as_ref().is_some_and(|n| names.contains(n)))
        .collect())
}

/// The pod name an elector's holder identity names: `<pod>_<uid>_<suffix>` or
/// `<pod>_<suffix>`.
pub fn pod_of_identity(identity: &str) -> String {
    if let Some(parsed) = identity::HolderIdentity::parse(identity) {
        return parsed.pod_name.to_owned();
    }
    match identity.rsplit_once(identity::SEPARATOR) {
        Some((base, _)) => base.to_owned(),
        None => identity.to_owned(),
    }
}

/// The electors' Events on the Lease, oldest first.
async fn lease_events(client: &Client, namespace: &str, lease: &str) -> Result<Vec<Event>, String> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().fields(&format!(
        "involvedObject.kind=Lease,involvedObject.name={lease}"
    ));
    let mut events: Vec<Event> = bounded(async { api.list(&params).await.map(|l| Some(l.items)) })
        .await?
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.reporting_component.as_deref() == Some(COMPONENT)
                || e.source.as_ref().and_then(|s| s.component.as_deref()) == Some(COMPONENT)
        })
        .collect();
    events.sort_by_key(|e| event_time(e).map(|t| t.as_millisecond()));
    Ok(events)
}

async fn fence(client: &Client, namespace: &str, service_account: &str) -> FenceRead {
    let name = fence_policy_name(namespace, service_account);
    let policy =
        bounded(Api::<ValidatingAdmissionPolicy>::all(client.clone()).get_opt(&name)).await;
    let binding =
        bounded(Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).get_opt(&name)).await;
    let refusals = refusals(client, &name).await;
    FenceRead {
        name,
        service_account: service_account.to_owned(),
        policy,
        binding,
        refusals,
    }
}

/// The fence's refusals as the apiserver that answers counted them since it started (another
/// apiserver of the cluster counts its own): `GET /metrics`, which needs the non-resource URL
/// `/metrics` in the reader's ClusterRole.
async fn refusals(client: &Client, policy: &str) -> Result<u64, String> {
    let request = hyper::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let text = match tokio::time::timeout(READ_TIMEOUT, client.request_text(request)).await {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => return Err(describe(&e)),
        Err(_) => return Err("the apiserver's /metrics did not answer in time".to_owned()),
    };
    Ok(count_refusals(&text, policy))
}

/// Sums the denials of `policy` in the apiserver's metrics text.
pub fn count_refusals(metrics: &str, policy: &str) -> u64 {
    let policy_label = format!("policy=\"{policy}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with(POLICY_CHECK_METRIC))
        .filter(|l| l.contains(&policy_label) && l.contains("enforcement_action=\"deny\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// When an Event happened: its `eventTime`, else its last or first timestamp, else creation.
pub fn event_time(e: &Event) -> Option<k8s_openapi::jiff::Timestamp> {
    e.event_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| e.first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::EnvVar;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn the_lease_name_comes_from_the_electors_arguments_or_environment() {
        let elector = |args: Vec<&str>, env: Option<&str>| PodSpec {
            init_containers: Some(vec![Container {
                name: ELECTOR_CONTAINER.into(),
                args: Some(args.into_iter().map(str::to_owned).collect()),
                env: env.map(|v| {
                    vec![EnvVar {
                        name: "ELECTOR_LEASE_NAME".into(),
                        value: Some(v.into()),
                        ..EnvVar::default()
                    }]
                }),
                ..Container::default()
            }]),
            ..PodSpec::default()
        };
        assert_eq!(
            elector_lease_name(&elector(vec!["elect", "--lease-name=pm"], None)).as_deref(),
            Some("pm")
        );
        assert_eq!(
            elector_lease_name(&elector(vec!["elect", "--lease-name", "pm2"], None)).as_deref(),
            Some("pm2")
        );
        assert_eq!(
            elector_lease_name(&elector(vec!["elect"], Some("pm3"))).as_deref(),
            Some("pm3")
        );
        assert_eq!(elector_lease_name(&PodSpec::default()), None);
        let native = elector(
            vec![
                "elect",
                "--lease-name=pm",
                "--native-lease",
                "passmower-operators",
            ],
            None,
        );
        assert_eq!(elector_lease_name(&native).as_deref(), Some("pm"));
        assert_eq!(
            elector_native_lease(&native).as_deref(),
            Some("passmower-operators")
        );
        assert_eq!(
            elector_native_lease(&elector(vec!["elect", "--native-lease="], None)),
            None,
            "empty: off"
        );
        assert_eq!(
            elector_native_lease(&elector(vec!["elect", "--lease-name=pm"], None)),
            None
        );
    }

    #[test]
    fn selectors_are_written_as_the_api_reads_them() {
        let selector = LabelSelector {
            match_labels: Some([("app".to_owned(), "pm".to_owned())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["a".into(), "b".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        assert_eq!(selector_string(&selector), "app=pm,tier in (a,b),!canary");
    }

    #[test]
    fn identities_name_their_pod() {
        assert_eq!(
            pod_of_identity("pm-7d9f-abcde_0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40_0a1b2c3d"),
            "pm-7d9f-abcde"
        );
        assert_eq!(pod_of_identity("pod-a_0a1b2c3d"), "pod-a");
        assert_eq!(pod_of_identity("plain"), "plain");
    }

    #[test]
    fn refusals_are_the_policys_denials() {
        let text = "\
# HELP apiserver_validating_admission_policy_check_total x
apiserver_validating_admission_policy_check_total{enforcement_action=\"deny\",error_type=\"no_error\",policy=\"f.ns.sa\",policy_binding=\"f.ns.sa\"} 3
apiserver_validating_admission_policy_check_total{enforcement_action=\"allow\",error_type=\"no_error\",policy=\"f.ns.sa\",policy_binding=\"f.ns.sa\"} 40
apiserver_validating_admission_policy_check_total{enforcement_action=\"deny\",error_type=\"no_error\",policy=\"other\",policy_binding=\"other\"} 7
";
        assert_eq!(count_refusals(text, "f.ns.sa"), 3);
        assert_eq!(count_refusals(text, "nothing"), 0);
    }
}
