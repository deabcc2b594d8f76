//! What a connection driver asks of the service it serves and of the bodies it answers
//! with, written once: every driver (scb's HTTP/1.1, hyper's HTTP/2 and upgrades, HTTP/3,
//! the accept loops and the parked connections that start them) has the same bounds.

use bytes::Bytes;
use http::{Request, Response};
use tower::Service;

use crate::{Body, BoxError};

/// A tower service of `Request<Body>` answering `Response<B>`: cloned per connection, its
/// errors boxed at the driver, its futures owned by the driver alone (`'static`). Every
/// such service is one (a blanket impl); the public [`Server::start`] spells the same
/// bounds out for its users.
///
/// [`Server::start`]: crate::server::Server::start
pub(crate) trait ConnService<B>:
    Service<Request<Body>, Response = Response<B>, Error: Into<BoxError>, Future: 'static>
    + Clone
    + 'static
{
}

impl<S, B> ConnService<B> for S
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + 'static,
    S::Error: Into<BoxError>,
    S::Future: 'static,
{
}

/// A response body a driver can send: bytes, errors it can box, owned by the driver.
pub(crate) trait ResponseBody:
    http_body::Body<Data = Bytes, Error: Into<BoxError>> + 'static
{
}

impl<B> ResponseBody for B
where
    B: http_body::Body<Data = Bytes> + 'static,
    B::Error: Into<BoxError>,
{
}
