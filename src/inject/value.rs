//! Helpers over generic YAML values: reading a path, creating the mapping at a path, appending
//! to a list, and turning a typed Kubernetes object into a value with its identity first.
//! Imports nothing of `inject`.

use serde_norway::{Mapping, Value};

pub(crate) fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(value, path)?.as_str()
}

pub(crate) fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

/// Converts a typed object to YAML, with `name` first in every mapping (as people write it).
pub fn to_value<T: serde::Serialize>(typed: &T) -> Value {
    let mut value = serde_norway::to_value(typed).unwrap_or_default();
    reorder(&mut value);
    value
}

/// The mapping at `path` below `root`, created (as empty mappings) where missing or null.
pub(crate) fn child_mapping<'a>(root: &'a mut Value, path: &[&str]) -> Option<&'a mut Mapping> {
    let mut current = root;
    for key in path {
        let map = current.as_mapping_mut()?;
        let slot = map
            .entry(Value::from(*key))
            .or_insert_with(|| Value::Mapping(Mapping::new()));
        if slot.is_null() {
            *slot = Value::Mapping(Mapping::new());
        }
        current = slot;
    }
    current.as_mapping_mut()
}

/// Appends to the list under `key`, creating it when absent or null.
pub(crate) fn append(map: &mut Mapping, key: &str, item: Value) -> Result<(), ()> {
    let slot = map
        .entry(Value::from(key))
        .or_insert_with(|| Value::Sequence(Vec::new()));
    if slot.is_null() {
        *slot = Value::Sequence(Vec::new());
    }
    slot.as_sequence_mut().ok_or(())?.push(item);
    Ok(())
}

/// Puts the keys people read first at the front of every mapping, keeping the rest in order.
pub fn reorder(value: &mut Value) {
    const FIRST: [&str; 10] = [
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "namespace",
        "labels",
        "annotations",
        "image",
        "command",
        "args",
    ];
    match value {
        Value::Mapping(map) => {
            let mut sorted = Mapping::new();
            for key in FIRST {
                if let Some(v) = map.remove(key) {
                    sorted.insert(key.into(), v);
                }
            }
            for (k, v) in std::mem::take(map) {
                sorted.insert(k, v);
            }
            for (_, v) in sorted.iter_mut() {
                reorder(v);
            }
            *map = sorted;
        }
        Value::Sequence(items) => items.iter_mut().for_each(reorder),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reorder_puts_identity_first() {
        let mut v: Value = serde_norway::from_str("b: 1\nname: x\nkind: K\n").unwrap();
        reorder(&mut v);
        assert_eq!(
            serde_norway::to_string(&v).unwrap(),
            "kind: K\nname: x\nb: 1\n"
        );
    }
}
