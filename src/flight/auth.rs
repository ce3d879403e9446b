//! Who is calling: Basic credentials in the handshake are answered with a
//! bearer token, which later calls carry in their `authorization` header.
//! A token configured at start-up can be used directly. Without
//! credentials configured the server is anonymous, but a handshake still
//! hands out a token so that a client gets a session of its own.
//!
//! Secrets never appear in errors or logs: errors name the problem only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_flight::BasicAuth;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use prost::Message;
use tonic::Status;
use tonic::metadata::MetadataMap;

/// Credentials a server accepts.
#[derive(Clone, Default)]
pub struct Credentials {
    /// A user name and password for the Basic handshake.
    pub user: Option<(String, String)>,
    /// A bearer token accepted without a handshake.
    pub token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never prints the password or the token.
        f.debug_struct("Credentials")
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl Credentials {
    /// Whether any credential is configured (else the server is anonymous).
    pub fn required(&self) -> bool {
        self.user.is_some() || self.token.is_some()
    }

    /// Refuses credentials anyone could guess: an empty user name,
    /// password or token.
    pub fn validate(&self) -> Result<(), String> {
        if let Some((user, password)) = &self.user {
            if user.is_empty() {
                return Err("the user name is empty".into());
            }
            if password.is_empty() {
                return Err(format!("the password of user {user} is empty"));
            }
        }
        if self.token.as_ref().is_some_and(String::is_empty) {
            return Err("the bearer token is empty".into());
        }
        Ok(())
    }
}

/// The caller of one request: prepared statements and tickets belong to
/// the session that made them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    /// No token (anonymous servers only).
    Anonymous,
    /// The session named by a bearer token.
    Session(String),
}

/// Checks credentials and remembers the tokens handed out.
#[derive(Clone)]
pub struct Authenticator {
    credentials: Credentials,
    /// Tokens handed out, with when they were last used.
    issued: Arc<Mutex<HashMap<String, Instant>>>,
}

/// A token unused this long is forgotten (the client handshakes again).
const TOKEN_IDLE: Duration = Duration::from_secs(24 * 3600);
/// At most this many live tokens; the least recently used go first.
const MAX_TOKENS: usize = 100_000;

impl Authenticator {
    /// An authenticator for `credentials`.
    pub fn new(credentials: Credentials) -> Self {
        Authenticator {
            credentials,
            issued: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Whether calls must carry credentials.
    pub fn required(&self) -> bool {
        self.credentials.required()
    }

    /// The handshake: Basic credentials (in the `authorization` header or
    /// the handshake payload) or a valid bearer token are answered with a
    /// bearer token. On an anonymous server any handshake gets a token.
    pub fn handshake(&self, metadata: &MetadataMap, payload: &[u8]) -> Result<String, Status> {
        match authorization(metadata)? {
            Some(Authorization::Bearer(token)) => {
                if self.token_valid(&token) || !self.required() {
                    self.remember(&token);
                    return Ok(token);
                }
                Err(Status::unauthenticated("the bearer token is not valid"))
            }
            Some(Authorization::Basic(user, password)) => self.login(&user, &password),
            None => {
                if let Ok(auth) = BasicAuth::decode(payload)
                    && !auth.username.is_empty()
                {
                    return self.login(&auth.username, &auth.password);
                }
                if self.required() {
                    return Err(Status::unauthenticated(
                        "credentials required: send Basic user:password in the handshake",
                    ));
                }
                self.issue()
            }
        }
    }

    fn login(&self, user: &str, password: &str) -> Result<String, Status> {
        match &self.credentials.user {
            Some((u, p)) if constant_eq(u, user) && constant_eq(p, password) => self.issue(),
            Some(_) => Err(Status::unauthenticated(format!(
                "wrong user name or password for user {user:?}"
            ))),
            None if !self.required() => self.issue(),
            None => Err(Status::unauthenticated(
                "this server accepts a bearer token, not a user name and password",
            )),
        }
    }

    /// Who sent a request; UNAUTHENTICATED when credentials are required
    /// and missing or wrong.
    pub fn caller(&self, metadata: &MetadataMap) -> Result<Caller, Status> {
        match authorization(metadata)? {
            Some(Authorization::Bearer(token)) => {
                if self.token_valid(&token) {
                    Ok(Caller::Session(token))
                } else if self.required() {
                    Err(Status::unauthenticated(
                        "the bearer token is not valid; handshake again",
                    ))
                } else {
                    Ok(Caller::Anonymous)
                }
            }
            Some(Authorization::Basic(user, password)) => {
                // Some clients send Basic on every call.
                let token = self.login(&user, &password)?;
                Ok(Caller::Session(token))
            }
            None if self.required() => Err(Status::unauthenticated(
                "credentials required: handshake with a user name and password, or send a bearer token",
            )),
            None => Ok(Caller::Anonymous),
        }
    }

    fn token_valid(&self, token: &str) -> bool {
        if let Some(configured) = &self.credentials.token
            && constant_eq(configured, token)
        {
            return true;
        }
        let Ok(mut issued) = self.issued.lock() else {
            return false;
        };
        let now = Instant::now();
        match issued.get_mut(token) {
            Some(used) if now.duration_since(*used) < TOKEN_IDLE => {
                *used = now;
                true
            }
            Some(_) => {
                issued.remove(token);
                false
            }
            None => false,
        }
    }

    fn remember(&self, token: &str) {
        let Ok(mut issued) = self.issued.lock() else {
            return;
        };
        let now = Instant::now();
        if issued.len() >= MAX_TOKENS {
            issued.retain(|_, used| now.duration_since(*used) < TOKEN_IDLE);
        }
        if issued.len() >= MAX_TOKENS
            && let Some(oldest) = issued
                .iter()
                .min_by_key(|(_, used)| **used)
                .map(|(t, _)| t.clone())
        {
            issued.remove(&oldest);
        }
        issued.insert(token.to_string(), now);
    }

    fn issue(&self) -> Result<String, Status> {
        let token = random_hex()?;
        self.remember(&token);
        Ok(token)
    }
}

enum Authorization {
    Basic(String, String),
    Bearer(String),
}

fn authorization(metadata: &MetadataMap) -> Result<Option<Authorization>, Status> {
    let Some(value) = metadata.get("authorization") else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| Status::unauthenticated("the authorization header is not ASCII"))?;
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Ok(Some(Authorization::Bearer(rest.to_string())));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        // Clients differ in padding and alphabet; accept all four.
        let decoded = [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
            .iter()
            .find_map(|engine| engine.decode(rest).ok())
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| {
                Status::unauthenticated("the Basic credentials are not base64 of user:password")
            })?;
        let (user, password) = decoded.split_once(':').ok_or_else(|| {
            Status::unauthenticated("the Basic credentials are not base64 of user:password")
        })?;
        return Ok(Some(Authorization::Basic(
            user.to_string(),
            password.to_string(),
        )));
    }
    Err(Status::unauthenticated(format!(
        "authorization scheme {scheme:?} is not supported (use Basic or Bearer)"
    )))
}

/// Compares secrets without stopping at the first difference.
fn constant_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// 128 random bits as hex: tokens and statement handles. Without the
/// OS's randomness there is nothing unguessable to hand out, so the call
/// fails rather than fall back to something predictable.
pub fn random_hex() -> Result<String, Status> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| Status::unavailable(format!("no randomness for a token or handle: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(header: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", header.parse().unwrap_or_else(|_| panic!()));
        m
    }

    fn basic(user: &str, password: &str) -> MetadataMap {
        with(&format!(
            "Basic {}",
            STANDARD.encode(format!("{user}:{password}"))
        ))
    }

    #[test]
    fn basic_login_hands_out_a_token_that_later_calls_use() {
        let auth = Authenticator::new(Credentials {
            user: Some(("ana".into(), "s3cret".into())),
            token: None,
        });
        let token = auth
            .handshake(&basic("ana", "s3cret"), &[])
            .unwrap_or_default();
        assert_eq!(token.len(), 32);
        let caller = auth.caller(&with(&format!("Bearer {token}")));
        assert_eq!(caller.ok(), Some(Caller::Session(token)));
        let wrong = auth.handshake(&basic("ana", "nope"), &[]).err();
        assert_eq!(
            wrong.as_ref().map(Status::code),
            Some(tonic::Code::Unauthenticated)
        );
        assert!(
            !wrong
                .map(|s| s.message().to_string())
                .unwrap_or_default()
                .contains("nope")
        );
        let missing = auth.caller(&MetadataMap::new()).err().map(|s| s.code());
        assert_eq!(missing, Some(tonic::Code::Unauthenticated));
        let forged = auth.caller(&with("Bearer 0123")).err().map(|s| s.code());
        assert_eq!(forged, Some(tonic::Code::Unauthenticated));
    }

    #[test]
    fn configured_token_works_without_a_handshake() {
        let auth = Authenticator::new(Credentials {
            user: None,
            token: Some("tok".into()),
        });
        assert_eq!(
            auth.caller(&with("Bearer tok")).ok(),
            Some(Caller::Session("tok".into()))
        );
        assert!(auth.caller(&with("Bearer tokk")).is_err());
        assert!(auth.caller(&with("Digest x")).is_err());
        assert!(auth.caller(&with("Basic !!!")).is_err());
        // Unpadded base64, as some clients send it.
        let auth = Authenticator::new(Credentials {
            user: Some(("ana".into(), "pw1".into())),
            token: None,
        });
        assert!(auth.handshake(&with("Basic YW5hOnB3MQ"), &[]).is_ok());
    }

    #[test]
    fn anonymous_servers_still_give_sessions() {
        let auth = Authenticator::new(Credentials::default());
        assert_eq!(
            auth.caller(&MetadataMap::new()).ok(),
            Some(Caller::Anonymous)
        );
        let token = auth.handshake(&MetadataMap::new(), &[]).unwrap_or_default();
        assert_eq!(
            auth.caller(&with(&format!("Bearer {token}"))).ok(),
            Some(Caller::Session(token))
        );
        assert_ne!(random_hex().ok(), random_hex().ok());
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(constant_eq("abc", "abc"));
        assert!(!constant_eq("abc", "abd"));
        assert!(!constant_eq("abc", "abcd"));
        assert!(!constant_eq("", "a"));
    }
}
