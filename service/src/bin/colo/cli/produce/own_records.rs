//! Records of one's own for `colo produce`: read from a file (JSON lines
//! `{"key": ..., "value": ...}`, or `key<TAB>JSON` as kcat writes them), or
//! generated from a payload template. Each payload is sent as the very
//! text given: parsed into a `serde_json::Value` and written again, its
//! members would be reordered and some floats changed in their last digit.

use serde::de::{DeserializeOwned, IgnoredAny};
use std::path::Path;

/// A record to send: its key (the entity id) and its JSON payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnRecord {
    pub key: String,
    pub value: String,
}

/// Reads a records file: one record a line, blank lines skipped.
///
/// # Errors
/// The file cannot be read, or a line is not a record; the error names the
/// file, the line and what is wrong with it.
pub fn read_records(path: &Path) -> Result<Vec<OwnRecord>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--records {}: {e}", path.display()))?;
    let mut records = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record = parse_line(line)
            .map_err(|why| format!("--records {}:{}: {why}", path.display(), number + 1))?;
        records.push(record);
    }
    if records.is_empty() {
        return Err(format!("--records {}: holds no record", path.display()));
    }
    Ok(records)
}

/// One line of a records file.
///
/// # Errors
/// The line is neither form, its key is empty, or its value is not JSON.
pub fn parse_line(line: &str) -> Result<OwnRecord, String> {
    let line = line.trim_end_matches(['\r', '\n']);
    let as_object = if line.trim_start().starts_with('{') {
        Some(object_record(line))
    } else {
        None
    };
    match (as_object, line.split_once('\t')) {
        (Some(Ok(record)), _) => Ok(record),
        (Some(Err(why)), None) => Err(why),
        (None | Some(Err(_)), Some((key, value))) => tab_record(key, value),
        (None, None) => Err(
            "not a record: write {\"key\": \"<entity id>\", \"value\": <JSON>} or <entity id><TAB><JSON>"
                .to_string(),
        ),
    }
}

fn tab_record(key: &str, value: &str) -> Result<OwnRecord, String> {
    if key.is_empty() {
        return Err("the key (before the tab) is empty: it is the entity id".to_string());
    }
    let value = value.trim();
    json(value).map_err(|e| format!("the value (after the tab) is not JSON: {e}"))?;
    Ok(OwnRecord {
        key: key.to_string(),
        value: value.to_string(),
    })
}

fn object_record(line: &str) -> Result<OwnRecord, String> {
    let members = object_members(line).map_err(|e| format!("not a JSON object: {e}"))?;
    let (mut key, mut value) = (None, None);
    for (name, raw) in members {
        let slot = match name.as_str() {
            "key" => &mut key,
            "value" => &mut value,
            other => {
                return Err(format!(
                    "unknown member {other:?}: a record has \"key\" and \"value\""
                ))
            }
        };
        if slot.replace(raw).is_some() {
            return Err(format!("{name:?} is given twice"));
        }
    }
    let key = key.ok_or("no \"key\" (the entity id)")?;
    let value = value.ok_or("no \"value\" (the payload)")?;
    let key: String = serde_json::from_str(key)
        .map_err(|_| format!("the key must be a JSON string, not {key}"))?;
    if key.is_empty() {
        return Err("the key is empty: it is the entity id".to_string());
    }
    Ok(OwnRecord {
        key,
        value: value.to_string(),
    })
}

/// The members of a JSON object, each value as its own text.
fn object_members(text: &str) -> Result<Vec<(String, &str)>, String> {
    let mut members = Vec::new();
    let mut at = skip_whitespace(text, 0);
    if !text[at..].starts_with('{') {
        return Err("it does not start with {".to_string());
    }
    at = skip_whitespace(text, at + 1);
    if text[at..].starts_with('}') {
        at += 1;
    } else {
        loop {
            let (name, end) = one_value::<String>(text, at).map_err(|e| format!("a name: {e}"))?;
            at = skip_whitespace(text, end);
            if !text[at..].starts_with(':') {
                return Err(format!("no : after {name:?}"));
            }
            at = skip_whitespace(text, at + 1);
            let (IgnoredAny, end) =
                one_value(text, at).map_err(|e| format!("the value of {name:?}: {e}"))?;
            members.push((name, &text[at..end]));
            at = skip_whitespace(text, end);
            if text[at..].starts_with(',') {
                at = skip_whitespace(text, at + 1);
            } else if text[at..].starts_with('}') {
                at += 1;
                break;
            } else {
                return Err(format!("expected , or }} at column {}", at + 1));
            }
        }
    }
    if skip_whitespace(text, at) != text.len() {
        return Err(format!("text after the object at column {}", at + 1));
    }
    Ok(members)
}

/// The JSON value that starts at `at` (after whitespace) and where it ends.
fn one_value<T: DeserializeOwned>(text: &str, at: usize) -> Result<(T, usize), String> {
    let mut values = serde_json::Deserializer::from_str(&text[at..]).into_iter::<T>();
    match values.next() {
        Some(Ok(value)) => Ok((value, at + values.byte_offset())),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("nothing there".to_string()),
    }
}

fn skip_whitespace(text: &str, at: usize) -> usize {
    at + text[at..].len() - text[at..].trim_start_matches([' ', '\t', '\n', '\r']).len()
}

fn json(text: &str) -> Result<(), serde_json::Error> {
    serde_json::from_str::<IgnoredAny>(text).map(drop)
}

/// A payload template: JSON in which `{key}` (the record's key), `{number}` (the
/// record's number, from 1) and `{seq}` (the number of the record among its
/// key's, from 1) are filled in. Keys go round: `<prefix>0`,
/// `<prefix>1`, ... `<prefix><keys - 1>`, then `<prefix>0` again.
#[derive(Debug, Clone)]
pub struct Template {
    text: String,
    prefix: String,
    keys: u64,
}

impl Template {
    /// # Errors
    /// The template is not JSON once its placeholders are filled in.
    pub fn new(text: &str, prefix: &str, keys: u64) -> Result<Self, String> {
        let template = Self {
            text: text.to_string(),
            prefix: prefix.to_string(),
            keys: keys.max(1),
        };
        template.record(1)?;
        Ok(template)
    }

    /// The `n`-th record, from 1.
    ///
    /// # Errors
    /// The payload is not JSON (a key prefix with a quote in it, say).
    pub fn record(&self, n: u64) -> Result<OwnRecord, String> {
        let index = n.saturating_sub(1);
        let key = format!("{}{}", self.prefix, index % self.keys);
        let seq = index / self.keys + 1;
        let value = self
            .text
            .replace("{key}", &key)
            .replace("{number}", &n.to_string())
            .replace("{seq}", &seq.to_string());
        json(&value).map_err(|e| {
            format!("--payload is not JSON once {{key}}, {{number}} and {{seq}} are filled in ({value}): {e}")
        })?;
        Ok(OwnRecord { key, value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, value: &str) -> OwnRecord {
        OwnRecord {
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn a_line_is_a_json_object_or_key_tab_json_and_its_value_is_kept_as_written() {
        for (line, expected) in [
            (
                r#"{"key": "sensor-1", "value": {"celsius": 21.099999999999998, "b": 1, "a": 2}}"#,
                record(
                    "sensor-1",
                    r#"{"celsius": 21.099999999999998, "b": 1, "a": 2}"#,
                ),
            ),
            (
                " { \"value\" : [1, 2] ,\t\"key\":\"k\\u00e9\" }\r",
                record("ké", "[1, 2]"),
            ),
            (
                r#"{"key":"a","value":"{not an object}"}"#,
                record("a", r#""{not an object}""#),
            ),
            (
                "sensor-2\t{\"celsius\": 19.5}",
                record("sensor-2", "{\"celsius\": 19.5}"),
            ),
            ("{odd key}\t7\r", record("{odd key}", "7")),
        ] {
            assert_eq!(parse_line(line), Ok(expected), "{line:?}");
        }
    }

    #[test]
    fn a_line_that_is_no_record_says_what_is_wrong() {
        for (line, reason) in [
            (r#"{"key": "a"}"#, "no \"value\""),
            (r#"{"value": 1}"#, "no \"key\""),
            (r#"{"key": "", "value": 1}"#, "the key is empty"),
            (
                r#"{"key": 7, "value": 1}"#,
                "the key must be a JSON string, not 7",
            ),
            (r#"{"key": "a", "valeu": 1}"#, "unknown member \"valeu\""),
            (
                r#"{"key": "a", "value": 1, "key": "b"}"#,
                "\"key\" is given twice",
            ),
            (
                r#"{"key": "a", "value": {"x": }}"#,
                "not a JSON object: the value of \"value\"",
            ),
            (
                r#"{"key": "a", "value": 1} trailing"#,
                "text after the object",
            ),
            ("a\t{celsius: 1}", "the value (after the tab) is not JSON"),
            ("\t1", "the key (before the tab) is empty"),
            ("sensor-1 21.5", "not a record"),
        ] {
            let err = parse_line(line).expect_err(line);
            assert!(err.contains(reason), "{line:?}: {err}");
        }
    }

    #[test]
    fn a_records_file_names_the_line_that_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("readings.jsonl");
        std::fs::write(&path, "a\t1\n\n{\"key\":\"b\",\"value\":2}\nc 3\n").unwrap();
        let err = read_records(&path).unwrap_err();
        assert!(err.contains("readings.jsonl:4: not a record"), "{err}");
        std::fs::write(&path, "a\t1\n\n{\"key\":\"b\",\"value\":2}\n").unwrap();
        assert_eq!(
            read_records(&path).unwrap(),
            [record("a", "1"), record("b", "2")]
        );
        std::fs::write(&path, "\n\n").unwrap();
        assert!(read_records(&path).unwrap_err().contains("holds no record"));
        let missing = read_records(&dir.path().join("missing.jsonl")).unwrap_err();
        assert!(missing.starts_with("--records "), "{missing}");
    }

    #[test]
    fn a_template_fills_in_key_number_and_sequence_with_keys_going_round() {
        let template = Template::new(
            r#"{"sensor": "{key}", "n": {number}, "celsius": {seq}.5}"#,
            "s-",
            2,
        )
        .unwrap();
        let records: Vec<OwnRecord> = (1..=3).map(|n| template.record(n).unwrap()).collect();
        assert_eq!(
            records,
            [
                record("s-0", r#"{"sensor": "s-0", "n": 1, "celsius": 1.5}"#),
                record("s-1", r#"{"sensor": "s-1", "n": 2, "celsius": 1.5}"#),
                record("s-0", r#"{"sensor": "s-0", "n": 3, "celsius": 2.5}"#),
            ]
        );
        let err = Template::new(r#"{"celsius": {temp}}"#, "s-", 2).unwrap_err();
        assert!(err.starts_with("--payload is not JSON"), "{err}");
        let err = Template::new(r#"{"sensor": "{key}"}"#, "s\"", 2).unwrap_err();
        assert!(err.starts_with("--payload is not JSON"), "{err}");
    }
}
