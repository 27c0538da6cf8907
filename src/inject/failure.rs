//! The failure manifest of `--on-error=manifest`: how an `inject` error reaches a Helm 4 user.
//!
//! Helm 4 runs a post-renderer plugin with its stderr captured and discarded, and on a
//! non-zero exit prints only `plugin "NAME" exited with error` (even with `--debug`). What it
//! does print is the name of an object it cannot map to an API: so on failure the plugin
//! exits 0 with one object of a kind no cluster serves, named after the error. Helm refuses it
//! before it creates anything (`resource mapping not found for name: "passmower-elector
//! inject failed: ..."`), and `helm template` prints it with the reason in its comments.

use serde_norway::{Mapping, Value};

/// The API group of the failure object: nobody serves it, so no cluster ever accepts one.
pub const FAILURE_API_VERSION: &str = "passmower-elector.io/v1";
/// The kind of the failure object.
pub const FAILURE_KIND: &str = "InjectFailed";

/// One YAML document that carries `message` and that Helm, kubectl and the API server refuse.
pub fn failure_manifest(message: &str) -> String {
    let one_line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::new();
    for line in one_line
        .split("; ")
        .flat_map(|part| wrap(part, 96))
        .collect::<Vec<_>>()
    {
        out.push_str("# ");
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(
        "# passmower-elector inject failed (above). This object stands in for the manifests so \
         that Helm 4, which hides a post-renderer's own messages, shows the reason; no cluster \
         serves its kind, so nothing is installed.\n",
    );
    let mut metadata = Mapping::new();
    metadata.insert(
        "name".into(),
        format!("passmower-elector inject failed: {one_line}").into(),
    );
    let mut object = Mapping::new();
    object.insert("apiVersion".into(), FAILURE_API_VERSION.into());
    object.insert("kind".into(), FAILURE_KIND.into());
    object.insert("metadata".into(), Value::Mapping(metadata));
    out.push_str("---\n");
    out.push_str(&crate::inject::yaml::to_yaml(&Value::Mapping(object)));
    out
}

/// Splits `text` into lines of at most about `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failure_object_names_the_reason_and_parses() {
        let text = failure_manifest("no target found: no Deployment\nwith a container \"x\"");
        let docs = crate::inject::yaml::parse_stream(&text).unwrap();
        let object = docs.iter().find(|d| !d.value.is_null()).unwrap();
        assert_eq!(object.value["kind"].as_str(), Some(FAILURE_KIND));
        assert_eq!(
            object.value["metadata"]["name"].as_str(),
            Some("passmower-elector inject failed: no target found: no Deployment with a container \"x\"")
        );
        assert!(text.starts_with("# no target found"), "{text}");
    }
}
