//! Manifests (multi-document YAML) sent to the real apiserver as they are: for real, or as a
//! server-side dry run with strict field validation (`kubectl create --dry-run=server
//! --validate=strict`), so a field the server does not know is an error, not silently dropped.
//!
//! Each document's kind is resolved by API discovery against the server, so a kind or version
//! the server does not serve fails too.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use serde::Deserialize;
use serde_json::Value;

/// The field manager of every request made here.
pub const FIELD_MANAGER: &str = "pme-tests";

/// The documents of a YAML stream as JSON, without empty documents (`---` at the end, or a
/// document holding only comments).
pub fn parse_stream(yaml: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("invalid YAML: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// `Kind namespace/name` of a document, for messages.
pub fn describe(doc: &Value) -> String {
    let kind = doc["kind"].as_str().unwrap_or("?");
    let name = doc["metadata"]["name"].as_str().unwrap_or("?");
    match doc["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Sends documents to one apiserver, resolving each kind once.
pub struct Applier {
    client: kube::Client,
    kinds: HashMap<String, (ApiResource, bool)>,
}

/// Whether a request only validates (`dryRun=All`) or really creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    DryRun,
    Create,
}

impl Applier {
    pub fn new(client: kube::Client) -> Applier {
        Applier {
            client,
            kinds: HashMap::new(),
        }
    }

    /// The resource of `doc`'s apiVersion/kind, by discovery; `(resource, namespaced)`.
    async fn resource(&mut self, doc: &Value) -> Result<(ApiResource, bool), String> {
        let api_version = doc["apiVersion"]
            .as_str()
            .ok_or_else(|| format!("{}: no apiVersion", describe(doc)))?;
        let kind = doc["kind"]
            .as_str()
            .ok_or_else(|| format!("{}: no kind", describe(doc)))?;
        let key = format!("{api_version}/{kind}");
        if let Some(found) = self.kinds.get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| format!("{}: the server does not serve {key}: {e}", describe(doc)))?;
        let found = (resource, caps.scope == Scope::Namespaced);
        self.kinds.insert(key, found.clone());
        Ok(found)
    }

    /// Creates namespace `name` for real unless it exists.
    pub async fn ensure_namespace(&self, name: &str) {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("create namespace {name}: {e}"),
        }
    }

    /// Sends `doc`: a namespaced object goes to its own namespace (created for real first if
    /// missing), else to `default_namespace`. With [`Mode::DryRun`] the request is a create,
    /// or — when the object already exists — a server-side apply, both with `dryRun=All` and
    /// `fieldValidation=Strict`. Returns the server's refusal as text.
    pub async fn send(
        &mut self,
        doc: &Value,
        default_namespace: &str,
        mode: Mode,
    ) -> Result<Value, String> {
        let (resource, namespaced) = self.resource(doc).await?;
        let mut path = if resource.group.is_empty() {
            format!("/api/{}", resource.version)
        } else {
            format!("/apis/{}/{}", resource.group, resource.version)
        };
        if namespaced {
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or(default_namespace);
            self.ensure_namespace(ns).await;
            path.push_str(&format!("/namespaces/{ns}"));
        }
        path.push_str(&format!("/{}", resource.plural));
        let mut query = format!("fieldValidation=Strict&fieldManager={FIELD_MANAGER}");
        if mode == Mode::DryRun {
            query.push_str("&dryRun=All");
        }
        let body = serde_json::to_vec(doc).expect("serialize document");
        let create = hyper::Request::post(format!("{path}?{query}"))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .expect("build create request");
        match self.client.request::<Value>(create).await {
            Ok(v) => Ok(v),
            Err(kube::Error::Api(s)) if s.code == 409 && mode == Mode::DryRun => {
                let name = doc["metadata"]["name"]
                    .as_str()
                    .ok_or_else(|| format!("{}: exists but has no name", describe(doc)))?;
                let apply = hyper::Request::patch(format!("{path}/{name}?{query}&force=true"))
                    .header(hyper::header::CONTENT_TYPE, "application/apply-patch+yaml")
                    .body(body)
                    .expect("build apply request");
                self.client
                    .request::<Value>(apply)
                    .await
                    .map_err(|e| format!("{} (apply): {e}", describe(doc)))
            }
            Err(e) => Err(format!("{}: {e}", describe(doc))),
        }
    }
}
