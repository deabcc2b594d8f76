//! One HTTP/1.1 connection served in memory by scb's driver or by hyper, for the
//! differential fuzz target: the same bytes in, each server's bytes out.

use std::cell::RefCell;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body_util::{BodyExt as _, Full};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};

use crate::server::conn::{ConnCtx, Peer as ConnPeer, Start, serve_h1};
use crate::server::shutdown::Trigger;
use crate::server::{ConnectInfo, Limits, SecureIo};

/// Which server answers an [`exchange`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// scb's HTTP/1.1 driver, as a plain listener's connections run it (HTTP/2 prior
    /// knowledge detection off: hyper's HTTP/1 server has none to compare with).
    Scb,
    /// hyper's HTTP/1 server with its defaults but one: `half_close`, so that a request
    /// whose client has finished sending still gets its answer (on a socket, the answer
    /// usually wins that race; in memory, the end of the stream always does).
    Hyper,
}

/// How long one exchange may take before it counts as a hang. Everything is in memory:
/// an honest exchange takes microseconds.
const HANG: Duration = Duration::from_secs(10);

thread_local! {
    static RUNTIME: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

/// Serves one connection whose client writes `parts` one after another, then closes its
/// sending side, and returns every byte the server wrote until it closed.
///
/// Both servers run the same handler: it reads the whole body and answers
/// `200` with `handled METHOD URI [BODY]\n` (`<body error>` when reading failed).
///
/// # Panics
///
/// When the server has not closed the connection after 10 s: a hang.
pub fn exchange(peer: Peer, parts: &[&[u8]]) -> Vec<u8> {
    RUNTIME.with_borrow_mut(|rt| {
        let rt = rt.get_or_insert_with(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime")
        });
        rt.block_on(async {
            tokio::time::timeout(HANG, run(peer, parts))
                .await
                .unwrap_or_else(|_| panic!("{peer:?} hung on {parts:?}"))
        })
    })
}

async fn run(peer: Peer, parts: &[&[u8]]) -> Vec<u8> {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let serve = async move {
        match peer {
            Peer::Scb => serve_scb(server).await,
            Peer::Hyper => serve_hyper(server).await,
        }
    };
    let talk = async move {
        for part in parts {
            // The server may have refused and closed already: that is an answer too.
            if client.write_all(part).await.is_err() {
                break;
            }
        }
        let _ = client.shutdown().await;
        let mut out = Vec::new();
        let _ = client.read_to_end(&mut out).await;
        out
    };
    tokio::join!(serve, talk).1
}

async fn serve_scb(io: DuplexStream) {
    let addr = SocketAddr::from(([127, 0, 0, 1], 80));
    let info = ConnectInfo {
        remote: addr,
        local: addr,
        secure: false,
    };
    let ctx = Rc::new(ConnCtx {
        limits: Limits::default(),
        request_id_header: HeaderName::from_static("x-request-id"),
        shutdown: Trigger::new(),
        metrics: None,
    });
    let io: Box<dyn SecureIo> = Box::new(io);
    let mut svc = tower::service_fn(handled::<crate::Body>);
    let start = Start::New { detect_h2: false };
    serve_h1(io, start, false, &ConnPeer::plain(info), &mut svc, &ctx).await;
}

async fn serve_hyper(io: DuplexStream) {
    let _ = hyper::server::conn::http1::Builder::new()
        .half_close(true)
        .serve_connection(
            hyper_util::rt::TokioIo::new(io),
            hyper::service::service_fn(handled::<hyper::body::Incoming>),
        )
        .await;
}

/// The handler of both servers: says what it received.
async fn handled<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
{
    let head = format!("{} {}", req.method(), req.uri());
    let body = match req.into_body().collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => "<body error>".to_owned(),
    };
    Ok(Response::new(Full::new(Bytes::from(format!(
        "handled {head} [{body}]\n"
    )))))
}
