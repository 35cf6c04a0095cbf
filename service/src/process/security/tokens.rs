//! The client API's bearer tokens: a file of `NAME SCOPE TOKEN` lines,
//! read again when it changes (a token added or revoked needs no restart).
//!
//! A token is never logged, never put in an error, and compared in constant
//! time against every known one, so neither the logs nor the time an
//! answer takes tell a caller how close a guess was (a length that matches
//! none is told apart; tokens are at least 16 characters).

use super::SecurityError;
use crate::transport::tls::read_file;
use parking_lot::RwLock;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Shorter tokens are refused: they could be guessed.
pub const MIN_TOKEN_LENGTH: usize = 16;

/// What a token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every call of the client API.
    ReadWrite,
    /// Ask, shards and stats; no tell, no shutdown.
    ReadOnly,
}

/// One token of the file.
struct Token {
    name: String,
    scope: Scope,
    secret: Vec<u8>,
}

/// A client a token identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// The token's name in the file (safe to log).
    pub name: String,
    /// What it allows.
    pub scope: Scope,
}

/// The tokens file, as last loaded.
#[derive(Clone)]
pub struct TokenFile {
    path: PathBuf,
    current: Arc<RwLock<Arc<Loaded>>>,
}

struct Loaded {
    text: Vec<u8>,
    tokens: Vec<Token>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TokenFile {
    /// Reads the file at `path`.
    ///
    /// # Errors
    /// It cannot be read, or a line is not `NAME SCOPE TOKEN`.
    pub async fn load(path: &Path) -> Result<Self, SecurityError> {
        let text = read_file("api.tokens_file", path).await?;
        let tokens = parse(path, &text)?;
        Ok(Self {
            path: path.to_path_buf(),
            current: Arc::new(RwLock::new(Arc::new(Loaded { text, tokens }))),
        })
    }

    /// Reads the file again; uses it if it changed and parses. Returns
    /// whether the tokens in use changed.
    ///
    /// # Errors
    /// The changed file does not parse; the last good tokens stay in use.
    pub async fn reload(&self) -> Result<bool, SecurityError> {
        let text = read_file("api.tokens_file", &self.path).await?;
        if self.current.read().text == text {
            return Ok(false);
        }
        let tokens = parse(&self.path, &text)?;
        *self.current.write() = Arc::new(Loaded { text, tokens });
        Ok(true)
    }

    /// The client `presented` belongs to, if any. Every known token is
    /// compared, whichever matches.
    pub fn client(&self, presented: &[u8]) -> Option<Client> {
        let loaded = self.current.read().clone();
        let mut found = None;
        for token in &loaded.tokens {
            if bool::from(token.secret.as_slice().ct_eq(presented)) {
                found = Some(Client {
                    name: token.name.clone(),
                    scope: token.scope,
                });
            }
        }
        found
    }
}

/// The tokens of `text`; blank lines and lines starting with `#` are
/// skipped. An error names the line, never its token.
fn parse(path: &Path, text: &[u8]) -> Result<Vec<Token>, SecurityError> {
    let bad = |line: usize, reason: String| SecurityError::Tokens {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let text = std::str::from_utf8(text).map_err(|_| bad(0, "is not UTF-8 text".into()))?;
    let mut tokens: Vec<Token> = Vec::new();
    for (at, line) in text.lines().enumerate() {
        let number = at + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, scope, secret] = fields[..] else {
            return Err(bad(
                number,
                format!("has {} fields; expected NAME SCOPE TOKEN", fields.len()),
            ));
        };
        let scope = match scope {
            "read-write" => Scope::ReadWrite,
            "read-only" => Scope::ReadOnly,
            other => {
                return Err(bad(
                    number,
                    format!("scope `{other}` is neither read-write nor read-only"),
                ))
            }
        };
        if secret.len() < MIN_TOKEN_LENGTH {
            return Err(bad(
                number,
                format!("the token of `{name}` is shorter than {MIN_TOKEN_LENGTH} characters"),
            ));
        }
        if tokens.iter().any(|t| t.name == name) {
            return Err(bad(number, format!("names `{name}` a second time")));
        }
        if tokens.iter().any(|t| t.secret == secret.as_bytes()) {
            return Err(bad(
                number,
                format!("the token of `{name}` is already another name's"),
            ));
        }
        tokens.push(Token {
            name: name.to_string(),
            scope,
            secret: secret.as_bytes().to_vec(),
        });
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "s3cret-token-of-ops-0123";

    #[test]
    fn lines_name_a_scope_and_a_token() {
        let text =
            format!("# who\n\nops read-write {SECRET}\n  dash read-only 0123456789abcdef0123\n");
        let tokens = parse(Path::new("t"), text.as_bytes()).expect("parses");
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[0].scope, Scope::ReadWrite);
        assert_eq!(tokens[1].name, "dash");
        assert_eq!(tokens[1].scope, Scope::ReadOnly);
    }

    #[test]
    fn a_bad_line_is_named_without_its_token() {
        for (text, expected) in [
            (format!("ops {SECRET}"), "line 1: has 2 fields"),
            (format!("ops admin {SECRET}"), "scope `admin`"),
            ("ops read-write short-secret".to_string(), "shorter than 16"),
            (
                format!("ops read-write {SECRET}\nops read-only {SECRET}x"),
                "line 2: names `ops` a second time",
            ),
            (
                format!("ops read-write {SECRET}\nbot read-only {SECRET}"),
                "already another name's",
            ),
        ] {
            let error = match parse(Path::new("tokens"), text.as_bytes()) {
                Ok(_) => panic!("{text:?} parsed"),
                Err(e) => e.to_string(),
            };
            assert!(error.contains(expected), "{error}");
            assert!(!error.contains(SECRET), "{error}");
            assert!(!error.contains("short-secret"), "{error}");
        }
    }
}
