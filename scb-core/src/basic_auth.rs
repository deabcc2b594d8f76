//! HTTP Basic authentication (RFC 7617) against an htpasswd file of bcrypt or argon2
//! hashes: `401 Unauthorized` with `WWW-Authenticate` for everyone else.
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::basic_auth::{BasicAuthLayer, Users};
//! use scb_core::respond::Respond;
//! use scb_core::Body;
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // `htpasswd -nbB alice secret`
//! let users = Users::from_htpasswd(
//!     "alice:$2y$05$nXMy9CsiUcK80SKxTzf1lOpjMzh/YWobvCsix2IcmKiJrS.GTdaR2\n",
//! )
//! .unwrap();
//! let admin = BasicAuthLayer::new(users, "admin").unwrap().layer(Respond::new(StatusCode::OK));
//!
//! let anonymous = Request::get("/admin/").body(Body::empty()).unwrap();
//! let res = admin.clone().oneshot(anonymous).await.unwrap();
//! assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
//! assert_eq!(res.headers()["www-authenticate"], r#"Basic realm="admin", charset="UTF-8""#);
//!
//! let alice = Request::get("/admin/")
//!     .header("authorization", "Basic YWxpY2U6c2VjcmV0") // alice:secret
//!     .body(Body::empty())
//!     .unwrap();
//! assert_eq!(admin.oneshot(alice).await.unwrap().status(), StatusCode::OK);
//! # }
//! ```
//!
//! # Hashes
//!
//! Only slow password hashes are accepted: bcrypt (`$2y$`, `$2b$`, `$2a$`: what
//! `htpasswd -B` writes), checked by the `bcrypt` crate, and argon2 PHC strings
//! (`$argon2id$...`), checked by RustCrypto's `argon2`. A file with plain-text, `{SHA}`,
//! MD5 (`$apr1$`) or `crypt` lines is refused when it is read, naming the line: those
//! hashes are cheap to reverse, and a server that accepted them would be the weak point.
//! Both crates compare the computed hash in constant time. An unknown user's password is
//! checked against another user's hash, so the answer takes as long as for a known one
//! and does not tell which names exist.
//!
//! # Cost
//!
//! A slow hash is slow on purpose (a few milliseconds at `htpasswd -B`'s cost 5, a
//! quarter of a second at cost 12): far too long for a worker's event loop, which every
//! other connection of the worker waits on. So a check runs on tokio's blocking pool, and
//! at most [`max_checking`](BasicAuthLayer::max_checking) at once across workers; beyond
//! that a request gets `503` with `Retry-After: 1` rather than a queue a flood of wrong
//! passwords could fill. Credentials that passed are remembered: a digest (BLAKE2b of a
//! per-process random salt and the `Authorization` value; never the password) in a table
//! of at most [`cache_size`](BasicAuthLayer::cache_size) entries, so a client's later
//! requests cost a hash of a few dozen bytes and a lookup, with no hop. The table goes
//! with the layer: a config reload reads the file again and starts it empty, so a removed
//! user or a changed password takes effect at once.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use argon2::password_hash::PasswordVerifier as _;
use base64::Engine as _;
use blake2::{Blake2b256, Digest as _};
use http::header::{AUTHORIZATION, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tokio::task::JoinHandle;
use tower::{Layer, Service};

use crate::Body;

/// The users of an htpasswd file: `name:hash` lines.
#[derive(Clone)]
pub struct Users {
    hashes: HashMap<Box<str>, PasswordHash>,
    /// The hash an unknown user's password is checked against (the first user's).
    decoy: PasswordHash,
}

impl fmt::Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names only: the hashes stay out of logs.
        let mut names: Vec<&str> = self.hashes.keys().map(|k| &**k).collect();
        names.sort_unstable();
        f.debug_struct("Users").field("names", &names).finish()
    }
}

#[derive(Clone)]
enum PasswordHash {
    Bcrypt(Box<str>),
    Argon2(Box<str>),
}

impl PasswordHash {
    fn parse(hash: &str) -> Result<Self, HtpasswdReason> {
        if hash.starts_with("$2a$") || hash.starts_with("$2b$") || hash.starts_with("$2y$") {
            hash.parse::<bcrypt::HashParts>()
                .map_err(|_| HtpasswdReason::Malformed("bcrypt"))?;
            Ok(Self::Bcrypt(hash.into()))
        } else if hash.starts_with("$argon2") {
            argon2::password_hash::phc::PasswordHash::new(hash)
                .map_err(|_| HtpasswdReason::Malformed("argon2"))?;
            Ok(Self::Argon2(hash.into()))
        } else {
            Err(HtpasswdReason::WeakHash)
        }
    }

    fn verify(&self, password: &[u8]) -> bool {
        match self {
            Self::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            Self::Argon2(hash) => {
                argon2::password_hash::phc::PasswordHash::new(hash).is_ok_and(|hash| {
                    argon2::Argon2::default()
                        .verify_password(password, &hash)
                        .is_ok()
                })
            }
        }
    }
}

impl Users {
    /// Reads htpasswd lines: `name:hash`, blank lines and `#` comments skipped.
    ///
    /// # Errors
    ///
    /// The first line that is not `name:hash` with a bcrypt or argon2 hash, a name given
    /// twice, or no user at all.
    pub fn from_htpasswd(text: &str) -> Result<Self, HtpasswdError> {
        let mut hashes = HashMap::new();
        let mut decoy = None;
        for (index, line) in text.lines().enumerate() {
            let at = |reason| HtpasswdError {
                line: index + 1,
                reason,
            };
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, hash) = line.split_once(':').ok_or(at(HtpasswdReason::NoColon))?;
            if name.is_empty() {
                return Err(at(HtpasswdReason::EmptyName));
            }
            let hash = PasswordHash::parse(hash).map_err(at)?;
            decoy.get_or_insert_with(|| hash.clone());
            if hashes.insert(Box::<str>::from(name), hash).is_some() {
                return Err(at(HtpasswdReason::Repeated));
            }
        }
        let decoy = decoy.ok_or(HtpasswdError {
            line: 0,
            reason: HtpasswdReason::NoUsers,
        })?;
        Ok(Self { hashes, decoy })
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether there are none (never, for users read by [`from_htpasswd`](Self::from_htpasswd)).
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Whether `password` is `name`'s; as slow for an unknown name as for a known one.
    fn check(&self, name: &str, password: &[u8]) -> bool {
        match self.hashes.get(name) {
            Some(hash) => hash.verify(password),
            None => {
                self.decoy.verify(password);
                false
            }
        }
    }
}

/// Why an htpasswd file was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", if *line > 0 { format!("line {line}: ") } else { String::new() })]
pub struct HtpasswdError {
    /// The line, from 1; 0 when the file as a whole is wrong.
    pub line: usize,
    /// What is wrong with it.
    pub reason: HtpasswdReason,
}

/// What is wrong with an htpasswd line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HtpasswdReason {
    /// Not `name:hash`.
    #[error("expected `name:hash`")]
    NoColon,
    /// `:hash`.
    #[error("the user name is empty")]
    EmptyName,
    /// A name given on an earlier line too.
    #[error("this user is already given on an earlier line")]
    Repeated,
    /// Plain text, `{SHA}`, MD5 or `crypt`.
    #[error(
        "only bcrypt (`htpasswd -B`) and argon2 hashes are accepted; plain text, {{SHA}}, MD5 ($apr1$) and crypt are refused"
    )]
    WeakHash,
    /// A bcrypt or argon2 hash that does not parse.
    #[error("the {0} hash is malformed")]
    Malformed(&'static str),
    /// No user lines at all.
    #[error("the file has no users")]
    NoUsers,
}

/// Why a realm was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a realm is visible ASCII and spaces, without `\"` or `\\`")]
pub struct InvalidRealm;

/// Applies [`BasicAuth`] to a service. Clones share the users, the table of checked
/// credentials and the bound on checks in progress.
#[derive(Clone, Debug)]
pub struct BasicAuthLayer {
    shared: Arc<Shared>,
}

struct Shared {
    users: Users,
    challenge: HeaderValue,
    salt: [u8; 16],
    passed: Mutex<HashSet<[u8; 32]>>,
    cache_size: usize,
    checking: AtomicUsize,
    max_checking: usize,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuth")
            .field("users", &self.users)
            .field("challenge", &self.challenge)
            .field("cache_size", &self.cache_size)
            .field("max_checking", &self.max_checking)
            .finish_non_exhaustive()
    }
}

impl BasicAuthLayer {
    /// `users`, challenged with `realm`.
    ///
    /// # Errors
    ///
    /// When `realm` has `"`, `\` or characters other than visible ASCII and spaces.
    pub fn new(users: Users, realm: &str) -> Result<Self, InvalidRealm> {
        if !realm
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
        {
            return Err(InvalidRealm);
        }
        let challenge =
            HeaderValue::try_from(format!("Basic realm=\"{realm}\", charset=\"UTF-8\""))
                .map_err(|_| InvalidRealm)?;
        let mut salt = [0u8; 16];
        salt[..8].copy_from_slice(&fastrand::u64(..).to_le_bytes());
        salt[8..].copy_from_slice(&fastrand::u64(..).to_le_bytes());
        let max_checking = std::thread::available_parallelism().map_or(2, |n| n.get() * 2);
        Ok(Self {
            shared: Arc::new(Shared {
                users,
                challenge,
                salt,
                passed: Mutex::default(),
                cache_size: 1024,
                checking: AtomicUsize::new(0),
                max_checking,
            }),
        })
    }

    fn shared_mut(&mut self) -> &mut Shared {
        if Arc::get_mut(&mut self.shared).is_none() {
            let s = &*self.shared;
            self.shared = Arc::new(Shared {
                users: s.users.clone(),
                challenge: s.challenge.clone(),
                salt: s.salt,
                passed: Mutex::default(),
                cache_size: s.cache_size,
                checking: AtomicUsize::new(0),
                max_checking: s.max_checking,
            });
        }
        Arc::get_mut(&mut self.shared).expect("just made unique")
    }

    /// How many checked credentials are remembered. Defaults to 1024; 0 checks every
    /// request's password (a slow hash per request).
    #[must_use]
    pub fn cache_size(mut self, entries: usize) -> Self {
        self.shared_mut().cache_size = entries;
        self
    }

    /// How many password checks may run at once; more get 503. Defaults to twice the
    /// number of CPUs.
    #[must_use]
    pub fn max_checking(mut self, checks: usize) -> Self {
        self.shared_mut().max_checking = checks.max(1);
        self
    }
}

impl<S> Layer<S> for BasicAuthLayer {
    type Service = BasicAuth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BasicAuth {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// Lets through requests with a user's credentials; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct BasicAuth<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// The one `Authorization` value, when there is exactly one.
fn authorization(headers: &HeaderMap) -> Option<&HeaderValue> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next()?;
    values.next().is_none().then_some(value)
}

/// `Basic base64(name:password)` decoded; `None` for any other scheme or a bad encoding.
fn credentials(value: &HeaderValue) -> Option<(String, Vec<u8>)> {
    let value = value.as_bytes();
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim_ascii())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let name = std::str::from_utf8(&decoded[..colon]).ok()?.to_owned();
    Some((name, decoded[colon + 1..].to_vec()))
}

impl Shared {
    fn digest(&self, value: &HeaderValue) -> [u8; 32] {
        let mut hasher = Blake2b256::new();
        hasher.update(self.salt);
        hasher.update(value.as_bytes());
        hasher.finalize().into()
    }

    fn passed_before(&self, digest: &[u8; 32]) -> bool {
        self.cache_size > 0
            && self
                .passed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(digest)
    }

    fn remember(&self, digest: [u8; 32]) {
        if self.cache_size == 0 {
            return;
        }
        let mut passed = self.passed.lock().unwrap_or_else(PoisonError::into_inner);
        if passed.len() >= self.cache_size {
            // Full: forget one (which is up to the hash, not to a client).
            if let Some(old) = passed.iter().next().copied() {
                passed.remove(&old);
            }
        }
        passed.insert(digest);
    }

    fn unauthorized(&self) -> Response<Body> {
        let mut res = crate::respond::reason(StatusCode::UNAUTHORIZED);
        res.headers_mut()
            .insert(WWW_AUTHENTICATE, self.challenge.clone());
        res
    }
}

/// Gives back a check's slot when the check ends, panicking or not.
struct CheckSlot(Arc<Shared>);

impl Drop for CheckSlot {
    fn drop(&mut self) {
        self.0.checking.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<S, ReqB> Service<Request<ReqB>> for BasicAuth<S>
where
    S: Service<Request<ReqB>, Response = Response<Body>> + Clone,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let shared = &self.shared;
        let Some(value) = authorization(req.headers()) else {
            return ResponseFuture::refused(shared.unauthorized());
        };
        let digest = shared.digest(value);
        if shared.passed_before(&digest) {
            return ResponseFuture {
                kind: Kind::Inner {
                    future: self.inner.call(req),
                },
            };
        }
        let Some((name, password)) = credentials(value) else {
            return ResponseFuture::refused(shared.unauthorized());
        };
        if shared.checking.fetch_add(1, Ordering::AcqRel) >= shared.max_checking {
            shared.checking.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("basic auth: too many password checks at once, answering 503");
            let mut res = crate::respond::reason(StatusCode::SERVICE_UNAVAILABLE);
            res.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            return ResponseFuture::refused(res);
        }
        let slot = CheckSlot(Arc::clone(shared));
        let check = move || {
            let passed = slot.0.users.check(&name, &password);
            if passed {
                slot.0.remember(digest);
            }
            drop(slot);
            passed
        };
        let check = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Check::Running(runtime.spawn_blocking(check)),
            // Outside a runtime there is no event loop to keep free.
            Err(_) => Check::Done(check()),
        };
        // The service that was made ready goes with the request; this one gets a clone.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture {
            kind: Kind::Checking {
                state: Box::new(Checking {
                    check,
                    inner: Some(inner),
                    req: Some(req),
                    shared: Arc::clone(shared),
                }),
            },
        }
    }
}

enum Check {
    Running(JoinHandle<bool>),
    Done(bool),
}

struct Checking<S, ReqB> {
    check: Check,
    inner: Option<S>,
    req: Option<Request<ReqB>>,
    shared: Arc<Shared>,
}

pin_project! {
    /// Response future of [`BasicAuth`].
    pub struct ResponseFuture<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        #[pin]
        kind: Kind<S, ReqB>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        Inner {
            #[pin]
            future: S::Future,
        },
        // Boxed: only a first request pays for the service and request it holds.
        Checking {
            state: Box<Checking<S, ReqB>>,
        },
        Refused {
            res: Option<Response<Body>>,
        },
    }
}

impl<S: Service<Request<ReqB>>, ReqB> ResponseFuture<S, ReqB> {
    fn refused(res: Response<Body>) -> Self {
        Self {
            kind: Kind::Refused { res: Some(res) },
        }
    }
}

impl<S: Service<Request<ReqB>>, ReqB> fmt::Debug for ResponseFuture<S, ReqB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            Kind::Inner { .. } => "ResponseFuture::Inner",
            Kind::Checking { .. } => "ResponseFuture::Checking",
            Kind::Refused { .. } => "ResponseFuture::Refused",
        })
    }
}

impl<S, ReqB> Future for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>, Response = Response<Body>>,
{
    type Output = Result<Response<Body>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let (mut inner, req): (S, _) = match this.kind.as_mut().project() {
                KindProj::Inner { future } => return future.poll(cx),
                KindProj::Refused { res } => {
                    return Poll::Ready(Ok(res
                        .take()
                        .unwrap_or_else(|| crate::respond::reason(StatusCode::UNAUTHORIZED))));
                }
                KindProj::Checking { state } => {
                    let passed = match &mut state.check {
                        Check::Done(passed) => *passed,
                        Check::Running(task) => ready!(Pin::new(task).poll(cx)).unwrap_or_else(|e| {
                            tracing::error!(error = %e, "basic auth: the password check failed");
                            false
                        }),
                    };
                    if !passed {
                        let res = state.shared.unauthorized();
                        this.kind.set(Kind::Refused { res: Some(res) });
                        continue;
                    }
                    let (Some(inner), Some(req)) = (state.inner.take(), state.req.take()) else {
                        // Polled again after handing the request on: cannot happen, as
                        // the state changes to `Inner` right after.
                        return Poll::Ready(Ok(state.shared.unauthorized()));
                    };
                    (inner, req)
                }
            };
            let future = inner.call(req);
            this.kind.set(Kind::Inner { future });
        }
    }
}

#[cfg(test)]
mod tests {
    use tower::ServiceExt as _;

    use super::*;
    use crate::respond::Respond;

    /// `htpasswd -nbB alice secret`, `htpasswd -nbB bob 'pa:ss wörd'`.
    const HTPASSWD: &str = "\
# admins
alice:$2y$05$nXMy9CsiUcK80SKxTzf1lOpjMzh/YWobvCsix2IcmKiJrS.GTdaR2

bob:$2y$05$FNUy/9f05Ly.oFpXYJYuKeS25MPYSZ8Qh7ZYS60sIewZD2Pcwdryi
";

    fn basic(name: &str, password: &str) -> String {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"));
        format!("Basic {encoded}")
    }

    async fn status(layer: &BasicAuthLayer, authorization: &[&str]) -> Response<Body> {
        let mut req = Request::get("/admin/");
        for value in authorization {
            req = req.header(AUTHORIZATION, *value);
        }
        layer
            .layer(Respond::new(StatusCode::OK))
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    fn remembered(layer: &BasicAuthLayer) -> usize {
        layer.shared.passed.lock().unwrap().len()
    }

    #[tokio::test]
    async fn the_right_password_passes_and_everything_else_gets_a_challenge() {
        let layer =
            BasicAuthLayer::new(Users::from_htpasswd(HTPASSWD).unwrap(), "admin area").unwrap();
        assert_eq!(
            status(&layer, &[&basic("alice", "secret")]).await.status(),
            StatusCode::OK
        );
        // A password with a colon, a space and non-ASCII (RFC 7617's UTF-8).
        assert_eq!(
            status(&layer, &[&basic("bob", "pa:ss wörd")])
                .await
                .status(),
            StatusCode::OK
        );
        let refused = [
            vec![],
            vec![basic("alice", "wrong")],
            vec![basic("alice", "secret ")],
            vec![basic("mallory", "secret")],
            vec![basic("bob", "secret")],
            vec!["Bearer abc".to_owned()],
            vec!["Basic !!!not-base64".to_owned()],
            // No colon in the decoded credentials.
            vec![format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode("alicesecret")
            )],
            // Two Authorization fields, even if one is right.
            vec![basic("alice", "secret"), basic("alice", "secret")],
        ];
        for authorization in refused {
            let values: Vec<&str> = authorization.iter().map(String::as_str).collect();
            let res = status(&layer, &values).await;
            assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{authorization:?}");
            assert_eq!(
                res.headers()[WWW_AUTHENTICATE],
                r#"Basic realm="admin area", charset="UTF-8""#
            );
        }
        // The scheme is case-insensitive.
        let lower = basic("alice", "secret").replacen("Basic", "bAsIc", 1);
        assert_eq!(status(&layer, &[&lower]).await.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn credentials_that_passed_are_remembered_as_digests_and_wrong_ones_are_not() {
        let layer = BasicAuthLayer::new(Users::from_htpasswd(HTPASSWD).unwrap(), "a").unwrap();
        status(&layer, &[&basic("alice", "wrong")]).await;
        assert_eq!(remembered(&layer), 0);
        for _ in 0..3 {
            let res = status(&layer, &[&basic("alice", "secret")]).await;
            assert_eq!(res.status(), StatusCode::OK);
        }
        assert_eq!(remembered(&layer), 1);
        // Every check gave its slot back.
        assert_eq!(layer.shared.checking.load(Ordering::Acquire), 0);

        let bounded = BasicAuthLayer::new(Users::from_htpasswd(HTPASSWD).unwrap(), "a")
            .unwrap()
            .cache_size(1);
        status(&bounded, &[&basic("alice", "secret")]).await;
        status(&bounded, &[&basic("bob", "pa:ss wörd")]).await;
        assert_eq!(remembered(&bounded), 1);
        let uncached = BasicAuthLayer::new(Users::from_htpasswd(HTPASSWD).unwrap(), "a")
            .unwrap()
            .cache_size(0);
        let res = status(&uncached, &[&basic("alice", "secret")]).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(remembered(&uncached), 0);
    }

    #[tokio::test]
    async fn checks_beyond_the_bound_get_503_without_hashing() {
        let layer = BasicAuthLayer::new(Users::from_htpasswd(HTPASSWD).unwrap(), "a")
            .unwrap()
            .max_checking(2);
        layer.shared.checking.store(2, Ordering::Release);
        let res = status(&layer, &[&basic("alice", "secret")]).await;
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[RETRY_AFTER], "1");
        // The refused request took no slot; once one is free, the check runs.
        assert_eq!(layer.shared.checking.load(Ordering::Acquire), 2);
        layer.shared.checking.store(1, Ordering::Release);
        let res = status(&layer, &[&basic("alice", "secret")]).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(layer.shared.checking.load(Ordering::Acquire), 1);
        // Remembered credentials need no slot at all.
        layer.shared.checking.store(2, Ordering::Release);
        let res = status(&layer, &[&basic("alice", "secret")]).await;
        assert_eq!(res.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn argon2_phc_hashes_are_accepted() {
        use argon2::password_hash::PasswordHasher as _;
        let argon2 = argon2::Argon2::new(
            argon2::Algorithm::Argon2id,
            argon2::Version::V0x13,
            argon2::Params::new(64, 1, 1, None).unwrap(),
        );
        let hash = argon2.hash_password(b"hunter2").unwrap().to_string();
        let users = Users::from_htpasswd(&format!("carol:{hash}\n")).unwrap();
        let layer = BasicAuthLayer::new(users, "a").unwrap();
        assert_eq!(
            status(&layer, &[&basic("carol", "hunter2")]).await.status(),
            StatusCode::OK
        );
        assert_eq!(
            status(&layer, &[&basic("carol", "hunter3")]).await.status(),
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn weak_hashes_and_malformed_files_are_refused_with_their_line() {
        let refused = |text: &str| Users::from_htpasswd(text).unwrap_err();
        // `htpasswd -nbp`, `-nbs`, `-nbm`, `-nbd`.
        for weak in [
            "erin:plain",
            "dave:{SHA}qs67vlse11GdWHE+bbh7CYDxCOs=",
            "carol:$apr1$0kAYwUvj$G2LC1bYT4vrDdciqEonDN1",
            "frank:rl.3StKT.4T8M",
        ] {
            let e = refused(&format!("# users\n{weak}\n"));
            assert_eq!(e.line, 2, "{weak}");
            assert_eq!(e.reason, HtpasswdReason::WeakHash, "{weak}");
        }
        assert_eq!(refused("alice").reason, HtpasswdReason::NoColon);
        assert_eq!(refused(":$2y$05$x").reason, HtpasswdReason::EmptyName);
        assert_eq!(
            refused("alice:$2y$05$short").reason,
            HtpasswdReason::Malformed("bcrypt")
        );
        assert_eq!(
            refused("alice:$argon2id$nonsense").reason,
            HtpasswdReason::Malformed("argon2")
        );
        let twice = format!(
            "{HTPASSWD}alice:$2y$05$nXMy9CsiUcK80SKxTzf1lOpjMzh/YWobvCsix2IcmKiJrS.GTdaR2\n"
        );
        assert_eq!(refused(&twice).reason, HtpasswdReason::Repeated);
        assert_eq!(refused(&twice).line, 5);
        let empty = refused("# nobody\n\n");
        assert_eq!(empty.reason, HtpasswdReason::NoUsers);
        assert_eq!(empty.to_string(), "the file has no users");
        assert!(
            refused("erin:plain")
                .to_string()
                .starts_with("line 1: only bcrypt")
        );
    }

    #[test]
    fn realms_that_would_break_the_challenge_are_refused() {
        let users = || Users::from_htpasswd(HTPASSWD).unwrap();
        assert!(BasicAuthLayer::new(users(), "Staff only (2026)").is_ok());
        for bad in ["a\"b", "a\\b", "a\nb", "é"] {
            assert_eq!(
                BasicAuthLayer::new(users(), bad).unwrap_err(),
                InvalidRealm,
                "{bad}"
            );
        }
    }

    #[test]
    fn debug_output_names_users_but_never_shows_hashes() {
        let layer = BasicAuthLayer::new(Users::from_htpasswd(HTPASSWD).unwrap(), "a").unwrap();
        let debug = format!("{layer:?}");
        assert!(debug.contains("alice") && debug.contains("bob"), "{debug}");
        assert!(!debug.contains("$2y$"), "{debug}");
    }

    #[test]
    fn service_is_send_and_sync_and_future_send() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<BasicAuth<Respond>>();
        send::<ResponseFuture<Respond, Body>>();
    }
}
