//! The manifest stream: splits multi-document YAML into documents that keep their source text,
//! parses each one, and reports errors by document number and stream line.
//!
//! Documents are split on the text rather than by a YAML event stream so that every document
//! `inject` leaves alone is written back byte for byte, comments and all. The split follows the
//! YAML rule that a `---` marker (or a `%` directive) at column 0 always starts a new document,
//! even inside what would otherwise be a multi-line scalar.

use serde::Deserialize;
use serde_norway::Value;

/// One document of the stream.
#[derive(Debug, Clone)]
pub struct Document {
    /// 1-based position among the stream's documents (a leading comment block is not one).
    pub number: usize,
    /// 1-based line of the stream on which this document's text starts.
    pub start_line: usize,
    /// The source text, verbatim: directives, the `---` line, comments, content.
    pub text: String,
    /// The parsed content; `Value::Null` for a document with no content.
    pub value: Value,
}

impl Document {
    /// The lines before the content that survive a rewrite: directives, the `---` marker and
    /// leading comments (Helm's `# Source: chart/templates/x.yaml` lives here). Content on the
    /// marker line itself (`--- {a: 1}`) is dropped; the caller writes the new content.
    pub fn preamble(&self) -> String {
        let mut out = String::new();
        for line in self.text.split_inclusive('\n') {
            let trimmed = line.trim_end_matches(['\n', '\r']);
            if is_marker(trimmed) {
                out.push_str("---\n");
            } else if trimmed.starts_with('%')
                || trimmed.trim_start().starts_with('#')
                || trimmed.trim().is_empty()
            {
                out.push_str(trimmed);
                out.push('\n');
            } else {
                break;
            }
        }
        out
    }
}

/// A document that is not valid YAML, located in the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("document {document} (line {line}, column {column}): {message}")]
pub struct YamlError {
    pub document: usize,
    /// 1-based line in the whole stream.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// `---` alone, or followed by whitespace and more (a comment, a tag, inline content).
fn is_marker(line: &str) -> bool {
    match line.strip_prefix("---") {
        Some(rest) => rest.is_empty() || rest.starts_with([' ', '\t', '\r']),
        None => false,
    }
}

/// Splits `input` into document texts with their 1-based start lines.
fn split(input: &str) -> Vec<(usize, String, bool)> {
    // (start line, text, starts with a marker or directive)
    let mut chunks: Vec<(usize, String, bool)> = Vec::new();
    let mut current = String::new();
    let mut current_start = 1;
    let mut current_explicit = false;
    let mut in_directives = false;
    for (index, line) in input.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        let directive = bare.starts_with('%');
        let marker = is_marker(bare);
        // Directives belong to the document whose `---` follows them.
        let starts_new = (directive || marker) && !in_directives;
        if starts_new {
            if !current.is_empty() {
                chunks.push((
                    current_start,
                    std::mem::take(&mut current),
                    current_explicit,
                ));
            }
            current_start = index + 1;
            current_explicit = true;
        }
        if directive {
            in_directives = true;
        } else if marker {
            in_directives = false;
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        chunks.push((current_start, current, current_explicit));
    }
    chunks
}

/// Parses a stream of YAML documents. A document with no content parses to `Value::Null`;
/// a comment-only prefix before the first `---` is kept as a document-less chunk numbered 0.
pub fn parse_stream(input: &str) -> Result<Vec<Document>, YamlError> {
    let mut documents = Vec::new();
    let mut number = 0;
    for (start_line, text, explicit) in split(input) {
        let parsed = parse_one(&text);
        let has_content = !matches!(parsed, Ok(Value::Null));
        let is_document = explicit || has_content;
        if is_document {
            number += 1;
        }
        let value = parsed.map_err(|(line, column, message)| YamlError {
            document: number.max(1),
            line: start_line + line.saturating_sub(1),
            column,
            message,
        })?;
        documents.push(Document {
            number: if is_document { number } else { 0 },
            start_line,
            text,
            value,
        });
    }
    Ok(documents)
}

/// Parses one document's text; errors carry the chunk-relative line, the column and the
/// message without libyaml's own (chunk-relative, hence misleading) position.
fn parse_one(text: &str) -> Result<Value, (usize, usize, String)> {
    let mut values = Vec::new();
    for de in serde_norway::Deserializer::from_str(text) {
        match Value::deserialize(de) {
            Ok(v) => values.push(v),
            Err(e) => {
                let (line, column) = e
                    .location()
                    .map(|l| (l.line(), l.column()))
                    .unwrap_or((1, 1));
                let message = strip_positions(&e.to_string());
                return Err((line, column, message));
            }
        }
    }
    match values.len() {
        0 => Ok(Value::Null),
        1 => Ok(values.pop().unwrap_or(Value::Null)),
        // The splitter starts a new chunk at every marker, so this needs a marker libyaml
        // accepts but we did not see; refuse rather than silently merge two documents.
        n => Err((
            1,
            1,
            format!("{n} documents where one was expected; separate documents with a `---` line"),
        )),
    }
}

/// Removes libyaml's ` at line L column C` fragments: they count from the start of one
/// document, not the stream, and the error already leads with the stream position.
fn strip_positions(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(" at line ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + " at line ".len()..];
        let digits = |s: &str| s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let n = digits(after);
        let tail = &after[n..];
        match tail.strip_prefix(" column ") {
            Some(col) if n > 0 && digits(col) > 0 => rest = &col[digits(col)..],
            _ => {
                out.push_str(" at line ");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Serializes a value as one YAML document body (no `---`), ending in a newline.
pub fn to_yaml(value: &Value) -> String {
    // Values built from parsed YAML and string/number literals always serialize.
    serde_norway::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_markers_and_keeps_text_verbatim() {
        let input = "# header\n---\n# Source: a.yaml\na: 1\n--- # c\nb: 2\n---\n";
        let docs = parse_stream(input).unwrap();
        let joined: String = docs.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(joined, input);
        assert_eq!(docs.len(), 4);
        assert_eq!(docs[0].number, 0, "a comment-only prefix is not a document");
        assert_eq!(docs[1].number, 1);
        assert_eq!(docs[1].start_line, 2);
        assert_eq!(docs[2].number, 2);
        assert_eq!(docs[3].value, Value::Null);
    }

    #[test]
    fn first_document_without_marker_counts() {
        let docs = parse_stream("a: 1\n---\nb: 2").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].number, 1);
        assert_eq!(docs[1].number, 2);
    }

    #[test]
    fn marker_lookalikes_are_content() {
        let docs = parse_stream("a: |\n  ---\n  x\nb: ----\n").unwrap();
        assert_eq!(docs.len(), 1);
    }

    #[test]
    fn directives_stay_with_their_document() {
        let docs = parse_stream("a: 1\n%YAML 1.1\n---\nb: 2\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert!(docs[1].text.starts_with("%YAML"));
    }

    #[test]
    fn errors_name_the_document_and_the_stream_line() {
        let input = "a: 1\n---\nb: 2\n---\n# Source: x\nc:\n  - a\n - b\n";
        let err = parse_stream(input).unwrap_err();
        assert_eq!(err.document, 3);
        assert_eq!(err.line, 8);
        assert!(!err.message.contains("at line"), "{}", err.message);
        assert!(err
            .to_string()
            .starts_with("document 3 (line 8, column 2): "));
    }

    #[test]
    fn positions_are_stripped_from_messages() {
        assert_eq!(
            strip_positions("bad key at line 5 column 2, while parsing a map at line 3 column 1"),
            "bad key, while parsing a map"
        );
        assert_eq!(strip_positions("at line x"), "at line x");
    }

    #[test]
    fn duplicate_keys_are_errors() {
        assert!(parse_stream("a: 1\na: 2\n").is_err());
    }

    #[test]
    fn preamble_keeps_marker_and_leading_comments() {
        let docs = parse_stream("--- # x\n# Source: y\n\nkind: A\n# inner\n").unwrap();
        assert_eq!(docs[0].preamble(), "---\n# Source: y\n\n");
    }
}
