//! The `route` labels (metrics, access log) of answers that no configured route gives:
//! no route may take one of these names, or its figures would add up with theirs.

/// Requests no route matches (a site's 404, a host no site takes).
pub(crate) const UNMATCHED: &str = "unmatched";
/// The redirects `redirect_https` answers.
pub(crate) const HTTPS_REDIRECT: &str = "https_redirect";
/// ACME HTTP-01 validations answered.
pub(crate) const ACME: &str = "acme";

/// Every reserved label, with what it counts (for the error a route naming it gets).
pub(crate) const RESERVED: [(&str, &str); 4] = [
    (UNMATCHED, "requests no route matches"),
    (
        scb_core::server::metrics::SERVER_ROUTE,
        "the server's own answers",
    ),
    (HTTPS_REDIRECT, "redirect_https's answers"),
    (ACME, "ACME validations"),
];
