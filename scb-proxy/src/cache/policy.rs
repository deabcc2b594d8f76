//! What may be stored, for how long, and when it may be reused (RFC 9111 §3, §4), decided
//! once when a response is stored so that a hit only compares a few numbers.
//!
//! Written here rather than taken from `http-cache-semantics` (which the first cut used):
//! mnot's cache tests showed that crate wrong where this matters for a shared cache (it
//! reads Cache-Control case-sensitively, ignores the apparent age from `Date`, trusts an
//! invalid `Age` as zero, refuses to store statuses with explicit freshness it does not
//! know, rewrites `Date` on every hit, loses all but the last value of a repeated field
//! when a 304 updates a stored response, and does not let a 304 without validators
//! refresh the response it was asked about); and a policy computed at store time saves a
//! header copy and a Cache-Control parse on every hit.

use std::cell::Cell;
use std::time::{Duration, SystemTime};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::response::Parts;
use http::{Response, StatusCode};
use scb_core::conditional::{Validators, http_date_secs};
use scb_core::date::{from_unix_secs, unix_secs};

use super::directives::{Delta, RequestDirectives, ResponseDirectives, SURROGATE_CONTROL};

/// The longest heuristic freshness (10% of the time since `Last-Modified`, §4.2.2): a
/// day, so that a file untouched for years is still checked daily.
const HEURISTIC_CAP: Duration = Duration::from_secs(24 * 3600);

/// Statuses a cache may store without explicit freshness (RFC 9110 §15.1).
const HEURISTIC_STATUSES: [u16; 12] = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];

/// Fields never stored besides the hop-by-hop ones ([`crate::forward`] strips those): the
/// proxy's own (RFC 9111 §3.1).
const NOT_STORED: [HeaderName; 3] = [
    header::PROXY_AUTHENTICATE,
    HeaderName::from_static("proxy-authentication-info"),
    header::PROXY_AUTHORIZATION,
];

/// Fields a 304 does not update in the stored response (RFC 9111 §3.2): they describe
/// the stored body, which the 304 did not resend.
const NOT_UPDATED: [HeaderName; 6] = [
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    HeaderName::from_static("content-md5"),
    header::CONTENT_RANGE,
    header::ETAG,
    header::TRANSFER_ENCODING,
];

/// How a stored response may be reused, decided when it was stored. Its fields are
/// the cache's to read: the disk tier writes and reads them (`disk/record.rs`).
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    /// When the response arrived, and its age then (§4.2.3's corrected initial age).
    pub(super) response_time: SystemTime,
    pub(super) initial_age: Duration,
    /// Fresh while its age is below this.
    pub(super) lifetime: Duration,
    /// `no-cache`: every reuse is validated first.
    pub(super) no_cache: bool,
    /// `must-revalidate`, `proxy-revalidate` or `s-maxage`: never reused stale.
    pub(super) must_revalidate: bool,
    pub(super) while_revalidate: Duration,
    pub(super) if_error: Duration,
    /// The request fields the response varies on, with the values they had.
    pub(super) vary: Vec<(HeaderName, Option<String>)>,
}

/// A response that may be stored: its policy and the head kept of it.
#[derive(Debug)]
pub(crate) struct Storable {
    pub(crate) policy: Policy,
    pub(crate) head: Parts,
}

/// What a stored response can do for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// Answer from it.
    Fresh,
    /// Validate it first.
    Validate,
}

impl Policy {
    /// The policy of `res`, answering a GET with `req` headers, if a shared cache may
    /// store it; with the head to store (no hop-by-hop fields, no `Set-Cookie`, none the
    /// response names `private` or `no-cache`).
    pub(crate) fn storable(
        req: &HeaderMap,
        res: &Parts,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Option<Storable> {
        let status = res.status;
        if status.is_informational()
            || status == StatusCode::PARTIAL_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            return None;
        }
        let request = RequestDirectives::parse(req);
        let seen = Seen::of(&res.headers);
        let d = if seen.directives {
            ResponseDirectives::parse(&res.headers)
        } else {
            ResponseDirectives::default()
        };
        if d.must_understand && !understood(status) {
            return None;
        }
        // `must-understand` lets a cache that knows the status store it despite
        // `no-store` (§5.2.2.3), which is there for caches that do not.
        let no_store = d.no_store && !d.must_understand;
        if request.no_store || no_store || d.private || d.surrogate_no_store {
            return None;
        }
        if req.contains_key(header::AUTHORIZATION)
            && !(d.public || d.must_revalidate || d.s_maxage.is_some())
        {
            return None;
        }
        // A cookie is one client's: an answer that sets one is shared only if it says so.
        if seen.set_cookie && !d.public {
            return None;
        }
        let expires = seen.expires.first.is_some();
        let explicit = d.public
            || d.max_age.is_some()
            || d.s_maxage.is_some()
            || d.surrogate_max_age.is_some()
            || expires;
        if !explicit && !HEURISTIC_STATUSES.contains(&status.as_u16()) {
            return None;
        }
        let vary = if seen.vary {
            vary_of(&res.headers, req)?
        } else {
            Vec::new()
        };
        let policy = Self::from_head(&d, &seen, vary, request_time, response_time);
        let validators = if seen.validators {
            Validators::of(&res.headers)
        } else {
            Validators::default()
        };
        if policy.lifetime.is_zero()
            && validators.etag.is_none()
            && validators.last_modified.is_none()
            && policy.while_revalidate.is_zero()
            && policy.if_error.is_zero()
        {
            // Stale at once, nothing to revalidate it with, never served stale: no use
            // storing.
            return None;
        }
        let mut head = Response::new(()).into_parts().0;
        head.status = status;
        head.version = res.version;
        let hop_by_hop = crate::forward::hop_by_hop(&res.headers);
        let stripped = |name: &HeaderName| {
            hop_by_hop(name)
                || NOT_STORED.contains(name)
                || name == header::SET_COOKIE
                || d.private_fields
                    .iter()
                    .chain(&d.no_cache_fields)
                    .any(|field| name.as_str() == field)
        };
        head.headers = owned_fields(&res.headers, stripped);
        Some(Storable { policy, head })
    }

    fn from_head(
        d: &ResponseDirectives,
        seen: &Seen<'_>,
        vary: Vec<(HeaderName, Option<String>)>,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Self {
        let date = seen
            .date
            .single()
            .and_then(date_secs)
            .map_or(response_time, from_unix_secs);
        // §4.2.3: the larger of what the clock says and what the caches on the way said.
        let apparent = response_time.duration_since(date).unwrap_or_default();
        let delay = response_time
            .duration_since(request_time)
            .unwrap_or_default();
        let initial_age = apparent.max(age_value(seen.age) + delay);
        let lifetime = if let Some(s) = d.surrogate_max_age {
            Duration::from_secs(s.secs())
        } else if let Some(s) = d.s_maxage {
            Duration::from_secs(s.secs())
        } else if let Some(m) = d.max_age {
            Duration::from_secs(m.secs())
        } else if seen.expires.first.is_some() {
            // An Expires that is not one valid date means already expired (§5.3).
            seen.expires
                .single()
                .and_then(|v| http_date_secs(v.as_bytes()))
                .map(from_unix_secs)
                .and_then(|expires| expires.duration_since(date).ok())
                .unwrap_or_default()
        } else {
            seen.last_modified
                .single()
                .and_then(|v| http_date_secs(v.as_bytes()))
                .and_then(|modified| {
                    let since = unix_secs(date).checked_sub(modified)?;
                    u64::try_from(since / 10).ok()
                })
                .map_or(Duration::ZERO, |secs| {
                    Duration::from_secs(secs).min(HEURISTIC_CAP)
                })
        };
        let window = |d: Option<Delta>| Duration::from_secs(d.map_or(0, Delta::secs));
        Self {
            response_time,
            initial_age,
            lifetime,
            no_cache: d.no_cache,
            must_revalidate: d.must_revalidate || d.proxy_revalidate || d.s_maxage.is_some(),
            while_revalidate: window(d.stale_while_revalidate),
            if_error: window(d.stale_if_error),
            vary,
        }
    }

    /// Its age at `now` (§4.2.3).
    pub(crate) fn age(&self, now: SystemTime) -> Duration {
        self.initial_age + now.duration_since(self.response_time).unwrap_or_default()
    }

    /// How long past its freshness it is at `now` (zero while fresh).
    pub(crate) fn staleness(&self, now: SystemTime) -> Duration {
        self.age(now).saturating_sub(self.lifetime)
    }

    /// Whether it may answer a request with these directives at `now` without asking
    /// the origin (§4.2, §5.2.1).
    pub(crate) fn reuse(&self, req: &RequestDirectives, now: SystemTime) -> Reuse {
        let age = self.age(now);
        if self.no_cache || req.no_cache {
            return Reuse::Validate;
        }
        if req
            .max_age
            .is_some_and(|m| age > Duration::from_secs(m.secs()))
        {
            return Reuse::Validate;
        }
        if req
            .min_fresh
            .is_some_and(|m| self.lifetime.saturating_sub(age) < Duration::from_secs(m.secs()))
        {
            return Reuse::Validate;
        }
        if age < self.lifetime {
            return Reuse::Fresh;
        }
        let stale = age - self.lifetime;
        match req.max_stale {
            Some(limit) if !self.must_revalidate => {
                if limit.is_none_or(|d| stale <= Duration::from_secs(d.secs())) {
                    Reuse::Fresh
                } else {
                    Reuse::Validate
                }
            }
            _ => Reuse::Validate,
        }
    }

    /// Whether it may be answered at `now` while one request refreshes it in the
    /// background (`stale-while-revalidate`).
    pub(crate) fn allows_while_revalidate(&self, req: &RequestDirectives, now: SystemTime) -> bool {
        !self.no_cache
            && !self.must_revalidate
            && !self.while_revalidate.is_zero()
            && req.accepts_stale()
            && self.staleness(now) <= self.while_revalidate
    }

    /// Whether it may be answered at `now` because the origin failed: within the
    /// longest of its `stale-if-error`, the request's, and the route's `default`.
    pub(crate) fn allows_if_error(
        &self,
        req: &RequestDirectives,
        default: Duration,
        now: SystemTime,
    ) -> bool {
        let asked = Duration::from_secs(req.stale_if_error.map_or(0, Delta::secs));
        let window = self.if_error.max(asked).max(default);
        !self.no_cache
            && !self.must_revalidate
            && !window.is_zero()
            && req.accepts_stale()
            && self.staleness(now) <= window
    }

    /// Whether a request with `req` headers selects this response (§4.1): every field
    /// it varies on has the value the stored request had, after normalising lists.
    pub(crate) fn vary_matches(&self, req: &HeaderMap) -> bool {
        self.vary
            .iter()
            .all(|(name, value)| normalized(req, name) == *value)
    }
}

/// The request fields a response varies on, with the values `req` has; `None` for
/// `Vary: *`, which no later request matches.
fn vary_of(res: &HeaderMap, req: &HeaderMap) -> Option<Vec<(HeaderName, Option<String>)>> {
    let mut vary = Vec::new();
    for field in res.get_all(header::VARY) {
        for name in field.to_str().ok()?.split(',') {
            let name = name.trim();
            if name == "*" {
                return None;
            }
            if name.is_empty() {
                continue;
            }
            let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
            if !vary.iter().any(|(n, _)| *n == name) {
                let value = normalized(req, &name);
                vary.push((name, value));
            }
        }
    }
    Some(vary)
}

/// A request field's value for comparison: its lines joined as one list, the whitespace
/// around list members dropped.
fn normalized(req: &HeaderMap, name: &HeaderName) -> Option<String> {
    let mut members = Vec::new();
    let mut any = false;
    for line in req.get_all(name) {
        any = true;
        let text = String::from_utf8_lossy(line.as_bytes()).into_owned();
        members.extend(
            text.split(',')
                .map(|m| m.trim().to_owned())
                .filter(|m| !m.is_empty()),
        );
    }
    any.then(|| members.join(","))
}

/// Whether a status is one whose caching requirements this cache implements (for
/// `must-understand`): those RFC 9110 defines.
fn understood(status: StatusCode) -> bool {
    matches!(status.as_u16(), 200..=206 | 300..=305 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505)
}

/// A `Date` in Unix seconds. An origin's `Date` changes once a second and the
/// responses of that second carry the same bytes, so the last IMF-fixdate parsed on this
/// thread is kept with its value (parsing one costs about 870 instructions under
/// callgrind, comparing 29 bytes a few).
fn date_secs(value: &HeaderValue) -> Option<i64> {
    /// The length of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
    const FIXDATE: usize = 29;
    thread_local! {
        // No field value holds a NUL: the zeroes never match.
        static LAST: Cell<([u8; FIXDATE], i64)> = const { Cell::new(([0; FIXDATE], 0)) };
    }
    let Ok(bytes) = <[u8; FIXDATE]>::try_from(value.as_bytes()) else {
        return http_date_secs(value.as_bytes());
    };
    LAST.with(|last| {
        let (seen, secs) = last.get();
        if seen == bytes {
            return Some(secs);
        }
        let secs = http_date_secs(&bytes)?;
        last.set((bytes, secs));
        Some(secs)
    })
}

/// The response fields the policy reads, found in one pass over the head (as
/// [`has_any`](scb_core::http1::has_any) finds one): a response
/// has a handful of fields and most of those the policy asks about are absent, so a
/// lookup of each (a hash and a probe, about 100 instructions) cost more than comparing
/// every name once.
#[derive(Debug, Default)]
struct Seen<'a> {
    date: Lines<'a>,
    age: Lines<'a>,
    expires: Lines<'a>,
    last_modified: Lines<'a>,
    /// `Cache-Control` or `Surrogate-Control`.
    directives: bool,
    /// `ETag` or `Last-Modified`.
    validators: bool,
    vary: bool,
    set_cookie: bool,
}

impl<'a> Seen<'a> {
    fn of(headers: &'a HeaderMap) -> Self {
        let mut seen = Self::default();
        for (name, value) in headers {
            if name == header::DATE {
                seen.date.see(value);
            } else if name == header::CACHE_CONTROL || name == SURROGATE_CONTROL {
                seen.directives = true;
            } else if name == header::AGE {
                seen.age.see(value);
            } else if name == header::EXPIRES {
                seen.expires.see(value);
            } else if name == header::LAST_MODIFIED {
                seen.last_modified.see(value);
                seen.validators = true;
            } else if name == header::ETAG {
                seen.validators = true;
            } else if name == header::VARY {
                seen.vary = true;
            } else if name == header::SET_COOKIE {
                seen.set_cookie = true;
            }
        }
        seen
    }
}

/// The lines of one field: the first, and whether there were more.
#[derive(Clone, Copy, Debug, Default)]
struct Lines<'a> {
    first: Option<&'a HeaderValue>,
    several: bool,
}

impl<'a> Lines<'a> {
    fn see(&mut self, value: &'a HeaderValue) {
        if self.first.is_some() {
            self.several = true;
        } else {
            self.first = Some(value);
        }
    }

    /// The value, when the field came exactly once.
    fn single(self) -> Option<&'a HeaderValue> {
        if self.several { None } else { self.first }
    }
}

/// The `Age` a response arrived with: zero when absent; anything but one non-negative
/// integer (a list, two lines, a sign, a fraction, a parameter) reads as the greatest age
/// (§1.2.2's 2^31), so that a confused upstream's answer is revalidated, never trusted.
fn age_value(age: Lines<'_>) -> Duration {
    let secs = match (age.first, age.several) {
        (None, _) => 0,
        (Some(v), false) => {
            let text = v.as_bytes();
            if !text.is_empty() && text.iter().all(u8::is_ascii_digit) {
                std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| t.parse::<u64>().ok())
                    .map_or(Delta::MAX, |n| n.min(Delta::MAX))
            } else {
                Delta::MAX
            }
        }
        _ => Delta::MAX,
    };
    Duration::from_secs(secs)
}

/// The headers of a conditional request that revalidates `stored` for a client request
/// with `req` headers: the client's own preconditions and range are replaced by the
/// stored response's validators, so that the answer is about what is stored (the
/// client's preconditions are then evaluated against it here).
pub(crate) fn conditional_headers(req: &HeaderMap, stored: &Parts) -> HeaderMap {
    let mut headers = req.clone();
    for name in [
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_MATCH,
        header::IF_UNMODIFIED_SINCE,
        header::IF_RANGE,
        header::RANGE,
    ] {
        headers.remove(name);
    }
    if let Some(etag) = stored.headers.get(header::ETAG) {
        headers.insert(header::IF_NONE_MATCH, etag.clone());
    }
    if let Some(modified) = stored.headers.get(header::LAST_MODIFIED) {
        headers.insert(header::IF_MODIFIED_SINCE, modified.clone());
    }
    headers
}

/// The stored head updated by a 304 to its revalidation (§4.3.4), or `None` when the 304
/// is about another response (its validator differs), which must then not be used.
pub(crate) fn refreshed(stored: &Parts, not_modified: &Parts) -> Option<Parts> {
    let old = Validators::of(&stored.headers);
    let new = Validators::of(&not_modified.headers);
    let selects = match (new.etag, old.etag) {
        (Some(new), Some(old)) => new.opaque == old.opaque,
        (Some(_), None) => false,
        (None, _) => match (new.last_modified, old.last_modified) {
            (Some(new), Some(old)) => new == old,
            (Some(_), None) => false,
            // No validator: the answer to the conditional request made for this response.
            (None, _) => true,
        },
    };
    if !selects {
        return None;
    }
    let mut head = Response::new(()).into_parts().0;
    head.status = stored.status;
    head.version = stored.version;
    head.headers = stored.headers.clone();
    let mut replaced: Vec<&HeaderName> = Vec::new();
    for (name, value) in &not_modified.headers {
        if NOT_UPDATED.contains(name)
            || NOT_STORED.contains(name)
            || crate::forward::is_hop_by_hop(name)
        {
            continue;
        }
        if !replaced.contains(&name) {
            head.headers.remove(name);
            replaced.push(name);
        }
        head.headers.append(name, value.clone());
    }
    // The 304's values are slices of the upstream connection's read buffer: copied, as
    // `storable` copies a response's, so that the refreshed entry does not keep that
    // buffer (kilobytes) alive.
    head.headers = owned_fields(&head.headers, |_| false);
    Some(head)
}

/// A copy of a response head (status, version, fields; no extensions).
pub(crate) fn copy_head(head: &Parts) -> Parts {
    let mut copy = Response::new(()).into_parts().0;
    copy.status = head.status;
    copy.version = head.version;
    copy.headers = head.headers.clone();
    copy
}

/// A copy of `fields` whose values own their bytes. A parsed head's values are slices of
/// the connection's read buffer: stored as they are, each stored response would keep a
/// whole buffer (kilobytes) alive for a few hundred bytes of fields, and the store's
/// count would be a fraction of what it holds.
/// Fields for which `stripped` is true are left out.
///
/// A value each (one buffer for all of a head's values and slices of it measured 255
/// instructions more a miss: a slice's reference count is an atomic, a small allocation
/// is cheaper). The map is cloned and its values replaced in place, so no name is hashed
/// and inserted again (appending each field to a new map cost about 900 instructions
/// more a miss).
fn owned_fields(fields: &HeaderMap, stripped: impl Fn(&HeaderName) -> bool) -> HeaderMap {
    let mut owned = fields.clone();
    let left_out: Vec<HeaderName> = owned
        .keys()
        .filter(|name| stripped(name))
        .cloned()
        .collect();
    for name in &left_out {
        owned.remove(name);
    }
    for value in owned.values_mut() {
        let mut copy = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
        copy.set_sensitive(value.is_sensitive());
        *value = copy;
    }
    owned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, fields: &[(&str, &str)]) -> Parts {
        let mut res = Response::builder().status(status);
        for (n, v) in fields {
            res = res.header(*n, *v);
        }
        res.body(()).unwrap().into_parts().0
    }

    fn store(res: &Parts) -> Option<Storable> {
        let now = SystemTime::now();
        Policy::storable(&HeaderMap::new(), res, now, now)
    }

    /// A head whose values are slices of one buffer, as the upstream client parses them.
    fn head_in(buffer: &bytes::Bytes, status: u16, fields: &[(&str, &str)]) -> Parts {
        let mut head = head(status, &[]);
        for (name, value) in fields {
            let at = buffer
                .windows(value.len())
                .position(|w| w == value.as_bytes())
                .unwrap();
            let slice = buffer.slice(at..at + value.len());
            head.headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_maybe_shared(slice).unwrap(),
            );
        }
        head
    }

    fn within(buffer: &bytes::Bytes, value: &HeaderValue) -> bool {
        buffer.as_ptr_range().contains(&value.as_bytes().as_ptr())
    }

    #[test]
    fn a_date_read_again_is_the_kept_value_and_each_new_one_is_parsed() {
        let date = |v: &'static str| date_secs(&HeaderValue::from_static(v));
        let first = "Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(date(first), Some(784_111_777));
        assert_eq!(date(first), Some(784_111_777));
        assert_eq!(date("Sun, 06 Nov 1994 08:49:38 GMT"), Some(784_111_778));
        // Not a date though a fixdate's length, and a date in another form.
        assert_eq!(date("Sun, 06 Nov 1994 08:49:3x GMT"), None);
        assert_eq!(date("Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(date("Sun, 06 Nov 1994 08:49:38 GMT"), Some(784_111_778));
        assert_eq!(date(first), Some(784_111_777));
    }

    #[test]
    fn stored_and_refreshed_heads_keep_none_of_the_upstream_buffer() {
        let buffer = bytes::Bytes::from_static(
            b"max-age=60 \"v1\" text/plain a-b-c Wed, 21 Oct 2026 07:28:00 GMT x-y",
        );
        let original = head_in(
            &buffer,
            200,
            &[
                ("cache-control", "max-age=60"),
                ("etag", "\"v1\""),
                ("content-type", "text/plain"),
                ("x-trace", "a-b-c"),
                ("x-trace", "x-y"),
            ],
        );
        let stored = store(&original).unwrap().head;
        assert_eq!(stored.headers, original.headers);
        assert!(stored.headers.values().all(|v| !within(&buffer, v)));

        let answer = bytes::Bytes::from_static(b"\"v1\" Wed, 21 Oct 2026 07:28:00 GMT 7");
        let not_modified = head_in(
            &answer,
            304,
            &[
                ("etag", "\"v1\""),
                ("date", "Wed, 21 Oct 2026 07:28:00 GMT"),
                ("x-new", "7"),
            ],
        );
        let refreshed = refreshed(&stored, &not_modified).unwrap();
        assert_eq!(refreshed.headers["x-new"], "7");
        assert_eq!(refreshed.headers["content-type"], "text/plain");
        assert_eq!(refreshed.headers.get_all("x-trace").iter().count(), 2);
        assert!(refreshed.headers.values().all(|v| !within(&answer, v)));
    }

    #[test]
    fn an_invalid_or_repeated_age_makes_the_response_stale_and_a_plain_one_counts() {
        let now = SystemTime::now();
        for age in ["abc", "-7200", "7200.0", "0, 0", "7200;foo=bar"] {
            let p = store(&head(
                200,
                &[("cache-control", "max-age=3600"), ("age", age)],
            ))
            .unwrap()
            .policy;
            assert_eq!(
                p.reuse(&RequestDirectives::default(), now),
                Reuse::Validate,
                "{age}"
            );
        }
        let p = store(&head(
            200,
            &[("cache-control", "max-age=3600"), ("age", "100")],
        ))
        .unwrap()
        .policy;
        assert!(p.age(now) >= Duration::from_secs(100));
        assert_eq!(p.reuse(&RequestDirectives::default(), now), Reuse::Fresh);
    }

    #[test]
    fn a_date_in_the_past_counts_towards_the_age() {
        let now = SystemTime::now();
        let date = httpdate::fmt_http_date(now - Duration::from_secs(120));
        let p = store(&head(
            200,
            &[("cache-control", "max-age=60"), ("date", &date)],
        ))
        .unwrap()
        .policy;
        assert_eq!(p.reuse(&RequestDirectives::default(), now), Reuse::Validate);
    }

    #[test]
    fn a_date_sent_twice_is_no_date_and_hop_by_hop_fields_go_without_connection() {
        let now = SystemTime::now();
        let old = httpdate::fmt_http_date(now - Duration::from_secs(120));
        // One past date makes a minute's freshness stale; the same date twice is ignored
        // (the response's arrival counts instead), so the response is fresh.
        let p = store(&head(
            200,
            &[
                ("cache-control", "max-age=60"),
                ("date", &old),
                ("date", &old),
            ],
        ))
        .unwrap()
        .policy;
        assert_eq!(p.reuse(&RequestDirectives::default(), now), Reuse::Fresh);
        // The same for a heuristic lifetime: two Last-Modified lines give none (the
        // first still validates, so the response is stored, stale at once).
        let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
        assert!(store(&head(200, &[("last-modified", lm)])).is_some());
        let twice = store(&head(200, &[("last-modified", lm), ("last-modified", lm)]));
        assert!(twice.is_some_and(|s| s.policy.lifetime.is_zero()));
        // No `Connection`: the fixed hop-by-hop fields still go.
        let stored = store(&head(
            200,
            &[
                ("cache-control", "max-age=60"),
                ("keep-alive", "timeout=5"),
                ("proxy-connection", "keep-alive"),
                ("x-kept", "1"),
            ],
        ))
        .unwrap();
        assert!(!stored.head.headers.contains_key("keep-alive"));
        assert!(!stored.head.headers.contains_key("proxy-connection"));
        assert!(stored.head.headers.contains_key("x-kept"));
    }

    #[test]
    fn explicit_freshness_makes_any_final_status_storable_and_heuristics_only_some() {
        assert!(store(&head(500, &[("cache-control", "max-age=60")])).is_some());
        assert!(store(&head(299, &[("cache-control", "max-age=60")])).is_some());
        let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
        assert!(store(&head(404, &[("last-modified", lm)])).is_some());
        assert!(store(&head(500, &[("last-modified", lm)])).is_none());
        assert!(store(&head(206, &[("cache-control", "max-age=60")])).is_none());
        assert!(
            store(&head(
                599,
                &[("cache-control", "max-age=60, must-understand")]
            ))
            .is_none()
        );
        assert!(
            store(&head(
                200,
                &[("cache-control", "max-age=60, must-understand, no-store")]
            ))
            .is_some()
        );
        for refused in ["no-store", "private", "max-age=60, Private"] {
            assert!(
                store(&head(200, &[("cache-control", refused)])).is_none(),
                "{refused}"
            );
        }
        assert!(
            store(&head(
                200,
                &[("cache-control", "max-age=60"), ("vary", "*")]
            ))
            .is_none()
        );
        assert!(
            store(&head(
                200,
                &[("cache-control", "max-age=60"), ("set-cookie", "a=1")]
            ))
            .is_none()
        );
    }

    #[test]
    fn expires_in_any_http_date_form_and_an_invalid_one_is_already_expired() {
        let now = SystemTime::now();
        let fresh = |expires: &str| {
            store(&head(200, &[("expires", expires), ("etag", "\"x\"")]))
                .unwrap()
                .policy
                .reuse(&RequestDirectives::default(), now)
        };
        let next_year = httpdate::fmt_http_date(now + Duration::from_secs(365 * 86400));
        assert_eq!(fresh(&next_year), Reuse::Fresh);
        assert_eq!(fresh("Sunday, 06-Nov-94 08:49:37 GMT"), Reuse::Validate);
        assert_eq!(fresh("0"), Reuse::Validate);
    }

    #[test]
    fn surrogate_control_overrides_cache_control_for_this_cache_but_not_a_targeted_one() {
        let now = SystemTime::now();
        let reuse = |fields: &[(&str, &str)]| {
            store(&head(200, fields)).map(|s| s.policy.reuse(&RequestDirectives::default(), now))
        };
        assert_eq!(
            reuse(&[
                ("cache-control", "max-age=3600"),
                ("surrogate-control", "max-age=0"),
                ("etag", "\"x\"")
            ]),
            Some(Reuse::Validate)
        );
        assert_eq!(
            reuse(&[("surrogate-control", "MaX-aGe=3600")]),
            Some(Reuse::Fresh)
        );
        assert_eq!(
            reuse(&[
                ("cache-control", "max-age=60"),
                ("surrogate-control", "no-store")
            ]),
            None
        );
        assert_eq!(
            reuse(&[
                ("cache-control", "max-age=60"),
                ("surrogate-control", "max-age=0;other")
            ]),
            Some(Reuse::Fresh)
        );
    }

    #[test]
    fn the_stored_head_drops_what_is_not_to_be_reused() {
        let stored = store(&head(
            200,
            &[
                (
                    "cache-control",
                    "max-age=60, no-cache=\"x-secret\", private=\"x-mine\"",
                ),
                ("set-cookie", "a=1"),
                ("cache-control", "public"),
                ("x-secret", "1"),
                ("x-mine", "1"),
                ("connection", "x-hop"),
                ("x-hop", "1"),
                ("x-kept", "1"),
            ],
        ))
        .unwrap();
        for gone in ["set-cookie", "x-secret", "x-mine", "connection", "x-hop"] {
            assert!(!stored.head.headers.contains_key(gone), "{gone}");
        }
        assert!(stored.head.headers.contains_key("x-kept"));
    }

    #[test]
    fn vary_compares_normalised_lists_and_absence() {
        let mut req = HeaderMap::new();
        req.append("accept-encoding", HeaderValue::from_static("gzip,  br"));
        let now = SystemTime::now();
        let p = Policy::storable(
            &req,
            &head(
                200,
                &[("cache-control", "max-age=60"), ("vary", "Accept-Encoding")],
            ),
            now,
            now,
        )
        .unwrap()
        .policy;
        let mut two_lines = HeaderMap::new();
        two_lines.append("accept-encoding", HeaderValue::from_static("gzip"));
        two_lines.append("accept-encoding", HeaderValue::from_static("br"));
        assert!(p.vary_matches(&two_lines));
        assert!(!p.vary_matches(&HeaderMap::new()));
        let mut other = HeaderMap::new();
        other.append("accept-encoding", HeaderValue::from_static("br, gzip"));
        assert!(!p.vary_matches(&other));
    }

    #[test]
    fn request_directives_narrow_what_is_fresh_and_max_stale_widens_it() {
        let now = SystemTime::now();
        let p = store(&head(
            200,
            &[("cache-control", "max-age=60"), ("age", "30")],
        ))
        .unwrap()
        .policy;
        let with = |cc: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CACHE_CONTROL, HeaderValue::from_str(cc).unwrap());
            p.reuse(&RequestDirectives::parse(&h), now)
        };
        assert_eq!(with("max-age=10"), Reuse::Validate);
        assert_eq!(with("min-fresh=40"), Reuse::Validate);
        assert_eq!(with("no-cache"), Reuse::Validate);
        assert_eq!(with("max-age=40"), Reuse::Fresh);
        let stale = store(&head(
            200,
            &[("cache-control", "max-age=60"), ("age", "90")],
        ))
        .unwrap()
        .policy;
        let mut h = HeaderMap::new();
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-stale=60"),
        );
        assert_eq!(
            stale.reuse(&RequestDirectives::parse(&h), now),
            Reuse::Fresh
        );
        let strict = store(&head(
            200,
            &[
                ("cache-control", "max-age=60, must-revalidate"),
                ("age", "90"),
            ],
        ))
        .unwrap()
        .policy;
        assert_eq!(
            strict.reuse(&RequestDirectives::parse(&h), now),
            Reuse::Validate
        );
    }

    #[test]
    fn a_304_updates_every_value_of_the_fields_it_carries_but_not_the_body_s() {
        let stored = head(
            200,
            &[
                ("etag", "\"a\""),
                ("content-length", "5"),
                ("x-list", "1"),
                ("x-list", "2"),
                ("x-kept", "k"),
            ],
        );
        let not_modified = head(
            304,
            &[
                ("etag", "\"a\""),
                ("content-length", "0"),
                ("x-list", "3"),
                ("x-list", "4"),
                ("x-new", "n"),
            ],
        );
        let merged = refreshed(&stored, &not_modified).unwrap();
        assert_eq!(merged.status, StatusCode::OK);
        let list: Vec<_> = merged.headers.get_all("x-list").iter().collect();
        assert_eq!(list, ["3", "4"]);
        assert_eq!(merged.headers["x-kept"], "k");
        assert_eq!(merged.headers["x-new"], "n");
        assert_eq!(merged.headers["content-length"], "5");
        // A 304 about another representation updates nothing.
        assert!(refreshed(&stored, &head(304, &[("etag", "\"b\"")])).is_none());
        // One without validators answers the request made for this one.
        assert!(refreshed(&stored, &head(304, &[])).is_some());
    }

    #[test]
    fn a_revalidation_asks_about_the_stored_response_not_the_client_s() {
        let mut req = HeaderMap::new();
        req.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"client\""),
        );
        req.insert(header::RANGE, HeaderValue::from_static("bytes=0-1"));
        req.insert("x-other", HeaderValue::from_static("1"));
        let stored = head(200, &[("etag", "\"stored\"")]);
        let h = conditional_headers(&req, &stored);
        assert_eq!(h[header::IF_NONE_MATCH], "\"stored\"");
        assert!(!h.contains_key(header::RANGE));
        assert!(!h.contains_key(header::IF_MODIFIED_SINCE));
        assert_eq!(h["x-other"], "1");
    }
}
