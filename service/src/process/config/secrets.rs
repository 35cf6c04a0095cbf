//! `[kafka.client]`'s values, some of them secrets: a SASL password, a
//! key's passphrase. A value is written as it is, or read at startup from a
//! file or an environment variable, so that the config file (and whatever
//! shows it) holds no secret:
//!
//! ```toml
//! [kafka.client]
//! "sasl.password" = { file = "/run/secrets/kafka-password" }
//! "ssl.key.password" = { env = "KAFKA_KEY_PASSWORD" }
//! ```
//!
//! A secret never reaches a log line, an error or `/metrics`: the config's
//! `Debug` shows where a secret comes from, or `<redacted>`, and errors name
//! the property and the file or variable, never the value.

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// Where a `[kafka.client]` value comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum ClientValue {
    /// Written in the config.
    Text(String),
    /// Read at startup; `value` is what was read (`None` until then).
    Read {
        /// The file or variable.
        source: SecretSource,
        /// Its contents, once read.
        value: Option<String>,
    },
}

impl fmt::Debug for ClientValue {
    /// Without its key, a value cannot tell whether it is a secret: it is
    /// never shown here ([`ClientProperties`] shows those that are not).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientValue::Text(_) => f.write_str("Text(..)"),
            ClientValue::Read { source, .. } => write!(f, "Read(<from {source}>)"),
        }
    }
}

/// A file or an environment variable holding a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The file's contents, without a trailing line break.
    File(PathBuf),
    /// The variable's value.
    Env(String),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File(path) => write!(f, "the file {}", path.display()),
            SecretSource::Env(name) => write!(f, "the environment variable {name}"),
        }
    }
}

/// Properties whose value is a secret, by name: redacted wherever the
/// config is shown.
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password")
        || key.contains("secret")
        || key == "ssl.key.pem"
        || key == "sasl.oauthbearer.config"
        || key == "sasl.jaas.config"
}

/// `[kafka.client]`: librdkafka properties, passed through.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientProperties(pub BTreeMap<String, ClientValue>);

impl fmt::Debug for ClientProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (key, value) in &self.0 {
            match value {
                ClientValue::Text(_) if is_secret(key) => map.entry(key, &"<redacted>"),
                ClientValue::Text(text) => map.entry(key, text),
                ClientValue::Read { source, .. } => map.entry(key, &format!("<from {source}>")),
            };
        }
        map.finish()
    }
}

impl ClientProperties {
    /// Reads every value that comes from a file or a variable; `env` is the
    /// process's environment.
    ///
    /// # Errors
    /// The dotted field and why, naming the file or variable (never a
    /// value).
    pub fn read(&mut self, env: &BTreeMap<String, String>) -> Result<(), (String, String)> {
        for (key, value) in &mut self.0 {
            let ClientValue::Read { source, value } = value else {
                continue;
            };
            let field = format!("kafka.client.{key:?}");
            let read = match source {
                SecretSource::File(path) => std::fs::read_to_string(&*path)
                    .map_err(|e| {
                        (
                            field.clone(),
                            format!("cannot read {}: {e}", path.display()),
                        )
                    })?
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
                SecretSource::Env(name) => env.get(name).cloned().ok_or_else(|| {
                    (
                        field.clone(),
                        format!("the environment variable {name} is not set"),
                    )
                })?,
            };
            *value = Some(read);
        }
        Ok(())
    }

    /// The properties as librdkafka takes them; a value not read yet is
    /// left out.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.0
            .iter()
            .filter_map(|(key, value)| match value {
                ClientValue::Text(text) => Some((key.clone(), text.clone())),
                ClientValue::Read { value, .. } => value.clone().map(|v| (key.clone(), v)),
            })
            .collect()
    }

    /// The values of the secret properties, to scrub from what the brokers
    /// or librdkafka say before it is shown.
    pub fn secrets(&self) -> Vec<String> {
        self.0
            .iter()
            .filter_map(|(key, value)| match value {
                ClientValue::Text(text) if is_secret(key) => Some(text.clone()),
                ClientValue::Read { value, .. } => value.clone(),
                ClientValue::Text(_) => None,
            })
            .filter(|secret| !secret.is_empty())
            .collect()
    }
}

impl Serialize for ClientValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            ClientValue::Text(text) => serializer.serialize_str(text),
            ClientValue::Read { source, .. } => {
                let mut map = serializer.serialize_map(Some(1))?;
                match source {
                    SecretSource::File(path) => map.serialize_entry("file", path)?,
                    SecretSource::Env(name) => map.serialize_entry("env", name)?,
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for ClientValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

const EXPECTED: &str =
    "a string, or a table naming where to read it: { file = \"PATH\" } or { env = \"VARIABLE\" }";

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = ClientValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTED)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<ClientValue, E> {
        Ok(ClientValue::Text(text.to_string()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ClientValue, A::Error> {
        let mut source = None;
        while let Some(key) = map.next_key::<String>()? {
            let next = match key.as_str() {
                "file" => SecretSource::File(map.next_value()?),
                "env" => SecretSource::Env(map.next_value()?),
                other => {
                    return Err(de::Error::custom(format!(
                        "unknown key `{other}`: expected {EXPECTED}"
                    )))
                }
            };
            if source.replace(next).is_some() {
                return Err(de::Error::custom(format!(
                    "names two sources: expected {EXPECTED}"
                )));
            }
        }
        match source {
            Some(source) => Ok(ClientValue::Read {
                source,
                value: None,
            }),
            None => Err(de::Error::custom(format!(
                "is an empty table: expected {EXPECTED}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ClientProperties, String> {
        toml::from_str::<BTreeMap<String, ClientProperties>>(text)
            .map(|mut t| t.remove("client").unwrap_or_default())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_secret_is_read_from_a_file_or_a_variable_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, "from-the-file\n").unwrap();
        let text = format!(
            "[client]\n\"sasl.username\" = \"alice\"\n\"sasl.password\" = {{ file = {:?} }}\n\"ssl.key.password\" = {{ env = \"KEY_PW\" }}\n\"sasl.oauthbearer.client.secret\" = \"in-the-config\"\n",
            file.display().to_string()
        );
        let mut client = parse(&text).unwrap();
        let env = BTreeMap::from([("KEY_PW".to_string(), "from-the-env".to_string())]);
        client.read(&env).unwrap();
        let pairs: BTreeMap<String, String> = client.pairs().into_iter().collect();
        assert_eq!(pairs["sasl.password"], "from-the-file");
        assert_eq!(pairs["ssl.key.password"], "from-the-env");
        assert_eq!(pairs["sasl.username"], "alice");
        let shown = format!("{client:?}");
        for secret in ["from-the-file", "from-the-env", "in-the-config"] {
            assert!(!shown.contains(secret), "{shown}");
            assert!(client.secrets().contains(&secret.to_string()));
        }
        assert!(
            shown.contains("alice") && shown.contains("KEY_PW"),
            "{shown}"
        );
        // Written back, a secret is its source again.
        let written = toml::to_string(&BTreeMap::from([("client", &client)])).unwrap();
        assert!(
            !written.contains("from-the-file") && written.contains("KEY_PW"),
            "{written}"
        );
    }

    #[test]
    fn a_missing_source_is_named_without_a_value() {
        let mut client =
            parse("[client]\n\"sasl.password\" = { env = \"NOT_SET_ANYWHERE\" }\n").unwrap();
        let (field, reason) = client.read(&BTreeMap::new()).unwrap_err();
        assert_eq!(field, "kafka.client.\"sasl.password\"");
        assert!(reason.contains("NOT_SET_ANYWHERE is not set"), "{reason}");
        let mut client =
            parse("[client]\n\"sasl.password\" = { file = \"/nonexistent/pw\" }\n").unwrap();
        let (_, reason) = client.read(&BTreeMap::new()).unwrap_err();
        assert!(reason.contains("cannot read /nonexistent/pw"), "{reason}");
        for bad in [
            "[client]\n\"sasl.password\" = { path = \"x\" }\n",
            "[client]\n\"sasl.password\" = { file = \"x\", env = \"Y\" }\n",
            "[client]\n\"sasl.password\" = {}\n",
        ] {
            let error = parse(bad).unwrap_err();
            assert!(error.contains("{ file = \"PATH\" }"), "{error}");
        }
    }
}
