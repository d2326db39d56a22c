//! Access tokens: who may do what to which names.
//!
//! A tokens file (TOML) lists bearer tokens, each scoped to name prefixes
//! and to operations:
//!
//! ```toml
//! [[token]]
//! name = "payments"                  # shown in logs, never the secret
//! secret = "a-long-random-string"    # at least 16 characters
//! prefixes = ["payments-", "orders"] # names it may touch; "" is every name
//! operations = ["ids", "locks", "once", "read"]
//! ```
//!
//! Without a file every caller may do everything, and the server binds
//! loopback only ([`ServeConfig::check`](crate::ServeConfig::check)).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use crate::config::ServeError;
use crate::error::{ApiError, Kind};
use crate::Service;

/// What a token may be allowed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Read stored state: a sequence, a lock's holder and queue, a leader,
    /// a fenced value, an idempotency record.
    Read,
    /// Take ids: next, batches, blocks, the Leaf and Tinyid routes.
    Ids,
    /// Sessions and the lock family (locks, semaphores, RW locks,
    /// elections), and fenced writes.
    Locks,
    /// Claim, complete and fail idempotency keys.
    Once,
    /// Operators' calls: forgetting an idempotency key, `/metrics`.
    Admin,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Ids => "ids",
            Operation::Locks => "locks",
            Operation::Once => "once",
            Operation::Admin => "admin",
        }
    }
}

/// Shortest secret accepted: a guessable token is no access control.
pub const MIN_SECRET_LEN: usize = 16;

/// One token's scope, as the file gives it (the secret only as its hash).
#[derive(Debug)]
struct Scope {
    name: String,
    prefixes: Vec<String>,
    operations: Vec<Operation>,
}

/// The tokens an instance accepts, read from a tokens file.
///
/// ```
/// use bakery_serve::{Operation, Tokens};
///
/// let tokens = Tokens::parse(r#"
///     [[token]]
///     name = "payments"
///     secret = "correct-horse-battery-staple"
///     prefixes = ["payments-"]
///     operations = ["ids", "read"]
/// "#).unwrap();
/// let caller = tokens.caller("correct-horse-battery-staple").unwrap();
/// assert!(caller.allow(Operation::Ids, "payments-eu").is_ok());
/// assert!(caller.allow(Operation::Ids, "orders").is_err());
/// assert!(caller.allow(Operation::Locks, "payments-eu").is_err());
/// assert!(tokens.caller("guess").is_none());
/// ```
#[derive(Debug, Default)]
pub struct Tokens {
    /// By the SHA-256 of the secret: the lookup never compares secrets
    /// byte by byte, so its timing tells nothing about them.
    by_hash: HashMap<[u8; 32], Arc<Scope>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    token: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    secret: String,
    prefixes: Vec<String>,
    operations: Vec<Operation>,
}

impl Tokens {
    /// Read and check a tokens file.
    pub fn load(path: &Path) -> Result<Tokens, ServeError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ServeError::Config(format!(
                "cannot read the tokens file {}: {e}",
                path.display()
            ))
        })?;
        Tokens::parse(&text)
            .map_err(|e| ServeError::Config(format!("the tokens file {}: {e}", path.display())))
    }

    /// Parse and check a tokens file's text: every token named, with a
    /// secret of at least [`MIN_SECRET_LEN`] characters used once, at least
    /// one prefix and one operation.
    pub fn parse(text: &str) -> Result<Tokens, ServeError> {
        let file: File = toml::from_str(text).map_err(|e| ServeError::Config(e.to_string()))?;
        if file.token.is_empty() {
            return Err(ServeError::Config(
                "no [[token]] entries: a tokens file that admits nobody is a mistake".into(),
            ));
        }
        let mut tokens = Tokens::default();
        for entry in file.token {
            let refuse = |why: &str| ServeError::Config(format!("token {:?}: {why}", entry.name));
            if entry.secret.chars().count() < MIN_SECRET_LEN {
                return Err(refuse(&format!(
                    "the secret must be at least {MIN_SECRET_LEN} characters"
                )));
            }
            if entry.prefixes.is_empty() {
                return Err(refuse("no prefixes: give \"\" for every name"));
            }
            if entry.operations.is_empty() {
                return Err(refuse("no operations"));
            }
            let scope = Arc::new(Scope {
                name: entry.name.clone(),
                prefixes: entry.prefixes,
                operations: entry.operations,
            });
            if tokens.by_hash.insert(hash(&entry.secret), scope).is_some() {
                return Err(refuse("its secret is another token's too"));
            }
        }
        Ok(tokens)
    }

    /// The caller holding `secret`, if it is one of these tokens.
    pub fn caller(&self, secret: &str) -> Option<Caller> {
        self.by_hash.get(&hash(secret)).map(|scope| Caller {
            scope: Some(scope.clone()),
        })
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Who is calling: a token's scope, or anyone when the instance has no
/// tokens file. Extracted from `Authorization: Bearer TOKEN`.
#[derive(Debug, Clone)]
pub struct Caller {
    /// `None`: no tokens file, everything allowed.
    scope: Option<Arc<Scope>>,
}

impl Caller {
    /// The caller of an instance without tokens: allowed everything.
    pub fn anyone() -> Caller {
        Caller { scope: None }
    }

    /// The token's name (`None` without a tokens file).
    pub fn name(&self) -> Option<&str> {
        self.scope.as_deref().map(|scope| scope.name.as_str())
    }

    /// May this caller do `operation` to some name?
    pub fn may(&self, operation: Operation) -> bool {
        self.scope
            .as_ref()
            .is_none_or(|scope| scope.operations.contains(&operation))
    }

    /// May this caller do `operation` to `name`? A 403 naming both if not.
    pub fn allow(&self, operation: Operation, name: &str) -> Result<(), ApiError> {
        let Some(scope) = &self.scope else {
            return Ok(());
        };
        if !scope.operations.contains(&operation) {
            return Err(ApiError::new(
                Kind::Forbidden,
                format!(
                    "token {:?} may not do {:?} operations",
                    scope.name,
                    operation.as_str()
                ),
            ));
        }
        if !scope.prefixes.iter().any(|prefix| name.starts_with(prefix)) {
            return Err(ApiError::new(
                Kind::Forbidden,
                format!(
                    "token {:?} may not touch {name:?}: its names start with {:?}",
                    scope.name, scope.prefixes
                ),
            ));
        }
        Ok(())
    }

    /// May this caller use a session opened by `opener` (a token name)?
    pub(crate) fn same_as(&self, opener: Option<&str>) -> bool {
        self.name() == opener
    }
}

/// The caller named by `headers`, or 401.
pub(crate) fn caller_of(tokens: Option<&Tokens>, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let Some(tokens) = tokens else {
        return Ok(Caller::anyone());
    };
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| unauthorized("no access token: send `Authorization: Bearer TOKEN`"))?;
    let secret = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| unauthorized("the Authorization header must be `Bearer TOKEN`"))?;
    tokens
        .caller(secret.trim())
        .ok_or_else(|| unauthorized("unknown access token"))
}

/// The caller of a Tinyid route, whose token is a query parameter.
pub(crate) fn tinyid_caller(
    tokens: Option<&Tokens>,
    token: Option<&str>,
) -> Result<Caller, ApiError> {
    let Some(tokens) = tokens else {
        return Ok(Caller::anyone());
    };
    let token = token.ok_or_else(|| unauthorized("no token parameter"))?;
    tokens
        .caller(token)
        .ok_or_else(|| unauthorized("token is error"))
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(Kind::Unauthorized, message)
}

impl FromRequestParts<Service> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, service: &Service) -> Result<Caller, ApiError> {
        caller_of(service.tokens(), &parts.headers)
    }
}
