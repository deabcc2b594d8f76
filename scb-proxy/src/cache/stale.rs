//! When a stale response may still be served: `stale-while-revalidate` and
//! `stale-if-error` (RFC 5861), within what RFC 9111 §4.2.4 forbids.
//!
//! `http-cache-semantics` decides freshness but not these two extensions, so the layer
//! reads them itself, once, when a response is stored.

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use http::header::{self, HeaderValue};
use http_cache_semantics::CachePolicy;

/// What a stored response allows once it is stale.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StaleRules {
    /// Its freshness lifetime: stale once its age passes this.
    pub(crate) lifetime: Duration,
    /// `stale-while-revalidate=N`: served for N seconds past it while one request
    /// refreshes it in the background.
    pub(crate) while_revalidate: Duration,
    /// `stale-if-error=N`: served for N seconds past it when the upstream fails.
    pub(crate) if_error: Duration,
    /// `must-revalidate`, `proxy-revalidate`, `no-cache` or `s-maxage` (which implies
    /// `proxy-revalidate` in a shared cache, RFC 9111 §5.2.2.10): never served stale.
    pub(crate) forbidden: bool,
}

impl StaleRules {
    /// The rules of a response just stored under `policy`, with `headers`.
    pub(crate) fn of(policy: &CachePolicy, headers: &HeaderMap, now: SystemTime) -> Self {
        let mut rules = Self {
            lifetime: policy.time_to_live(now) + policy.age(now),
            ..Self::default()
        };
        for (name, value) in directives(headers.get_all(header::CACHE_CONTROL)) {
            let seconds = || value.and_then(|v| v.parse().ok()).map(Duration::from_secs);
            match name.to_ascii_lowercase().as_str() {
                "stale-while-revalidate" => rules.while_revalidate = seconds().unwrap_or_default(),
                "stale-if-error" => rules.if_error = seconds().unwrap_or_default(),
                "must-revalidate" | "proxy-revalidate" | "no-cache" | "s-maxage" => {
                    rules.forbidden = true;
                }
                _ => {}
            }
        }
        rules
    }

    /// How long past its lifetime a response of age `age` is (zero while fresh).
    pub(crate) fn staleness(&self, age: Duration) -> Duration {
        age.saturating_sub(self.lifetime)
    }

    /// Whether a response this `stale` may be served while it is refreshed.
    pub(crate) fn allows_while_revalidate(&self, stale: Duration) -> bool {
        !self.forbidden && stale <= self.while_revalidate && !self.while_revalidate.is_zero()
    }

    /// Whether a response this `stale` may be served because the upstream failed: within
    /// the longest of its own `stale-if-error`, the request's and the route's `default`.
    pub(crate) fn allows_if_error(
        &self,
        stale: Duration,
        request: Option<Duration>,
        default: Duration,
    ) -> bool {
        let window = self.if_error.max(request.unwrap_or_default()).max(default);
        !self.forbidden && !window.is_zero() && stale <= window
    }
}

/// Whether a request lets a stale response be served to it at all: not when it asks
/// for a validated (`no-cache`, `Pragma: no-cache`) or a young enough (`max-age`,
/// `min-fresh`) response. `max-stale` is the policy's to honour.
pub(crate) fn request_accepts_stale(headers: &HeaderMap) -> bool {
    let pragma_no_cache = headers
        .get_all(header::PRAGMA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("no-cache"));
    !pragma_no_cache
        && !directives(headers.get_all(header::CACHE_CONTROL)).any(|(name, _)| {
            ["no-cache", "max-age", "min-fresh"]
                .iter()
                .any(|d| name.eq_ignore_ascii_case(d))
        })
}

/// The request's own `stale-if-error=N`, if it says one.
pub(crate) fn request_if_error(headers: &HeaderMap) -> Option<Duration> {
    directives(headers.get_all(header::CACHE_CONTROL))
        .find(|(name, _)| name.eq_ignore_ascii_case("stale-if-error"))
        .and_then(|(_, value)| value?.parse().ok())
        .map(Duration::from_secs)
}

/// The directives of Cache-Control fields: names and their values, unquoted.
fn directives<'a>(
    fields: http::header::GetAll<'a, HeaderValue>,
) -> impl Iterator<Item = (&'a str, Option<&'a str>)> {
    fields
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|d| {
            let d = d.trim();
            if d.is_empty() {
                return None;
            }
            Some(match d.split_once('=') {
                Some((name, value)) => (name.trim(), Some(value.trim().trim_matches('"'))),
                None => (d, None),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(cache_control: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_str(cache_control).unwrap(),
        );
        h
    }

    #[test]
    fn a_request_that_wants_a_validated_or_young_response_takes_no_stale_one() {
        for refuses in ["no-cache", "max-age=0", "min-fresh=5", "Max-Age=3"] {
            assert!(!request_accepts_stale(&headers(refuses)), "{refuses}");
        }
        let mut pragma = HeaderMap::new();
        pragma.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
        assert!(!request_accepts_stale(&pragma));
        for accepts in [
            "max-stale",
            "max-stale=60",
            "stale-if-error=5",
            "no-transform",
        ] {
            assert!(request_accepts_stale(&headers(accepts)), "{accepts}");
        }
        assert!(request_accepts_stale(&HeaderMap::new()));
    }

    #[test]
    fn the_request_may_say_its_own_stale_if_error() {
        assert_eq!(
            request_if_error(&headers("max-stale, stale-if-error=30")),
            Some(Duration::from_secs(30))
        );
        assert_eq!(request_if_error(&headers("stale-if-error")), None);
        assert_eq!(request_if_error(&headers("stale-if-error=x")), None);
    }

    #[test]
    fn staleness_counts_from_the_end_of_the_lifetime() {
        let rules = StaleRules {
            lifetime: Duration::from_secs(10),
            ..StaleRules::default()
        };
        assert_eq!(rules.staleness(Duration::from_secs(5)), Duration::ZERO);
        assert_eq!(
            rules.staleness(Duration::from_secs(12)),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn revalidation_directives_forbid_serving_stale_whatever_the_windows_say() {
        let at = SystemTime::now();
        let res = http::Response::builder()
            .header(
                "cache-control",
                "max-age=1, stale-while-revalidate=60, stale-if-error=90",
            )
            .body(())
            .unwrap();
        let req = http::Request::get("/").body(()).unwrap();
        let policy = CachePolicy::new(&req, &res);
        let rules = StaleRules::of(&policy, res.headers(), at);
        assert_eq!(rules.while_revalidate, Duration::from_secs(60));
        assert_eq!(rules.if_error, Duration::from_secs(90));
        assert!(rules.allows_while_revalidate(Duration::from_secs(60)));
        assert!(!rules.allows_while_revalidate(Duration::from_secs(61)));
        assert!(rules.allows_if_error(Duration::from_secs(90), None, Duration::ZERO));
        assert!(rules.allows_if_error(
            Duration::from_secs(100),
            Some(Duration::from_secs(120)),
            Duration::ZERO
        ));
        assert!(!rules.allows_if_error(Duration::from_secs(91), None, Duration::ZERO));
        for forbids in [
            "must-revalidate",
            "proxy-revalidate",
            "no-cache",
            "s-maxage=1",
        ] {
            let mut headers = res.headers().clone();
            headers.append("cache-control", HeaderValue::from_static(forbids));
            let rules = StaleRules::of(&policy, &headers, at);
            assert!(
                !rules.allows_while_revalidate(Duration::from_secs(1)),
                "{forbids}"
            );
            assert!(
                !rules.allows_if_error(Duration::from_secs(1), None, Duration::from_secs(60)),
                "{forbids}"
            );
        }
    }
}
