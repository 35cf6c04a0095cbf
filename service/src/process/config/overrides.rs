//! Overrides of single fields from the environment and from flags, applied
//! to the parsed file before it is deserialized, so that one deserializer
//! (with `deny_unknown_fields` and its path-naming errors) checks every
//! value whatever its source.

use super::error::{ConfigError, Origin};
use toml::{Table, Value};

/// Environment variables that set a field start with this, and name the
/// path with `__` between segments: `COLO_SHARDING__NUMBER_OF_SHARDS`.
pub(super) const ENV_PREFIX: &str = "COLO_";
const ENV_SEPARATOR: &str = "__";

/// One field set outside the file.
#[derive(Debug, Clone)]
pub(super) struct Override {
    pub path: Vec<String>,
    pub value: Value,
    pub origin: Origin,
}

impl Override {
    /// The path as the deserializer names fields: `sharding.number_of_shards`.
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }
}

/// The overrides among `env`, in name order so that the result does not
/// depend on the process's environment order. Variables without `__` are
/// not ours (or not meant as fields) and are skipped, so an unrelated
/// `COLO_SOMETHING` cannot stop a node from starting.
///
/// # Errors
/// A variable whose path has an empty segment.
pub(super) fn from_env(
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<Override>, ConfigError> {
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| {
            name.strip_prefix(ENV_PREFIX)
                .is_some_and(|rest| rest.contains(ENV_SEPARATOR))
        })
        .collect();
    vars.sort();
    vars.into_iter()
        .map(|(name, raw)| {
            let rest = name.strip_prefix(ENV_PREFIX).unwrap_or(&name);
            let path: Vec<String> = rest
                .split(ENV_SEPARATOR)
                .map(str::to_ascii_lowercase)
                .collect();
            let origin = Origin::Env(name.clone());
            check_path(&path, &origin)?;
            Ok(Override {
                path,
                value: parse_value(&raw),
                origin,
            })
        })
        .collect()
}

/// A `--set KEY=VALUE` flag.
///
/// # Errors
/// No `=`, or a key with an empty segment.
pub(super) fn from_set(arg: &str) -> Result<Override, ConfigError> {
    let origin = Origin::Set(arg.to_string());
    let Some((key, raw)) = arg.split_once('=') else {
        return Err(ConfigError::Syntax {
            origin,
            reason: "expected KEY=VALUE, e.g. sharding.number_of_shards=50".to_string(),
        });
    };
    let path: Vec<String> = key.trim().split('.').map(str::to_string).collect();
    check_path(&path, &origin)?;
    Ok(Override {
        path,
        value: parse_value(raw),
        origin,
    })
}

/// A convenience flag: always a string, never parsed as TOML, since every
/// such flag names an address.
pub(super) fn from_flag(flag: &'static str, path: &str, raw: &str) -> Override {
    Override {
        path: path.split('.').map(str::to_string).collect(),
        value: Value::String(raw.to_string()),
        origin: Origin::Flag(flag),
    }
}

fn check_path(path: &[String], origin: &Origin) -> Result<(), ConfigError> {
    if path.iter().any(|segment| segment.trim().is_empty()) {
        return Err(ConfigError::Syntax {
            origin: origin.clone(),
            reason: "the field path has an empty segment".to_string(),
        });
    }
    Ok(())
}

/// A value as TOML when it is one (`50`, `true`, `["counter"]`,
/// `"quoted"`), else the raw string (`127.0.0.1:7001`, `10s`, `info`).
/// Parsing it as the right side of a one-key document keeps TOML's own
/// grammar; a raw value that smuggles in a second key is a string.
pub(super) fn parse_value(raw: &str) -> Value {
    match format!("v = {raw}").parse::<Table>() {
        Ok(mut table) if table.len() == 1 => table
            .remove("v")
            .unwrap_or_else(|| Value::String(raw.to_string())),
        _ => Value::String(raw.to_string()),
    }
}

/// Sets the override's field, creating the tables on its way.
///
/// # Errors
/// A segment on the way that is a value, not a table.
pub(super) fn apply(table: &mut Table, over: &Override) -> Result<(), ConfigError> {
    let Some((last, parents)) = over.path.split_last() else {
        return Ok(());
    };
    let mut at = table;
    for (depth, segment) in parents.iter().enumerate() {
        let entry = at
            .entry(segment.clone())
            .or_insert_with(|| Value::Table(Table::new()));
        at = match entry {
            Value::Table(inner) => inner,
            _ => {
                return Err(ConfigError::Field {
                    field: over.path[..=depth].join("."),
                    reason: format!("is a value, so {} cannot be set", over.dotted()),
                    origin: Some(over.origin.clone()),
                })
            }
        };
    }
    at.insert(last.clone(), over.value.clone());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_toml_when_they_parse() {
        assert_eq!(parse_value("50"), Value::Integer(50));
        assert_eq!(parse_value("false"), Value::Boolean(false));
        assert_eq!(
            parse_value("[\"counter\"]"),
            Value::Array(vec![Value::String("counter".into())])
        );
        assert_eq!(parse_value("\"7\""), Value::String("7".into()));
        for raw in ["127.0.0.1:7001", "10s", "info,colo=debug", "1\nx = 2", ""] {
            assert_eq!(parse_value(raw), Value::String(raw.into()), "{raw:?}");
        }
    }

    #[test]
    fn env_names_map_to_lowercase_paths() {
        let env = [
            ("COLO_SHARDING__PASSIVATION__STRATEGY", "lru"),
            ("COLO_UNRELATED", "x"),
            ("PATH", "/bin"),
            ("COLO_NODE__LISTEN", "127.0.0.1:1"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let overrides = from_env(env).unwrap();
        let paths: Vec<_> = overrides.iter().map(Override::dotted).collect();
        assert_eq!(paths, ["node.listen", "sharding.passivation.strategy"]);
        let bad = from_env([("COLO_NODE____LISTEN".into(), "x".into())]).unwrap_err();
        assert!(bad.to_string().contains("COLO_NODE____LISTEN"), "{bad}");
    }

    #[test]
    fn set_needs_key_and_value_and_a_table_on_the_way() {
        assert!(from_set("node.listen").is_err());
        assert!(from_set("node..listen=x").is_err());
        let over = from_set("log.level=info,colo=debug").unwrap();
        assert_eq!(over.value, Value::String("info,colo=debug".into()));
        let mut table: Table = "[log]\nlevel = \"info\"".parse().unwrap();
        apply(&mut table, &over).unwrap();
        assert_eq!(table["log"]["level"].as_str(), Some("info,colo=debug"));
        let deeper = from_set("log.level.x=1").unwrap();
        let err = apply(&mut table, &deeper).unwrap_err();
        assert_eq!(err.field(), Some("log.level"));
    }
}
