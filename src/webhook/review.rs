//! The AdmissionReview v1 wire format: the request the API server sends and the response it
//! expects, read strictly enough that every refusal names what was wrong.
//!
//! Our own types rather than a library's: only the fields this webhook reads are parsed (the
//! object stays raw JSON, so the patch is computed against exactly what the API server sent),
//! and the patch travels base64-encoded as the API documents it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `apiVersion` of the only AdmissionReview version this webhook speaks (the chart registers
/// `admissionReviewVersions: [v1]`).
pub const ADMISSION_V1: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// Group, version and kind, as the request names them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Gvk {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// The parts of `request` this webhook reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response: the API server matches them up by it.
    pub uid: String,
    pub kind: Gvk,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    /// The object as it will be stored, with what earlier admission steps already changed.
    #[serde(default)]
    pub object: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: Option<String>,
    kind: Option<String>,
    request: Option<AdmissionRequest>,
}

/// Why a body is not an AdmissionReview v1 request: answered with HTTP 400 and this text.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReviewError {
    #[error("the body is not an AdmissionReview: {0}")]
    Malformed(String),
    #[error("apiVersion {found:?} is not supported: only {ADMISSION_V1} (register the webhook with admissionReviewVersions: [v1])")]
    Version { found: String },
    #[error("kind {found:?} is not AdmissionReview")]
    Kind { found: String },
    #[error("the AdmissionReview has no request")]
    NoRequest,
    #[error("the AdmissionReview request has an empty uid")]
    NoUid,
}

/// Parses a request body.
pub fn parse(body: &[u8]) -> Result<AdmissionRequest, ReviewError> {
    let review: Review = serde_json::from_slice(body).map_err(|e| {
        let mut text = e.to_string();
        text.truncate(200);
        ReviewError::Malformed(text)
    })?;
    let version = review.api_version.unwrap_or_default();
    if version != ADMISSION_V1 {
        return Err(ReviewError::Version { found: version });
    }
    let kind = review.kind.unwrap_or_default();
    if kind != KIND {
        return Err(ReviewError::Kind { found: kind });
    }
    let request = review.request.ok_or(ReviewError::NoRequest)?;
    if request.uid.is_empty() {
        return Err(ReviewError::NoUid);
    }
    Ok(request)
}

/// `status` of a refused request: what the API server tells the client.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

/// The response to one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
    /// RFC 6902 JSON Patch, base64 in JSON (ByteString's encoding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<ByteString>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Prefixed by the API server with the webhook's name in the audit log.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub audit_annotations: BTreeMap<String, String>,
}

impl AdmissionResponse {
    /// Allowed, unchanged.
    pub fn allow(uid: &str) -> Self {
        AdmissionResponse {
            uid: uid.to_owned(),
            allowed: true,
            status: None,
            patch_type: None,
            patch: None,
            warnings: Vec::new(),
            audit_annotations: BTreeMap::new(),
        }
    }

    /// Allowed with `patch` (a JSON array of operations) applied.
    pub fn patched(uid: &str, patch: &Value) -> Self {
        let bytes = serde_json::to_vec(patch).unwrap_or_default();
        AdmissionResponse {
            patch_type: Some("JSONPatch"),
            patch: Some(ByteString(bytes)),
            ..Self::allow(uid)
        }
    }

    /// Refused with an HTTP-like `code`, a machine `reason` and a human `message`.
    pub fn refuse(uid: &str, code: u16, reason: &str, message: impl Into<String>) -> Self {
        AdmissionResponse {
            allowed: false,
            status: Some(Status {
                code,
                reason: reason.to_owned(),
                message: message.into(),
            }),
            ..Self::allow(uid)
        }
    }

    /// The whole AdmissionReview to send back.
    pub fn to_body(&self) -> Vec<u8> {
        let review = serde_json::json!({
            "apiVersion": ADMISSION_V1,
            "kind": KIND,
            "response": self,
        });
        serde_json::to_vec(&review).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEST: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
        "request":{"uid":"u-1","kind":{"group":"","version":"v1","kind":"Pod"},
        "resource":{"group":"","version":"v1","resource":"pods"},"namespace":"ns",
        "operation":"CREATE","userInfo":{"username":"x"},"object":{"kind":"Pod"},"dryRun":false}}"#;

    #[test]
    fn a_v1_request_parses() {
        let request = parse(REQUEST.as_bytes()).unwrap();
        assert_eq!(request.uid, "u-1");
        assert_eq!(request.kind.kind, "Pod");
        assert_eq!(request.operation, "CREATE");
        assert_eq!(request.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn bad_bodies_name_what_is_wrong() {
        let cases: [(&str, &str); 6] = [
            ("", "not an AdmissionReview"),
            ("{\"apiVersion\":", "not an AdmissionReview"),
            (
                r#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#,
                "only admission.k8s.io/v1",
            ),
            (
                r#"{"apiVersion":"admission.k8s.io/v1","kind":"Pod"}"#,
                "is not AdmissionReview",
            ),
            (
                r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
                "no request",
            ),
            (&REQUEST.replace("\"u-1\"", "\"\""), "empty uid"),
        ];
        for (body, expected) in cases {
            let err = parse(body.as_bytes()).unwrap_err();
            assert!(err.to_string().contains(expected), "{body}: {err}");
        }
        let wrong_type = REQUEST.replace("\"operation\":\"CREATE\"", "\"operation\":7");
        assert!(matches!(
            parse(wrong_type.as_bytes()),
            Err(ReviewError::Malformed(_))
        ));
    }

    #[test]
    fn the_patch_is_base64_and_the_uid_echoed() {
        let body = AdmissionResponse::patched("u-1", &serde_json::json!([{"op": "add"}])).to_body();
        let back: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(back["apiVersion"], ADMISSION_V1);
        assert_eq!(back["response"]["uid"], "u-1");
        assert_eq!(back["response"]["patchType"], "JSONPatch");
        // base64 of `[{"op":"add"}]`
        assert_eq!(back["response"]["patch"], "W3sib3AiOiJhZGQifV0=");
        let refused = AdmissionResponse::refuse("u-2", 403, "Forbidden", "no").to_body();
        let back: Value = serde_json::from_slice(&refused).unwrap();
        assert_eq!(back["response"]["allowed"], false);
        assert_eq!(back["response"]["status"]["code"], 403);
        assert_eq!(back["response"]["status"]["message"], "no");
    }
}
