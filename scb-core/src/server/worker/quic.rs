//! A worker's QUIC endpoint beside one of its TCP listeners: its own UDP socket on the
//! same address (`SO_REUSEPORT`, so every worker has one and the kernel spreads clients
//! across them by their address), and the loop that accepts connections on it.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use socket2::{Protocol, Type};

use super::{ConnGuard, Current};
use crate::server::Http3;
use crate::server::Limits;
use crate::server::conn::{self, ConnService, ResponseBody};

/// A UDP socket on `addr` that every worker binds (`SO_REUSEPORT`).
pub(super) fn reuseport_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    super::reuseport_socket(addr, Type::DGRAM, Protocol::UDP).map(Into::into)
}

/// `http3`'s server configuration with the transport `limits` set.
pub(super) fn server_config(http3: &Http3, limits: &Limits) -> quinn::ServerConfig {
    let mut config = http3.config.clone();
    let mut transport = quinn::TransportConfig::default();
    transport.max_concurrent_bidi_streams(limits.h2_max_concurrent_streams.into());
    // The client's control, QPACK encoder and decoder streams, and a few more it may
    // open and ignore (grease): unidirectional streams carry no requests.
    transport.max_concurrent_uni_streams(8u32.into());
    transport.max_idle_timeout(quinn::IdleTimeout::try_from(limits.keep_alive_timeout).ok());
    config.transport_config(Arc::new(transport));
    config
}

/// Worker `worker`'s endpoint on `socket`, handshaking with `http3`: its connection IDs
/// name it, and its socket hands other workers' datagrams to them (see [`super::steer`]).
/// Past 255 workers the rest issue random IDs and do without.
pub(super) fn endpoint(
    socket: std::net::UdpSocket,
    http3: &Http3,
    limits: &Limits,
    worker: usize,
    peers: &Arc<super::QuicPeers>,
) -> std::io::Result<quinn::Endpoint> {
    let runtime = Arc::new(quinn::TokioRuntime);
    let socket = quinn::Runtime::wrap_udp_socket(&*runtime, socket)?;
    let mut config = quinn::EndpointConfig::default();
    let socket: Arc<dyn quinn::AsyncUdpSocket> = match u8::try_from(worker) {
        Ok(index) if index < u8::MAX => {
            config.cid_generator(move || Box::new(super::steer::WorkerCids::new(index)));
            Arc::new(super::steer::SteeringSocket::new(
                socket,
                index,
                Arc::clone(peers),
            )?)
        }
        _ => socket,
    };
    quinn::Endpoint::new_with_abstract_socket(
        config,
        Some(server_config(http3, limits)),
        socket,
        runtime,
    )
}

/// Accepts QUIC connections on `endpoint` until shutdown, within the worker's connection
/// limit (past it, a new connection is refused: the client may try another server). When
/// more handshakes are in progress than the listener's [`Http3::retry_above`], a client
/// whose address is not validated yet is sent a stateless Retry instead.
pub(super) async fn accept_loop<S, B>(
    endpoint: quinn::Endpoint,
    local: SocketAddr,
    svc: S,
    current: Rc<Current>,
    options: Rc<RefCell<crate::server::ListenOptions>>,
) where
    S: ConnService<B>,
    B: ResponseBody,
{
    let connections = &current.connections;
    let handshaking = Rc::new(Cell::new(0usize));
    loop {
        let ctx = Rc::clone(&current.ctx.borrow());
        let incoming = tokio::select! {
            biased;
            () = ctx.shutdown.fired() => {
                // No new handshakes; the connections open drain (GOAWAY) on their own.
                endpoint.set_server_config(None);
                return;
            }
            incoming = endpoint.accept() => incoming,
        };
        let Some(incoming) = incoming else {
            return;
        };
        let ctx = Rc::clone(&current.ctx.borrow());
        if connections.open() >= ctx.limits.max_connections.max(1) {
            incoming.refuse();
            continue;
        }
        let Some((retry_above, certificate)) = options
            .borrow()
            .http3
            .as_ref()
            .map(|h| (h.retry_above, h.client_certificate))
        else {
            incoming.refuse();
            continue;
        };
        if handshaking.get() >= retry_above && !incoming.remote_address_validated() {
            if incoming.may_retry() {
                // Stateless: nothing is kept for it; the client comes back with a token.
                let _ = incoming.retry();
            } else {
                incoming.ignore();
            }
            continue;
        }
        connections.opened();
        let guard = ConnGuard(Rc::clone(connections));
        let svc = svc.clone();
        let handshake = Handshaking::start(&handshaking);
        tokio::task::spawn_local(async move {
            let _guard = guard;
            Box::pin(conn::serve_quic(
                incoming,
                local,
                certificate,
                handshake,
                svc,
                ctx,
            ))
            .await;
        });
    }
}

/// One handshake in progress on a worker, counted until it ends either way (dropped).
pub(crate) struct Handshaking(Rc<Cell<usize>>);

impl Handshaking {
    fn start(count: &Rc<Cell<usize>>) -> Self {
        count.set(count.get() + 1);
        Self(Rc::clone(count))
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}
