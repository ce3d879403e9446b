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

use crate::sql::Role;

/// Credentials a server accepts, each with the role its holder has.
#[derive(Clone, Default)]
pub struct Credentials {
    /// A user name and password for the Basic handshake: an admin.
    pub user: Option<(String, String)>,
    /// A bearer token accepted without a handshake: an admin.
    pub token: Option<String>,
    /// More users, each with its role (a users file, `--users`).
    pub users: Vec<UserEntry>,
    /// More bearer tokens, each named and with its role.
    pub tokens: Vec<TokenEntry>,
}

/// A user of a users file.
#[derive(Clone)]
pub struct UserEntry {
    /// The user name.
    pub name: String,
    /// The password.
    pub password: String,
    /// What the user may do.
    pub role: Role,
}

/// A bearer token of a users file, named for errors and `SHOW QUERIES`.
#[derive(Clone)]
pub struct TokenEntry {
    /// Who holds the token.
    pub name: String,
    /// The token.
    pub token: String,
    /// What its holder may do.
    pub role: Role,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never prints a password or a token.
        let users: Vec<String> = self
            .users
            .iter()
            .map(|u| format!("{} ({})", u.name, u.role))
            .collect();
        let tokens: Vec<String> = self
            .tokens
            .iter()
            .map(|t| format!("{} ({})", t.name, t.role))
            .collect();
        f.debug_struct("Credentials")
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("users", &users)
            .field("tokens", &tokens)
            .finish()
    }
}

/// Who a caller is: a name and a role.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    /// The user's name (`anonymous` on a server without credentials).
    pub name: String,
    /// What the user may do.
    pub role: Role,
}

impl Credentials {
    /// Whether any credential is configured (else the server is anonymous).
    pub fn required(&self) -> bool {
        self.user.is_some()
            || self.token.is_some()
            || !self.users.is_empty()
            || !self.tokens.is_empty()
    }

    /// Refuses credentials anyone could guess (an empty user name,
    /// password or token) and names given twice.
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
        let mut names: Vec<&str> = self.user.iter().map(|(u, _)| u.as_str()).collect();
        for u in &self.users {
            if u.password.is_empty() {
                return Err(format!("the password of user {} is empty", u.name));
            }
            names.push(&u.name);
        }
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("user {} is configured twice", w[0]));
        }
        if self.tokens.iter().any(|t| t.token.is_empty()) {
            return Err("a bearer token of the users file is empty".into());
        }
        Ok(())
    }

    /// Reads a users file: one credential per line, `#` comments,
    /// `user NAME ROLE PASSWORD` or `token NAME ROLE TOKEN`, where ROLE
    /// is reader, user or admin and the secret is the rest of the line.
    pub fn read_users_file(&mut self, path: &std::path::Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading the users file {}: {e}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = || format!("line {} of the users file {}", n + 1, path.display());
            let mut words = line
                .splitn(4, char::is_whitespace)
                .filter(|w| !w.is_empty());
            let (Some(kind), Some(name), Some(role)) = (words.next(), words.next(), words.next())
            else {
                return Err(format!(
                    "{}: expected `user NAME ROLE PASSWORD` or `token NAME ROLE TOKEN`",
                    at()
                ));
            };
            let role: Role = role.parse().map_err(|e| format!("{}: {e}", at()))?;
            let secret = line
                .splitn(4, char::is_whitespace)
                .nth(3)
                .map(str::trim)
                .unwrap_or_default()
                .to_string();
            if secret.is_empty() {
                return Err(format!("{}: {kind} {name} has no secret", at()));
            }
            match kind {
                "user" => self.users.push(UserEntry {
                    name: name.to_string(),
                    password: secret,
                    role,
                }),
                "token" => self.tokens.push(TokenEntry {
                    name: name.to_string(),
                    token: secret,
                    role,
                }),
                other => {
                    return Err(format!("{}: {other:?} is neither user nor token", at()));
                }
            }
        }
        Ok(())
    }

    /// The holder of a configured token.
    fn token_holder(&self, token: &str) -> Option<Principal> {
        if let Some(configured) = &self.token
            && constant_eq(configured, token)
        {
            return Some(Principal {
                name: "token".into(),
                role: Role::Admin,
            });
        }
        self.tokens
            .iter()
            .find(|t| constant_eq(&t.token, token))
            .map(|t| Principal {
                name: t.name.clone(),
                role: t.role,
            })
    }

    /// The user a name and password are, if they match.
    fn user_of(&self, user: &str, password: &str) -> Option<Principal> {
        let admin = self.user.iter().map(|(u, p)| (u, p, Role::Admin));
        let others = self.users.iter().map(|u| (&u.name, &u.password, u.role));
        let mut found = None;
        // Every entry compared, so timing tells nothing of which matched.
        for (u, p, role) in admin.chain(others) {
            if constant_eq(u, user) & constant_eq(p, password) {
                found = Some(Principal {
                    name: u.clone(),
                    role,
                });
            }
        }
        found
    }

    fn has_users(&self) -> bool {
        self.user.is_some() || !self.users.is_empty()
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

/// The principal of an anonymous server's callers.
pub fn anonymous() -> Principal {
    Principal {
        name: "anonymous".into(),
        role: Role::Admin,
    }
}

/// Checks credentials and remembers the tokens handed out.
#[derive(Clone)]
pub struct Authenticator {
    credentials: Credentials,
    /// Tokens handed out: whose, and when they were last used.
    issued: Arc<Mutex<HashMap<String, (Instant, Principal)>>>,
}

/// A token unused this long is forgotten (the client handshakes again).
pub const TOKEN_IDLE: Duration = Duration::from_secs(24 * 3600);
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
                if let Some(principal) = self.token_principal(&token) {
                    self.remember(&token, principal);
                    return Ok(token);
                }
                if !self.required() {
                    self.remember(&token, anonymous());
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
                self.issue(anonymous())
            }
        }
    }

    fn login(&self, user: &str, password: &str) -> Result<String, Status> {
        if let Some(principal) = self.credentials.user_of(user, password) {
            return self.issue(principal);
        }
        if !self.required() {
            return self.issue(anonymous());
        }
        if self.credentials.has_users() {
            return Err(Status::unauthenticated(format!(
                "wrong user name or password for user {user:?}"
            )));
        }
        Err(Status::unauthenticated(
            "this server accepts a bearer token, not a user name and password",
        ))
    }

    /// Who sent a request; UNAUTHENTICATED when credentials are required
    /// and missing or wrong.
    pub fn caller(&self, metadata: &MetadataMap) -> Result<(Caller, Principal), Status> {
        match authorization(metadata)? {
            Some(Authorization::Bearer(token)) => match self.token_principal(&token) {
                Some(principal) => Ok((Caller::Session(token), principal)),
                None if self.required() => Err(Status::unauthenticated(
                    "the bearer token is not valid (or its session ended); handshake again",
                )),
                None => Ok((Caller::Anonymous, anonymous())),
            },
            Some(Authorization::Basic(user, password)) => {
                // Some clients send Basic on every call.
                let token = self.login(&user, &password)?;
                let principal = self
                    .token_principal(&token)
                    .ok_or_else(|| Status::internal("a token just issued is not known"))?;
                Ok((Caller::Session(token), principal))
            }
            None if self.required() => Err(Status::unauthenticated(
                "credentials required: handshake with a user name and password, or send a bearer token",
            )),
            None => Ok((Caller::Anonymous, anonymous())),
        }
    }

    /// Ends the session of a token handed out (a client's CloseSession):
    /// the token is no longer valid. Configured tokens stay valid.
    pub fn forget(&self, token: &str) {
        if let Ok(mut issued) = self.issued.lock() {
            issued.remove(token);
        }
    }

    /// Whether a token is still valid (handed out and not idle too long,
    /// or configured).
    pub fn is_live(&self, token: &str) -> bool {
        if self.credentials.token_holder(token).is_some() {
            return true;
        }
        let Ok(issued) = self.issued.lock() else {
            return false;
        };
        issued
            .get(token)
            .is_some_and(|(used, _)| used.elapsed() < TOKEN_IDLE)
    }

    /// The holder of a valid token, marking it used.
    fn token_principal(&self, token: &str) -> Option<Principal> {
        if let Some(principal) = self.credentials.token_holder(token) {
            return Some(principal);
        }
        let mut issued = self.issued.lock().ok()?;
        let now = Instant::now();
        match issued.get_mut(token) {
            Some((used, principal)) if now.duration_since(*used) < TOKEN_IDLE => {
                *used = now;
                Some(principal.clone())
            }
            Some(_) => {
                issued.remove(token);
                None
            }
            None => None,
        }
    }

    fn remember(&self, token: &str, principal: Principal) {
        let Ok(mut issued) = self.issued.lock() else {
            return;
        };
        let now = Instant::now();
        if issued.len() >= MAX_TOKENS {
            issued.retain(|_, (used, _)| now.duration_since(*used) < TOKEN_IDLE);
        }
        if issued.len() >= MAX_TOKENS
            && let Some(oldest) = issued
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(t, _)| t.clone())
        {
            issued.remove(&oldest);
        }
        issued.insert(token.to_string(), (now, principal));
    }

    fn issue(&self, principal: Principal) -> Result<String, Status> {
        let token = random_hex()?;
        self.remember(&token, principal);
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
            ..Credentials::default()
        });
        let token = auth
            .handshake(&basic("ana", "s3cret"), &[])
            .unwrap_or_default();
        assert_eq!(token.len(), 32);
        let caller = auth.caller(&with(&format!("Bearer {token}")));
        assert_eq!(
            caller.ok(),
            Some((
                Caller::Session(token),
                Principal {
                    name: "ana".into(),
                    role: Role::Admin
                }
            ))
        );
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
            token: Some("tok".into()),
            ..Credentials::default()
        });
        assert_eq!(
            auth.caller(&with("Bearer tok")).ok().map(|(c, _)| c),
            Some(Caller::Session("tok".into()))
        );
        assert!(auth.caller(&with("Bearer tokk")).is_err());
        assert!(auth.caller(&with("Digest x")).is_err());
        assert!(auth.caller(&with("Basic !!!")).is_err());
        // Unpadded base64, as some clients send it.
        let auth = Authenticator::new(Credentials {
            user: Some(("ana".into(), "pw1".into())),
            ..Credentials::default()
        });
        assert!(auth.handshake(&with("Basic YW5hOnB3MQ"), &[]).is_ok());
    }

    #[test]
    fn anonymous_servers_still_give_sessions() {
        let auth = Authenticator::new(Credentials::default());
        assert_eq!(
            auth.caller(&MetadataMap::new()).ok(),
            Some((Caller::Anonymous, anonymous()))
        );
        let token = auth.handshake(&MetadataMap::new(), &[]).unwrap_or_default();
        assert_eq!(
            auth.caller(&with(&format!("Bearer {token}"))).ok(),
            Some((Caller::Session(token), anonymous()))
        );
        assert_ne!(random_hex().ok(), random_hex().ok());
    }

    #[test]
    fn users_file_gives_each_user_and_token_a_role() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("users");
        std::fs::write(
            &path,
            "# who may do what\nuser ana admin pass word\nuser bob reader hunter2\n\ntoken etl user t0k3n\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut credentials = Credentials::default();
        credentials
            .read_users_file(&path)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(credentials.validate().is_ok());
        let auth = Authenticator::new(credentials);
        let token = auth
            .handshake(&basic("bob", "hunter2"), &[])
            .unwrap_or_default();
        let bob = auth.caller(&with(&format!("Bearer {token}"))).ok();
        assert_eq!(bob.map(|(_, p)| p.role), Some(Role::Reader));
        // The secret is the rest of the line, spaces included.
        assert!(auth.handshake(&basic("ana", "pass word"), &[]).is_ok());
        assert!(auth.handshake(&basic("ana", "pass"), &[]).is_err());
        let etl = auth.caller(&with("Bearer t0k3n")).ok().map(|(_, p)| p);
        assert_eq!(
            etl,
            Some(Principal {
                name: "etl".into(),
                role: Role::User
            })
        );
        // A closed session's token is no longer valid.
        auth.forget(&token);
        assert!(auth.caller(&with(&format!("Bearer {token}"))).is_err());

        for (text, expected) in [
            ("user ana root pw\n", "not one of reader"),
            ("user ana admin\n", "has no secret"),
            ("user ana\n", "expected `user NAME ROLE PASSWORD`"),
            ("group x admin pw\n", "neither user nor token"),
        ] {
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
            let e = Credentials::default()
                .read_users_file(&path)
                .err()
                .unwrap_or_default();
            assert!(e.contains(expected) && e.contains("line 1"), "{e}");
        }
        std::fs::write(&path, "user a admin x\nuser a reader y\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut twice = Credentials::default();
        assert!(twice.read_users_file(&path).is_ok());
        assert!(twice.validate().is_err_and(|e| e.contains("twice")));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(constant_eq("abc", "abc"));
        assert!(!constant_eq("abc", "abd"));
        assert!(!constant_eq("abc", "abcd"));
        assert!(!constant_eq("", "a"));
    }
}
