//! `--leader-port-map`: moving a Node.js leader instance's listening ports out of the serving
//! instance's way, without a changed image.
//!
//! Why a preload module in `NODE_OPTIONS`, and not something else (see also docs/design/handover.md):
//! - Passmower's metrics/health server listens on 9090, fixed in its code; only its HTTP port
//!   (`PORT`) is configurable. Two instances in one pod share one network namespace, so the
//!   second one must bind elsewhere, and the only seam an unmodified image offers is the Node
//!   runtime itself: `NODE_OPTIONS` is read by every `node` process, and `--import` (Node ≥
//!   18.18 / 20.6) runs a module before the app's. The module patches
//!   `net.Server.prototype.listen`, through which every Node TCP server binds.
//! - It travels as a `data:` URL, so there is no file to place, protect or keep in step with
//!   this binary: nothing another container or UID could swap under the app, and nothing that
//!   needs a writable directory in a container with a read-only root file system.
//! - `LD_PRELOAD` of a `bind(2)` shim would be language-neutral, but it needs a shared object
//!   compiled for the image's libc (this binary is static), it would have to be written to disk
//!   where the app can load it, and it misses statically linked or io_uring binds.
//! - A network namespace per instance needs CAP_SYS_ADMIN (the restricted profile drops every
//!   capability) and cuts the operator instance off from the API server and Redis unless it is
//!   given its own interface, which needs CAP_NET_ADMIN and a CNI the pod does not have.
//! - Draining the pod out of its Service before a restart (failing readiness first) still loses
//!   requests sent to the pod directly, depends on how fast every endpoint consumer notices, and
//!   makes every handover slower by the drain.
//!
//! The moved listeners bind on 127.0.0.1 only: nothing outside the pod reaches the leader
//! instance, and its HTTP side is never sent a request.
//!
//! Other preloads come after ours. An agent in `NODE_OPTIONS` (OpenTelemetry, an APM) that
//! opens a port would otherwise bind it unmoved and collide with the serving instance's copy of
//! itself (EADDRINUSE), killing every leader instance at start. Our `--import` goes first among
//! the `--import`s, which Node runs in order; but Node runs every `--require` before any
//! `--import`, so the leader instance's `--require`s are taken out of `NODE_OPTIONS` and our
//! module requires them itself, once its patch is in place, in their order and resolved as Node
//! resolves `--require` (from the working directory).

/// The preload module, run by the leader instance before the app (see the module doc).
pub const PRELOAD: &str = include_str!("port_map/preload.mjs");

/// The variable carrying the table to the preload module (`FROM=TO,...`).
pub const TABLE_VAR: &str = "PASSMOWER_ELECTOR_PORT_MAP";

/// The variable carrying the `--require` modules taken out of `NODE_OPTIONS` (a JSON array of
/// strings), which the preload module requires after its patch.
pub const REQUIRE_VAR: &str = "PASSMOWER_ELECTOR_REQUIRE";

/// The oldest Node.js with `--import`, per major version: 18.18 (backported), 19.0 and later.
pub const MIN_NODE: &str = "18.18";

/// Whether Node `version` (`node --version`: `v20.20.2`) has `--import`; `None` when the text
/// is not a Node version.
pub fn node_has_import(version: &str) -> Option<bool> {
    let mut parts = version.trim().strip_prefix('v')?.split('.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    Some(major > 18 || (major == 18 && minor >= 18))
}

/// `NODE_OPTIONS` split as Node splits it: on spaces, with double quotes grouping and a
/// backslash inside quotes escaping the next character. `None` for what Node refuses (an
/// unterminated quote or escape).
fn split_node_options(text: &str) -> Option<Vec<String>> {
    let mut words: Vec<String> = Vec::new();
    let (mut quoted, mut new_word) = (false, true);
    let mut chars = text.chars();
    while let Some(mut c) = chars.next() {
        if c == '\\' && quoted {
            c = chars.next()?;
        } else if c == ' ' && !quoted {
            new_word = true;
            continue;
        } else if c == '"' {
            quoted = !quoted;
            continue;
        }
        if new_word {
            words.push(String::new());
            new_word = false;
        }
        if let Some(w) = words.last_mut() {
            w.push(c);
        }
    }
    (!quoted).then_some(words)
}

/// Words back into `NODE_OPTIONS`, quoted where Node would split or unquote them.
fn join_node_options(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if w.is_empty() || w.contains([' ', '"', '\\']) {
                let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
                format!("\"{escaped}\"")
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `NODE_OPTIONS` without its `--require X`, `--require=X`, `-r X` and `-r=X`, and the modules
/// they named, in order. `None` when Node could not parse it either.
fn take_requires(node_options: &str) -> Option<(Vec<String>, Vec<String>)> {
    let words = split_node_options(node_options)?;
    let (mut kept, mut required) = (Vec::new(), Vec::new());
    let mut words = words.into_iter();
    while let Some(w) = words.next() {
        if w == "--require" || w == "-r" {
            // Node refuses a --require without its value; so does the instance, unchanged.
            match words.next() {
                Some(module) => required.push(module),
                None => kept.push(w),
            }
        } else if let Some(module) = w
            .strip_prefix("--require=")
            .or_else(|| w.strip_prefix("-r="))
        {
            required.push(module.to_owned());
        } else {
            kept.push(w);
        }
    }
    Some((kept, required))
}

/// Which listening port goes where in the leader instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortMap {
    entries: Vec<(Option<u16>, u16)>,
}

/// One `--leader-port-map` value: `FROM=TO`, FROM a port or `*` (every port), TO a port
/// (`0`: any free one). The moved listener binds on 127.0.0.1.
pub fn parse_entry(s: &str) -> Result<(Option<u16>, u16), String> {
    const ALLOWED: &str = "expected FROM=TO with FROM a TCP port or * (every port) and TO a \
                           port, 0 for any free one; e.g. 9090=0 or *=0";
    let (from, to) = s
        .split_once('=')
        .ok_or_else(|| format!("no '='; {ALLOWED}"))?;
    let port = |p: &str| p.trim().parse::<u16>().ok();
    let from = match from.trim() {
        "*" => None,
        p => Some(
            port(p)
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("FROM {p:?} is not a port from 1 to 65535; {ALLOWED}"))?,
        ),
    };
    let to = port(to).ok_or_else(|| format!("TO {to:?} is not a port (0-65535); {ALLOWED}"))?;
    Ok((from, to))
}

/// Entries as `FROM=TO,FROM=TO`: the preload's table, and how messages show the flag.
pub fn show(entries: &[(Option<u16>, u16)]) -> String {
    entries
        .iter()
        .map(|(from, to)| match from {
            Some(p) => format!("{p}={to}"),
            None => format!("*={to}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl PortMap {
    /// Builds the table from the parsed flags. Refused: a FROM given twice (which would win is
    /// not obvious), and a TO the leader instance cannot bind: a port the serving instance
    /// listens on (a FROM of the map, its own included: `9090=9090`), or one port given as TO
    /// twice, where the leader instance's second listener would meet its first. The serving
    /// instance listens on every address, so its port is taken on 127.0.0.1 too. TO 0 (any
    /// free port) never collides.
    pub fn new(entries: Vec<(Option<u16>, u16)>) -> Result<PortMap, String> {
        let shown = |from: &Option<u16>| from.map_or_else(|| "*".to_owned(), |p| p.to_string());
        for (i, (from, to)) in entries.iter().enumerate() {
            if entries[..i].iter().any(|(f, _)| f == from) {
                return Err(format!(
                    "{} is mapped twice; give each FROM once",
                    shown(from)
                ));
            }
            if *to == 0 {
                continue;
            }
            let entry = format!("{}={to}", shown(from));
            if entries.iter().any(|(f, _)| *f == Some(*to)) {
                let why = if *from == Some(*to) {
                    "maps the port to itself"
                } else {
                    "moves a listener onto a port the map moves away"
                };
                return Err(format!(
                    "{entry} {why}: the serving instance listens on {to} (on every address), so \
                     the leader instance cannot bind 127.0.0.1:{to}; TO must be 0 (any free port, \
                     the usual choice) or a port no instance listens on"
                ));
            }
            if let Some((other, _)) = entries[..i].iter().find(|(_, t)| t == to) {
                return Err(format!(
                    "{entry}: {} goes to {to} as well, and the leader instance's second listener \
                     there would find its first; give each TO once, or 0 (any free port)",
                    shown(other)
                ));
            }
        }
        Ok(PortMap { entries })
    }

    /// A TO port of the map equal to `port` (never 0, which means any free port).
    pub fn moves_onto(&self, port: u16) -> Option<String> {
        self.entries
            .iter()
            .find(|(_, to)| *to != 0 && *to == port)
            .map(|e| show(std::slice::from_ref(e)))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The table as the preload module reads it.
    pub fn table(&self) -> String {
        show(&self.entries)
    }

    /// The environment overrides that load the preload module into the leader instance:
    /// `NODE_OPTIONS` (the one the instance would get otherwise, `inherited`, with the import
    /// first and its `--require`s taken out), the table, and the `--require`d modules for the
    /// preload to load after its patch (see the module doc).
    pub fn env(&self, inherited: Option<&str>) -> Vec<(String, String)> {
        let import = data_import(PRELOAD);
        let existing = inherited.map(str::trim).filter(|s| !s.is_empty());
        let (node_options, required) = match existing.map(|e| (e, take_requires(e))) {
            None => (import, Vec::new()),
            Some((_, Some((kept, required)))) => {
                let words: Vec<String> = std::iter::once(import).chain(kept).collect();
                (join_node_options(&words), required)
            }
            // Node refuses it anyway, and says why: leave it to say so.
            Some((text, None)) => (format!("{import} {text}"), Vec::new()),
        };
        let mut env = vec![
            ("NODE_OPTIONS".to_owned(), node_options),
            (TABLE_VAR.to_owned(), self.table()),
        ];
        if !required.is_empty() {
            let list = serde_json::Value::from(required).to_string();
            env.push((REQUIRE_VAR.to_owned(), list));
        }
        env
    }
}

/// The `NODE_OPTIONS` word that preloads ES module `source` from a `data:` URL: no file, and no
/// space (base64) for `NODE_OPTIONS` to split on.
pub fn data_import(source: &str) -> String {
    format!("--import=data:text/javascript;base64,{}", encode(source))
}

/// Standard base64 (RFC 4648, with padding): the preload's `data:` URL must hold no space,
/// which `NODE_OPTIONS` splits on.
fn encode(input: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_4648_vectors() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain), coded, "{plain:?}");
        }
    }

    #[test]
    fn entries_parse_and_bad_ones_name_the_allowed_form() {
        assert_eq!(parse_entry("9090=0"), Ok((Some(9090), 0)));
        assert_eq!(parse_entry("*=0"), Ok((None, 0)));
        assert_eq!(parse_entry("3000=13000"), Ok((Some(3000), 13000)));
        for bad in ["9090", "0=1", "x=0", "9090=-1", "9090=70000", "=0", "*="] {
            let e = parse_entry(bad).unwrap_err();
            assert!(e.contains("FROM=TO"), "{bad}: {e}");
        }
        let twice = PortMap::new(vec![(Some(9090), 0), (None, 0), (Some(9090), 1)]);
        assert!(twice.unwrap_err().contains("9090 is mapped twice"));
        assert!(PortMap::new(vec![(None, 0), (None, 1)]).is_err());
    }

    /// `9090=9090` was accepted: the leader instance then failed to bind the serving instance's
    /// port on every promotion, and crash-looped until the elector stepped down.
    #[test]
    fn a_to_port_the_serving_instance_or_another_entry_holds_is_refused() {
        let e = PortMap::new(vec![(Some(9090), 9090)]).unwrap_err();
        assert!(e.contains("9090=9090 maps the port to itself"), "{e}");
        assert!(e.contains("TO must be 0"), "{e}");
        let e = PortMap::new(vec![(Some(3000), 9090), (Some(9090), 0)]).unwrap_err();
        assert!(e.contains("3000=9090 moves a listener onto a port"), "{e}");
        let e = PortMap::new(vec![(Some(9090), 0), (None, 9090)]).unwrap_err();
        assert!(e.contains("*=9090"), "{e}");
        let e = PortMap::new(vec![(Some(3000), 13000), (Some(9090), 13000)]).unwrap_err();
        assert!(e.contains("9090=13000: 3000 goes to 13000 as well"), "{e}");
        // 0 is any free port: never a collision, however often it is given.
        assert!(PortMap::new(vec![(Some(3000), 0), (Some(9090), 0), (None, 0)]).is_ok());
        assert!(PortMap::new(vec![(Some(3000), 13000), (Some(9090), 19090)]).is_ok());
        let map = PortMap::new(vec![(Some(3000), 13000), (None, 0)]).unwrap();
        assert_eq!(map.moves_onto(13000).as_deref(), Some("3000=13000"));
        assert_eq!(map.moves_onto(0), None);
        assert_eq!(map.moves_onto(8082), None);
    }

    #[test]
    fn the_env_puts_the_import_first_in_node_options_and_carries_the_table() {
        let map = PortMap::new(vec![(Some(9090), 0), (None, 0)]).unwrap();
        let env = map.env(None);
        let [(k, fresh), (t, table)] = &env[..] else {
            panic!("{env:?}")
        };
        assert_eq!(k, "NODE_OPTIONS");
        assert!(fresh.starts_with("--import=data:text/javascript;base64,"));
        assert!(!fresh.contains(' '), "NODE_OPTIONS splits on spaces");
        assert_eq!((t.as_str(), table.as_str()), (TABLE_VAR, "9090=0,*=0"));
        let kept = map.env(Some("--max-old-space-size=256 --import=./otel.mjs "));
        assert_eq!(
            kept[0].1,
            format!("{fresh} --max-old-space-size=256 --import=./otel.mjs"),
            "ours runs before the other --imports"
        );
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert_eq!(map.env(Some("  "))[0].1, *fresh);
    }

    /// Node runs every --require before any --import: an agent loaded that way listened before
    /// the patch, on the serving instance's port. Its --require moves into the preload.
    #[test]
    fn requires_move_out_of_node_options_into_the_preload_in_order() {
        let map = PortMap::new(vec![(None, 0)]).unwrap();
        let env = map.env(Some(
            "--require ./a.js -r b --max-old-space-size=256 --require=@otel/register -r=d \
             \"--title=a \\\"b\\\"\"",
        ));
        let import = &map.env(None)[0].1;
        assert_eq!(
            env[0].1,
            format!("{import} --max-old-space-size=256 \"--title=a \\\"b\\\"\"")
        );
        assert_eq!(
            env[2],
            (
                REQUIRE_VAR.to_owned(),
                r#"["./a.js","b","@otel/register","d"]"#.to_owned()
            )
        );
        // Quotes and escapes as Node reads them.
        assert_eq!(
            split_node_options(r#"--require "/opt/my agent/x.js" --a="b\"c""#),
            Some(vec![
                "--require".to_owned(),
                "/opt/my agent/x.js".to_owned(),
                r#"--a=b"c"#.to_owned()
            ])
        );
        let words = split_node_options(r#"-r "/opt/my agent/x.js" "a\\b""#).unwrap();
        assert_eq!(split_node_options(&join_node_options(&words)), Some(words));
        // What Node cannot parse stays for Node to refuse, after the import.
        let broken = map.env(Some("--require \"x"));
        assert_eq!(broken[0].1, format!("{import} --require \"x"));
        assert_eq!(broken.len(), 2);
    }

    #[test]
    fn node_versions_with_import_are_told_from_older_ones() {
        for (version, has) in [
            ("v20.20.2\n", Some(true)),
            ("v18.18.0", Some(true)),
            ("v19.0.0", Some(true)),
            ("v22.1.0", Some(true)),
            ("v18.17.1", Some(false)),
            ("v16.20.2", Some(false)),
            ("v12.22.12", Some(false)),
            ("20.1.0", None),
            ("", None),
        ] {
            assert_eq!(node_has_import(version), has, "{version:?}");
        }
    }
}
