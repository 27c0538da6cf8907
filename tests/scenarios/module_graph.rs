//! The import rules docs/design/layout.md states, checked on the source: no two files import
//! each other, directly or round a circle (a parent module and its children aside: `mod.rs`
//! declares them and they use what it re-exports), and no role imports another but the
//! webhook, which uses `inject`'s pod rewrite by design. Imports are read from `crate::` and
//! `super::` paths outside comments, each file's `mod tests` and its `tests.rs`. A path lands
//! on the file of its longest module prefix, so an import of what a `mod.rs` re-exports counts
//! as one of that `mod.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const ROLES: [&str; 5] = ["elect", "supervise", "inject", "webhook", "status"];

type Module = Vec<String>;

/// Every `.rs` file under `src/`, by module path (`src/a/b.rs` and `src/a/b/mod.rs` are a::b).
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<Module, String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut deeper = prefix.to_vec();
            deeper.push(name);
            modules(&path, &deeper, out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut module = prefix.to_vec();
            if !matches!(stem, "mod" | "lib" | "main") {
                module.push(stem.to_owned());
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            out.insert(module, text);
        }
    }
}

/// The source that counts: no comment lines, nothing from the unit tests on (`mod tests`, of
/// any visibility, is where a file's tests begin).
fn code(text: &str) -> String {
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect();
    let cut = kept.iter().position(|l| {
        let l = l.trim_start();
        l.starts_with("mod tests") || (l.starts_with("pub") && l.contains(" mod tests"))
    });
    kept[..cut.unwrap_or(kept.len())].join("\n")
}

fn ident_end(s: &str) -> usize {
    s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len())
}

/// The path at the start of `s` (`a::b::c`, or `a::{b, c::{d, e}}`, one path per item of a
/// group, nested groups included), each after `prefix`, into `found`; returns what follows.
fn read_path<'a>(mut s: &'a str, prefix: &[String], found: &mut Vec<Module>) -> &'a str {
    let mut path = prefix.to_vec();
    loop {
        let end = ident_end(s);
        if end == 0 {
            break;
        }
        path.push(s[..end].to_owned());
        s = &s[end..];
        match s.strip_prefix("::") {
            Some(after) => s = after,
            None => {
                found.push(path);
                return s;
            }
        }
    }
    let Some(mut rest) = s.strip_prefix('{') else {
        if path.len() > prefix.len() {
            found.push(path);
        }
        return s;
    };
    loop {
        rest = read_path(rest.trim_start(), &path, found).trim_start();
        match rest.strip_prefix(',') {
            Some(after) => rest = after,
            None => return rest.strip_prefix('}').unwrap_or(rest),
        }
    }
}

/// The paths after each `anchor` (`crate::`, or `super::` with the `super::`s that follow it
/// counted), each as (levels up, path): `crate::` is level 0.
fn paths_after(text: &str, anchor: &str) -> Vec<(usize, Module)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(anchor) {
        // `xcrate::` or `my_super::` is not the anchor.
        let before = rest[..i].chars().next_back();
        rest = &rest[i + anchor.len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let mut up = usize::from(anchor == "super::");
        while let Some(after) = rest.strip_prefix("super::") {
            up += 1;
            rest = after;
        }
        let mut paths = Vec::new();
        rest = read_path(rest, &[], &mut paths);
        found.extend(paths.into_iter().map(|p| (up, p)));
    }
    found
}

/// The module file a path lands in: its longest prefix that is a file.
fn resolve(path: &[String], files: &BTreeMap<Module, String>) -> Option<Module> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| files.contains_key(p))
}

/// Who imports whom, file by file, a parent and its descendants left out.
fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = BTreeMap::new();
    modules(&Path::new(ROOT).join("src"), &[], &mut files);
    let mut edges = BTreeMap::new();
    for (module, text) in &files {
        // A file of tests (`tests.rs` beside its module) holds no import of the module's own.
        if module.last().is_some_and(|m| m == "tests") {
            continue;
        }
        let text = code(text);
        let mut targets: Vec<Module> = paths_after(&text, "crate::")
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        targets.extend(paths_after(&text, "super::").into_iter().map(|(up, p)| {
            let mut full = module[..module.len().saturating_sub(up)].to_vec();
            full.extend(p);
            full
        }));
        let out: BTreeSet<Module> = targets
            .iter()
            .filter_map(|p| resolve(p, &files))
            .filter(|t| !t.starts_with(module) && !module.starts_with(t))
            .collect();
        edges.insert(module.clone(), out);
    }
    edges
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("/")
    }
}

#[test]
fn no_file_imports_one_that_imports_it_back_round_any_circle() {
    let edges = graph();
    assert!(
        edges.len() > 50,
        "read only {} files under src/",
        edges.len()
    );
    // A circle exists when some file reaches itself: a walk from each file over the edges.
    let mut circles = BTreeSet::new();
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&Module> = edges[start].iter().collect();
        while let Some(m) = todo.pop() {
            if m == start {
                let back: Vec<String> = edges
                    .iter()
                    .filter(|(from, to)| to.contains(start) && *from != start)
                    .map(|(from, _)| name(from))
                    .collect();
                circles.insert(format!("{} (imported back through {back:?})", name(start)));
                break;
            }
            if seen.insert(m) {
                todo.extend(edges.get(m).into_iter().flatten());
            }
        }
    }
    assert!(
        circles.is_empty(),
        "files on an import circle (docs/design/layout.md: imports run one way):\n{}",
        circles.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn no_role_imports_another_but_the_webhook_inject() {
    let mut crossings = Vec::new();
    for (from, to) in graph() {
        let Some(role) = from.first().filter(|r| ROLES.contains(&r.as_str())) else {
            continue;
        };
        for target in to {
            let Some(other) = target.first().filter(|r| ROLES.contains(&r.as_str())) else {
                continue;
            };
            if other != role && !(role == "webhook" && other == "inject") {
                crossings.push(format!("{} -> {}", name(&from), name(&target)));
            }
        }
    }
    assert!(
        crossings.is_empty(),
        "a role imports another (names shared between roles live in src/wire.rs):\n{}",
        crossings.join("\n")
    );
}

#[test]
fn the_reader_sees_imports_in_nested_groups_and_through_super() {
    let text = "use crate::a::{b, c::{d, e::F}, g};\nuse super::super::h::I;\n\
                // use crate::z;\nfn f() { crate::j::k(); my_crate::l(); }\n\
                pub(crate) mod tests {\n use crate::t;\n}";
    let code = code(text);
    let strings = |v: Vec<(usize, Module)>| -> Vec<(usize, String)> {
        let mut v: Vec<_> = v.into_iter().map(|(u, p)| (u, p.join("::"))).collect();
        v.sort();
        v
    };
    assert_eq!(
        strings(paths_after(&code, "crate::")),
        [
            (0, "a::b"),
            (0, "a::c::d"),
            (0, "a::c::e::F"),
            (0, "a::g"),
            (0, "j::k")
        ]
        .map(|(u, p)| (u, p.to_owned()))
    );
    assert_eq!(
        strings(paths_after(&code, "super::")),
        [(2, "h::I".to_owned())]
    );
}
