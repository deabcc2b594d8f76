//! [`OriginalUri`]: the URI the client sent, kept when the server rewrites it.

use http::{Request, Uri};

/// The request URI as the client sent it, in the extensions of a request whose URI a
/// rewrite inside the server changed (scb's `RewriteLayer`, a `try_files` fallback).
/// Inserted by the first rewrite only, so it stays the client's. What must report what
/// the client asked for reads it: CGI's `REQUEST_URI`, say.
///
/// ```
/// use http::Request;
/// use scb_core::original_uri::OriginalUri;
///
/// let mut req = Request::get("/blog/7?x=1").body(()).unwrap();
/// OriginalUri::rewrite(&mut req, "/index.php?x=1".parse().unwrap());
/// assert_eq!(req.uri(), "/index.php?x=1");
/// assert_eq!(req.extensions().get::<OriginalUri>().unwrap().0, "/blog/7?x=1");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginalUri(pub Uri);

impl OriginalUri {
    /// Sets `req`'s URI to `uri`, keeping the one it had as its [`OriginalUri`] unless an
    /// earlier rewrite did already.
    pub fn rewrite<B>(req: &mut Request<B>, uri: Uri) {
        let before = std::mem::replace(req.uri_mut(), uri);
        if req.extensions().get::<Self>().is_none() {
            req.extensions_mut().insert(Self(before));
        }
    }
}
