//! Every message a user can meet is in the troubleshooting guide: the test reads the source —
//! `error!`/`warn!` logs, the `#[error]` text of typed errors, the flags a configuration error
//! (exit 2) names, `eprintln!` lines, inject's warnings and manifest errors, the webhook's
//! refusals and warnings, the CEL messages of the write fence and the idle-namespace guard, and
//! the charts' `fail`/`required` messages — and checks that docs/operations/troubleshooting.md
//! holds each one's key, so a new message cannot ship undocumented. The matching rule is stated
//! at the top of the guide (and in [`key`]). No apiserver, no binary: source text only.

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const GUIDE: &str = "docs/operations/troubleshooting.md";
/// The guide's section that must name every flag a configuration error names.
const CONFIG_SECTION: &str = "## Configuration errors (exit 2)";

/// One message found in the source.
#[derive(Debug)]
struct Message {
    /// `file:line`.
    at: String,
    /// What kind of message (where it is printed).
    kind: &'static str,
    /// The fixed parts of its text: what is printed whatever the placeholders hold.
    parts: Vec<String>,
}

/// The key the guide must hold: the message's longest fixed part (text between placeholders),
/// whitespace collapsed and trimmed of punctuation at both ends, cut to its first 8 words.
/// None for a message without a fixed part of two words (a wrapper such as `{what}: {source}`,
/// whose parts are messages of their own).
fn key(parts: &[String]) -> Option<String> {
    parts
        .iter()
        .map(|p| {
            let words: Vec<&str> = p.split_whitespace().collect();
            words.join(" ")
        })
        .map(|p| {
            p.trim_matches(|c: char| !c.is_alphanumeric() && !"`'\"()".contains(c))
                .to_owned()
        })
        .filter(|p| p.split_whitespace().count() >= 2)
        .max_by_key(|p| p.split_whitespace().count())
        .map(|p| p.split_whitespace().take(8).collect::<Vec<_>>().join(" "))
}

/// Text as it is compared: whitespace collapsed, backticks dropped (the guide quotes messages
/// in code spans; some messages quote `*` themselves).
fn normalized(text: &str) -> String {
    text.replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

// === Rust source ===

/// `src` with comments blanked (offsets kept, so line numbers stay right).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out[i] = b' ';
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                if b[i] != b'\n' {
                    out[i] = b' ';
                }
                i += 1;
            }
            for _ in 0..2 {
                if i < b.len() {
                    out[i] = b' ';
                    i += 1;
                }
            }
        } else if let Some((_, end)) = literal_at(src, i) {
            i = end;
        } else if let Some(end) = char_literal_end(src, i) {
            i = end;
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking ASCII keeps UTF-8")
}

/// The Rust string literal starting at `i` (`"…"`, `r"…"`, `r#"…"#`), unescaped, and the
/// offset after it.
fn literal_at(src: &str, i: usize) -> Option<(String, usize)> {
    let b = src.as_bytes();
    let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    if b.get(i) == Some(&b'r') && !prev_ident {
        let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
        if b.get(i + 1 + hashes) == Some(&b'"') {
            let start = i + 2 + hashes;
            let close = format!("\"{}", "#".repeat(hashes));
            let end = src[start..].find(&close)? + start;
            return Some((src[start..end].to_owned(), end + close.len()));
        }
        return None;
    }
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut out = String::new();
    let mut chars = src[i + 1..].char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((out, i + 1 + at + 1)),
            '\\' => match chars.next().map(|(_, c)| c) {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('0') => out.push('\0'),
                Some('\n') => {
                    // A line continuation: the newline and the next line's indentation go.
                    let rest = &src[i + 1 + at + 2..];
                    let skip = rest.len() - rest.trim_start().len();
                    for _ in 0..rest[..skip].chars().count() {
                        chars.next();
                    }
                }
                Some('u') => {
                    let hex: String = chars
                        .by_ref()
                        .map(|(_, c)| c)
                        .take_while(|&c| c != '}')
                        .filter(char::is_ascii_hexdigit)
                        .collect();
                    out.extend(u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32));
                }
                Some(other) => out.push(other),
                None => return None,
            },
            c => out.push(c),
        }
    }
    None
}

/// The offset after a char literal (`'x'`, `'\''`, `'\u{..}'`) starting at `i`; None for a
/// lifetime or anything else.
fn char_literal_end(s: &str, i: usize) -> Option<usize> {
    let b = s.as_bytes();
    if b.get(i) != Some(&b'\'') {
        return None;
    }
    if b.get(i + 1) == Some(&b'\\') {
        let close = b.get(i + 3..)?.iter().position(|&c| c == b'\'')?;
        return Some(i + 3 + close + 1);
    }
    let c = s.get(i + 1..)?.chars().next()?;
    let end = i + 1 + c.len_utf8();
    (b.get(end) == Some(&b'\'')).then_some(end + 1)
}

/// The top-level arguments of the call whose `(` is at `open`, as source slices.
fn call_args(code: &str, open: usize) -> Vec<&str> {
    let b = code.as_bytes();
    let mut depth = 0usize;
    let mut args = Vec::new();
    let mut start = open + 1;
    let mut i = open;
    while i < b.len() {
        if let Some((_, end)) = literal_at(code, i) {
            i = end;
            continue;
        }
        if let Some(end) = char_literal_end(code, i) {
            i = end;
            continue;
        }
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    args.push(&code[start..i]);
                    return args;
                }
            }
            b',' if depth == 1 => {
                args.push(&code[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    args
}

/// The text of an argument that is a string literal or `format!("…", …)`.
fn literal_text(code: &str, arg: &str) -> Option<String> {
    let offset = arg.as_ptr() as usize - code.as_ptr() as usize;
    let lead = arg.len() - arg.trim_start().len();
    let at = offset + lead;
    if let Some((text, _)) = literal_at(code, at) {
        return Some(text);
    }
    let rest = &code[at..];
    if rest.starts_with("format!(") {
        let open = at + "format!".len();
        let first = call_args(code, open).into_iter().next()?;
        return literal_text(code, first);
    }
    None
}

/// The fixed parts of a Rust format string: the text between `{…}` placeholders.
fn rust_parts(format: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                parts.last_mut().unwrap().push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                parts.last_mut().unwrap().push('}');
            }
            '{' => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                parts.push(String::new());
            }
            c => parts.last_mut().unwrap().push(c),
        }
    }
    parts
}

/// The string literals of a CEL expression: the fixed parts of its message.
fn cel_parts(expression: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = expression;
    while let Some(at) = rest.find('"') {
        let after = &rest[at + 1..];
        let Some(end) = after.find('"') else { break };
        parts.extend(rust_parts(&after[..end]));
        rest = &after[end + 1..];
    }
    parts
}

fn line_of(src: &str, offset: usize) -> usize {
    src[..offset].matches('\n').count() + 1
}

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, ext, out);
        } else if p.to_string_lossy().ends_with(ext) {
            out.push(p);
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(ROOT)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Every occurrence of `needle` in `code` that is not the tail of a longer identifier.
fn calls<'a>(code: &'a str, needle: &'a str) -> impl Iterator<Item = usize> + 'a {
    code.match_indices(needle)
        .map(|(at, _)| at)
        .filter(move |&at| {
            let before = code[..at].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
}

/// The messages of one Rust file (its `#[cfg(test)]` part left out), and the flags its
/// configuration errors name.
fn rust_messages(path: &Path, out: &mut Vec<Message>, flags: &mut Vec<(String, String)>) {
    let src = std::fs::read_to_string(path).expect("read source");
    let mut code = code_only(&src);
    if let Some(at) = code.find("#[cfg(test)]") {
        code.truncate(at);
    }
    let file = relative(path);
    let inject_or_webhook = file.starts_with("src/inject/") || file.starts_with("src/webhook/");
    let mut push = |kind: &'static str, offset: usize, text: String, cel: bool| {
        out.push(Message {
            at: format!("{file}:{}", line_of(&src, offset)),
            kind,
            parts: if cel {
                cel_parts(&text)
            } else {
                rust_parts(&text)
            },
        });
    };
    // Logs: the message is the first argument that is a bare string literal.
    for (needle, kind) in [
        ("error!(", "log error"),
        ("warn!(", "log warning"),
        ("eprintln!(", "stderr"),
    ] {
        for at in calls(&code, needle).collect::<Vec<_>>() {
            let open = at + needle.len() - 1;
            // `field = "value"` starts with the field's name, so only the message is a bare
            // literal.
            let message = call_args(&code, open).into_iter().find_map(|a| {
                let at = a.as_ptr() as usize - code.as_ptr() as usize;
                literal_at(&code, at + (a.len() - a.trim_start().len())).map(|(t, _)| t)
            });
            if let Some(text) = message {
                push(kind, at, text, false);
            }
        }
    }
    // Typed errors.
    for at in calls(&code, "#[error(").collect::<Vec<_>>() {
        let open = at + "#[error".len();
        if let Some(text) = call_args(&code, open)
            .first()
            .and_then(|a| literal_text(&code, a))
        {
            push("error type", at, text, false);
        }
    }
    // Configuration errors name their flag first.
    for at in calls(&code, "ConfigError::new(").collect::<Vec<_>>() {
        let open = at + "ConfigError::new".len();
        if let Some(flag) = call_args(&code, open)
            .first()
            .and_then(|a| literal_text(&code, a))
            .filter(|f| f.starts_with("--"))
        {
            flags.push((flag, format!("{file}:{}", line_of(&src, at))));
        }
    }
    if !inject_or_webhook {
        return;
    }
    // inject's warnings and notes, the webhook's warnings.
    for needle in ["warnings.push(", "notes.push("] {
        for at in calls(&code, needle).collect::<Vec<_>>() {
            let open = at + needle.len() - 1;
            if let Some(text) = call_args(&code, open)
                .first()
                .and_then(|a| literal_text(&code, a))
            {
                push("inject warning", at, text, false);
            }
        }
    }
    // Warnings built by a `fn …_warning(…)`: every `format!` in its body.
    for (at, _) in code.match_indices("_warning(").collect::<Vec<_>>() {
        if !code[..at]
            .trim_end_matches(|c: char| c.is_alphanumeric() || c == '_')
            .ends_with("fn ")
        {
            continue;
        }
        let end = code[at..].find("\n}").map_or(code.len(), |e| at + e);
        for (f, _) in code[at..end].match_indices("format!(").collect::<Vec<_>>() {
            if let Some(text) = literal_text(&code, &code[at + f..]) {
                push("inject warning", at + f, text, false);
            }
        }
    }
    // inject's manifest errors: `reason:` fields, `.error(…)` and `fail(…, …)` of a target.
    for at in calls(&code, "reason: ").collect::<Vec<_>>() {
        if let Some(text) = literal_text(&code, &code[at + "reason: ".len()..]) {
            push("inject error", at, text, false);
        }
    }
    for needle in [".error(", "fail("] {
        for at in code
            .match_indices(needle)
            .map(|(a, _)| a)
            .collect::<Vec<_>>()
        {
            let open = at + needle.len() - 1;
            if let Some(text) = call_args(&code, open)
                .last()
                .and_then(|a| literal_text(&code, a))
            {
                push("inject error", at, text, false);
            }
        }
    }
    // The webhook's refusals and the reasons it refuses a pod with.
    for needle in ["Decision::refuse(", "Err(format!("] {
        for at in code
            .match_indices(needle)
            .map(|(a, _)| a)
            .collect::<Vec<_>>()
        {
            let open = at + needle.len() - 1;
            let args = call_args(&code, open);
            let text = if needle.starts_with("Err") {
                args.first().and_then(|a| literal_text(&code, a))
            } else {
                args.get(2).and_then(|a| literal_text(&code, a))
            };
            if let Some(text) = text {
                push("webhook refusal", at, text, false);
            }
        }
    }
    // Admission policy messages (the write fence, the idle-namespace guard).
    for (needle, cel) in [
        ("message: Some(", false),
        ("message_expression: Some(", true),
    ] {
        for at in code
            .match_indices(needle)
            .map(|(a, _)| a)
            .collect::<Vec<_>>()
        {
            let open = at + needle.len() - 1;
            if let Some(text) = call_args(&code, open)
                .first()
                .and_then(|a| literal_text(&code, a))
            {
                push("admission policy message", at, text, cel);
            }
        }
    }
}

// === Chart templates ===

/// A Go template string literal at the start of `s`, unescaped.
fn go_literal(s: &str) -> Option<String> {
    let s = s.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => out.push(match chars.next()? {
                'n' => '\n',
                other => other,
            }),
            c => out.push(c),
        }
    }
    None
}

/// The fixed parts of a Go `printf` format: the text between `%` verbs.
fn printf_parts(format: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            parts.last_mut().unwrap().push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            parts.last_mut().unwrap().push('%');
            continue;
        }
        for c in chars.by_ref() {
            if c.is_ascii_alphabetic() {
                break;
            }
        }
        parts.push(String::new());
    }
    parts
}

fn chart_messages(path: &Path, out: &mut Vec<Message>) {
    let src = std::fs::read_to_string(path).expect("read template");
    let file = relative(path);
    let mut push = |kind: &'static str, offset: usize, parts: Vec<String>| {
        out.push(Message {
            at: format!("{file}:{}", line_of(&src, offset)),
            kind,
            parts,
        })
    };
    for word in ["fail ", "required "] {
        for (at, _) in src.match_indices(word) {
            let rest = src[at + word.len()..].trim_start();
            let rest = rest.strip_prefix('(').unwrap_or(rest).trim_start();
            let (rest, printf) = match rest.strip_prefix("printf ") {
                Some(r) => (r.trim_start(), true),
                None => (rest, false),
            };
            if let Some(text) = go_literal(rest) {
                let parts = if printf {
                    printf_parts(&text)
                } else {
                    vec![text]
                };
                push("chart refusal", at, parts);
            }
        }
    }
    for (needle, cel) in [("message: ", false), ("messageExpression: ", true)] {
        for (at, _) in src.match_indices(needle) {
            let line_end = src[at..].find('\n').map_or(src.len(), |e| at + e);
            let value = src[at + needle.len()..line_end].trim();
            let parts = if let Some(inner) = value.strip_prefix("{{") {
                let inner = inner.trim_start();
                match inner
                    .strip_prefix("printf ")
                    .and_then(|r| go_literal(r.trim_start()))
                {
                    Some(text) => printf_parts(&text),
                    None => continue,
                }
            } else if let Some(quoted) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\''))
            {
                let text = quoted.replace("''", "'");
                if cel {
                    cel_parts(&text)
                } else {
                    vec![text]
                }
            } else {
                continue;
            };
            push("admission policy message (chart)", at, parts);
        }
    }
}

// === The test ===

fn all_messages() -> (Vec<Message>, Vec<(String, String)>) {
    let root = Path::new(ROOT);
    let mut sources = Vec::new();
    files(&root.join("src"), ".rs", &mut sources);
    sources.retain(|p| {
        let p = relative(p);
        !p.ends_with("/tests.rs") && !p.contains("/tests/")
    });
    let mut messages = Vec::new();
    let mut flags = Vec::new();
    for path in &sources {
        rust_messages(path, &mut messages, &mut flags);
    }
    for chart in ["passmower-elector", "passmower-elector-webhook"] {
        let mut templates = Vec::new();
        files(
            &root.join("charts").join(chart).join("templates"),
            "",
            &mut templates,
        );
        templates.retain(|p| !p.ends_with("NOTES.txt"));
        for path in &templates {
            chart_messages(path, &mut messages);
        }
    }
    (messages, flags)
}

#[test]
fn the_guide_covers_every_message_the_binary_and_the_charts_print() {
    let guide = std::fs::read_to_string(Path::new(ROOT).join(GUIDE)).expect("the guide");
    let text = normalized(&guide);
    let (messages, _) = all_messages();
    let mut missing: Vec<String> = messages
        .iter()
        .filter_map(|m| {
            let key = key(&m.parts)?;
            (!text.contains(&normalized(&key))).then(|| {
                format!(
                    "{} ({}): \"{key}\" — {}",
                    m.at,
                    m.kind,
                    m.parts
                        .join("…")
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            })
        })
        .collect();
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "{GUIDE} does not cover {} message(s); add each key (the rule is at the top of the \
         guide):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_guide_names_every_flag_a_configuration_error_names() {
    let guide = std::fs::read_to_string(Path::new(ROOT).join(GUIDE)).expect("the guide");
    let section: String = guide
        .lines()
        .skip_while(|l| l.trim_end() != CONFIG_SECTION)
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !section.is_empty(),
        "{GUIDE} has no section {CONFIG_SECTION:?}"
    );
    let (_, flags) = all_messages();
    let mut missing: Vec<String> = flags
        .iter()
        .filter(|(flag, _)| !section.contains(&format!("`{flag}`")))
        .map(|(flag, at)| format!("{at}: `{flag}`"))
        .collect();
    missing.sort();
    missing.dedup_by(|a, b| a.rsplit(' ').next() == b.rsplit(' ').next());
    assert!(
        missing.is_empty(),
        "{CONFIG_SECTION} in {GUIDE} does not name:\n{}",
        missing.join("\n")
    );
}

/// The extraction itself: enough of each kind is found, and the key rule picks what it says.
#[test]
fn every_kind_of_message_is_found() {
    let (messages, flags) = all_messages();
    let count = |kind: &str| messages.iter().filter(|m| m.kind == kind).count();
    for (kind, at_least) in [
        ("log error", 15),
        ("log warning", 30),
        ("error type", 30),
        ("inject warning", 5),
        ("inject error", 10),
        ("webhook refusal", 3),
        ("admission policy message", 3),
        ("chart refusal", 20),
        ("admission policy message (chart)", 4),
    ] {
        assert!(
            count(kind) >= at_least,
            "only {} messages of kind {kind:?} found: the extraction broke",
            count(kind)
        );
    }
    assert!(
        flags.len() >= 20,
        "only {} configuration flags found",
        flags.len()
    );
    let mut kinds: Vec<&str> = messages.iter().map(|m| m.kind).collect();
    kinds.sort();
    kinds.dedup();
    for kind in kinds {
        eprintln!("{kind}: {}", count(kind));
    }
    eprintln!("configuration flags: {}", flags.len());
    let fence: Vec<&Message> = messages
        .iter()
        .filter(|m| {
            m.at.starts_with("src/inject/companions/fence.rs")
                && m.kind == "admission policy message"
        })
        .collect();
    assert!(
        fence
            .iter()
            .any(|m| m.parts.iter().any(|p| p.contains("does not hold Lease"))),
        "the write fence's messageExpression was not read: {fence:?}"
    );
    assert_eq!(
        key(&rust_parts(
            "cannot read the elector's token file {}: {cause}; so no grant"
        ))
        .as_deref(),
        Some("cannot read the elector's token file")
    );
    assert_eq!(key(&rust_parts("{what}: {source}")), None);
    assert_eq!(
        key(&printf_parts(
            "idleNamespace %q exists: Passmower followers would reconcile what is in it"
        ))
        .as_deref(),
        Some("exists: Passmower followers would reconcile what is in")
    );
}
