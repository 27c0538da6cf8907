//! RFC 6902 JSON Patch from two versions of an object: what the API server applies to the
//! object it sent to turn it into the injected one.
//!
//! Small on purpose: changed members are replaced, new ones added, lists that only grew get
//! their new items appended, and any other list change replaces the list. The patch is
//! therefore as narrow as the injection (appended containers and volumes, a new command), which
//! keeps the audit log readable and leaves other webhooks' additions alone.

use serde_json::{json, Value};

/// The operations that turn `before` into `after`.
pub fn diff(before: &Value, after: &Value) -> Value {
    let mut ops = Vec::new();
    diff_at(&mut String::new(), before, after, &mut ops);
    Value::Array(ops)
}

fn diff_at(path: &mut String, before: &Value, after: &Value, ops: &mut Vec<Value>) {
    if before == after {
        return;
    }
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                ops.push(json!({"op": "remove", "path": child(path, key)}));
            }
            for (key, value) in new {
                match old.get(key) {
                    None => {
                        ops.push(json!({"op": "add", "path": child(path, key), "value": value}))
                    }
                    Some(previous) => {
                        let len = path.len();
                        path.push('/');
                        path.push_str(&escape(key));
                        diff_at(path, previous, value, ops);
                        path.truncate(len);
                    }
                }
            }
        }
        (Value::Array(old), Value::Array(new)) if old.len() <= new.len() => {
            let (kept, added) = new.split_at(old.len());
            // Items changed in place are diffed; a list that was reordered would produce a
            // long patch, but the injection only appends and edits the target container.
            for (i, (previous, value)) in old.iter().zip(kept).enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                diff_at(path, previous, value, ops);
                path.truncate(len);
            }
            for value in added {
                ops.push(json!({"op": "add", "path": format!("{path}/-"), "value": value}));
            }
        }
        _ => ops.push(json!({"op": "replace", "path": path.clone(), "value": after})),
    }
}

fn child(path: &str, key: &str) -> String {
    format!("{path}/{}", escape(key))
}

/// JSON Pointer escaping (RFC 6901): annotation keys contain `/`.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Applies a patch made by [`diff`] (only the operations it emits), to check round trips.
    pub(crate) fn apply(doc: &Value, patch: &Value) -> Value {
        let mut doc = doc.clone();
        for op in patch.as_array().unwrap() {
            let path = op["path"].as_str().unwrap();
            let tokens: Vec<String> = path
                .split('/')
                .skip(1)
                .map(|t| t.replace("~1", "/").replace("~0", "~"))
                .collect();
            let (last, parents) = match tokens.split_last() {
                Some(split) => split,
                None => {
                    doc = op["value"].clone();
                    continue;
                }
            };
            let mut target = &mut doc;
            for t in parents {
                target = match target {
                    Value::Array(a) => &mut a[t.parse::<usize>().unwrap()],
                    Value::Object(o) => o.get_mut(t).unwrap(),
                    _ => panic!("bad path {path}"),
                };
            }
            match (op["op"].as_str().unwrap(), target) {
                ("add", Value::Array(a)) if last == "-" => a.push(op["value"].clone()),
                ("add" | "replace", Value::Object(o)) => {
                    o.insert(last.clone(), op["value"].clone());
                }
                ("replace", Value::Array(a)) => {
                    a[last.parse::<usize>().unwrap()] = op["value"].clone()
                }
                ("remove", Value::Object(o)) => {
                    o.remove(last).unwrap();
                }
                (other, _) => panic!("unexpected op {other} at {path}"),
            }
        }
        doc
    }

    #[test]
    fn round_trips_and_stays_narrow() {
        let before = json!({
            "metadata": {"name": "p", "labels": {"a": "1"}, "gone": true},
            "spec": {"containers": [{"name": "app", "command": ["x"]}], "n": 1}
        });
        let after = json!({
            "metadata": {"name": "p", "labels": {"a": "1"},
                         "annotations": {"passmower-elector.io/injected": "0.1.0"}},
            "spec": {"containers": [{"name": "app", "command": ["y"], "args": ["z"]}],
                     "initContainers": [{"name": "e"}], "n": 2,
                     "volumes": []}
        });
        let patch = diff(&before, &after);
        assert_eq!(apply(&before, &patch), after);
        let paths: Vec<&str> = patch
            .as_array()
            .unwrap()
            .iter()
            .map(|op| op["path"].as_str().unwrap())
            .collect();
        assert!(paths.contains(&"/metadata/gone"));
        assert!(paths.contains(&"/spec/containers/0/command/0"));
        assert!(paths.contains(&"/spec/containers/0/args"));
        assert!(!paths.iter().any(|p| p.starts_with("/metadata/labels")));
    }

    #[test]
    fn keys_with_slashes_and_tildes_are_escaped() {
        let before = json!({"metadata": {"annotations": {}}});
        let after = json!({"metadata": {"annotations": {"a.io/b~c": "v"}}});
        let patch = diff(&before, &after);
        assert_eq!(patch[0]["path"], "/metadata/annotations/a.io~1b~0c");
        assert_eq!(apply(&before, &patch), after);
    }

    #[test]
    fn appended_items_are_added_and_shrunk_lists_replaced() {
        let before = json!({"l": [1, 2], "m": [1, 2, 3]});
        let after = json!({"l": [1, 2, 3, 4], "m": [3]});
        let patch = diff(&before, &after);
        assert_eq!(
            patch,
            json!([
                {"op": "add", "path": "/l/-", "value": 3},
                {"op": "add", "path": "/l/-", "value": 4},
                {"op": "replace", "path": "/m", "value": [3]},
            ])
        );
        assert_eq!(diff(&after, &after), json!([]));
    }
}
