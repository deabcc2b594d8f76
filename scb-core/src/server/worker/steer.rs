//! Keeping a QUIC connection on the worker that owns it when its client's address
//! changes.
//!
//! Every worker has its own UDP socket on the port (`SO_REUSEPORT`), and the kernel picks
//! the socket of a datagram by a hash of its 4-tuple. While the client's address stays
//! the same that is always the same worker; after a NAT rebinding or a migration (a new
//! source port, a new network) the hash may name another worker, whose endpoint does not
//! know the connection and would drop its packets (the connection dies).
//!
//! So the connection IDs a worker issues say which worker it is ([`WorkerCids`]: the
//! first byte is the worker's index, the other seven random), and each worker's socket is
//! a [`SteeringSocket`]: a datagram with a short header (every packet after the
//! handshake) whose destination connection ID names another worker of the same listener
//! is handed to that worker's inbox instead of its own endpoint. Only such datagrams
//! cross threads; the handshake (long headers) always arrives on one 4-tuple, so the
//! hash keeps it on one worker.
//!
//! Written here rather than taken from a crate: quinn has no hook for datagrams of
//! unknown connections, and the kernel's own steering (an eBPF `SK_REUSEPORT` program
//! reading the connection ID, nginx's `quic_bpf`) needs `CAP_BPF`, which scb does not ask
//! for. The byte is visible on the wire: an observer learns which of the workers a
//! connection is on (about log2(workers) bits), as with any QUIC load balancer that
//! routes by connection ID without encrypting it (RFC 9000 §5.1 allows it; QUIC-LB
//! encrypts it against balancers' observers, which a single host does not have).

use std::collections::HashMap;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use quinn::udp::{EcnCodepoint, RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, ConnectionId, ConnectionIdGenerator, UdpPoller};
use tokio::sync::mpsc;

/// The length of the connection IDs workers issue: the worker's byte and seven random.
const CID_LEN: usize = 8;

/// How many datagrams a worker's inbox holds before more are dropped (as a full socket
/// buffer would drop them; QUIC retransmits).
const INBOX: usize = 1024;

/// Connection IDs that start with the worker's index.
#[derive(Debug)]
pub(super) struct WorkerCids {
    worker: u8,
    random: quinn_proto::RandomConnectionIdGenerator,
}

impl WorkerCids {
    pub(super) fn new(worker: u8) -> Self {
        Self {
            worker,
            random: quinn_proto::RandomConnectionIdGenerator::new(CID_LEN),
        }
    }
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let random = self.random.generate_cid();
        let mut bytes = [0u8; CID_LEN];
        bytes.copy_from_slice(&random[..]);
        bytes[0] = self.worker;
        ConnectionId::new(&bytes)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// A datagram handed from one worker to another.
#[derive(Debug)]
struct Datagram {
    from: SocketAddr,
    dst_ip: Option<IpAddr>,
    ecn: Option<EcnCodepoint>,
    data: Vec<u8>,
}

/// Each listener's workers' inboxes, shared by the workers of one server.
#[derive(Default)]
pub(crate) struct Peers {
    inboxes: Mutex<HashMap<SocketAddr, Vec<Option<mpsc::Sender<Datagram>>>>>,
}

impl fmt::Debug for Peers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peers").finish_non_exhaustive()
    }
}

impl Peers {
    fn register(&self, local: SocketAddr, worker: u8, tx: mpsc::Sender<Datagram>) {
        let mut inboxes = self.inboxes.lock().unwrap_or_else(PoisonError::into_inner);
        let workers = inboxes.entry(local).or_default();
        let i = usize::from(worker);
        if workers.len() <= i {
            workers.resize(i + 1, None);
        }
        workers[i] = Some(tx);
    }

    fn unregister(&self, local: SocketAddr, worker: u8, tx: &mpsc::Sender<Datagram>) {
        let mut inboxes = self.inboxes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = inboxes
            .get_mut(&local)
            .and_then(|w| w.get_mut(usize::from(worker)))
            // Only its own: a reload may have registered a new socket in its place.
            && slot.as_ref().is_some_and(|s| s.same_channel(tx))
        {
            *slot = None;
        }
    }

    fn inbox(&self, local: SocketAddr, worker: u8) -> Option<mpsc::Sender<Datagram>> {
        let inboxes = self.inboxes.lock().unwrap_or_else(PoisonError::into_inner);
        inboxes.get(&local)?.get(usize::from(worker))?.clone()
    }
}

/// A worker's UDP socket, handing datagrams of other workers' connections to them and
/// taking theirs in.
pub(super) struct SteeringSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    worker: u8,
    local: SocketAddr,
    peers: Arc<Peers>,
    tx: mpsc::Sender<Datagram>,
    /// Only this worker's endpoint polls it; the lock is never contended.
    inbox: Mutex<mpsc::Receiver<Datagram>>,
}

impl fmt::Debug for SteeringSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SteeringSocket")
            .field("worker", &self.worker)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl SteeringSocket {
    pub(super) fn new(
        inner: Arc<dyn AsyncUdpSocket>,
        worker: u8,
        peers: Arc<Peers>,
    ) -> io::Result<Self> {
        let local = inner.local_addr()?;
        let (tx, rx) = mpsc::channel(INBOX);
        peers.register(local, worker, tx.clone());
        Ok(Self {
            inner,
            worker,
            local,
            peers,
            tx,
            inbox: Mutex::new(rx),
        })
    }

    /// The worker whose connection a datagram is for, if it is another's: read from a
    /// destination connection ID the server chose. A short header's begins right after
    /// the first byte; a QUIC v1 Handshake packet's (long header, type 2) after the
    /// version and its length. Initial and 0-RTT packets may carry the client's own
    /// random ID: they stay where the kernel put them.
    fn owner(&self, datagram: &[u8]) -> Option<u8> {
        const CID: u8 = CID_LEN as u8;
        let owner = match datagram {
            [first, owner, ..] if first & 0x80 == 0 => *owner,
            [first, 0, 0, 0, 1, CID, owner, ..] if first & 0xb0 == 0xa0 => *owner,
            _ => return None,
        };
        (owner != self.worker).then_some(owner)
    }
}

impl Drop for SteeringSocket {
    fn drop(&mut self) {
        self.peers.unregister(self.local, self.worker, &self.tx);
    }
}

impl AsyncUdpSocket for SteeringSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Arc::clone(&self.inner).create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        // Datagrams other workers received for this one's connections, first.
        let handed = self
            .inbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .poll_recv(cx);
        if let Poll::Ready(Some(datagram)) = handed
            && let (Some(buf), Some(slot)) = (bufs.first_mut(), meta.first_mut())
        {
            let len = datagram.data.len().min(buf.len());
            buf[..len].copy_from_slice(&datagram.data[..len]);
            *slot = RecvMeta {
                addr: datagram.from,
                len,
                stride: len,
                ecn: datagram.ecn,
                dst_ip: datagram.dst_ip,
            };
            return Poll::Ready(Ok(1));
        }
        let n = std::task::ready!(self.inner.poll_recv(cx, bufs, meta))?;
        for (buf, slot) in bufs.iter().zip(meta.iter_mut()).take(n) {
            let received = &buf[..slot.len];
            // A GRO batch holds datagrams of one 4-tuple, so of one connection.
            let Some(owner) = self.owner(received) else {
                continue;
            };
            let Some(inbox) = self.peers.inbox(self.local, owner) else {
                // No such worker: quinn treats it as an unknown connection's packet.
                continue;
            };
            let stride = slot.stride.max(1);
            for segment in received.chunks(stride) {
                // Full: dropped, as a full socket buffer would.
                let _ = inbox.try_send(Datagram {
                    from: slot.addr,
                    dst_ip: slot.dst_ip,
                    ecn: slot.ecn,
                    data: segment.to_vec(),
                });
            }
            // Nothing left for this endpoint in it.
            slot.len = 0;
        }
        Poll::Ready(Ok(n))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket(worker: u8) -> SteeringSocket {
        let std = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        std.set_nonblocking(true).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = rt.enter();
        let inner = quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, std).unwrap();
        SteeringSocket::new(inner, worker, Arc::default()).unwrap()
    }

    #[test]
    fn datagrams_are_owned_by_the_worker_their_server_chosen_id_names() {
        let socket = socket(1);
        // Short headers: the byte after the first.
        assert_eq!(socket.owner(&[0x40, 3, 9, 9]), Some(3));
        assert_eq!(socket.owner(&[0x40, 1, 9, 9]), None, "its own");
        // A v1 Handshake packet with an 8-byte destination ID.
        assert_eq!(socket.owner(&[0xe0, 0, 0, 0, 1, 8, 2, 9]), Some(2));
        // An Initial (the client's random ID), another version, another ID length.
        assert_eq!(socket.owner(&[0xc0, 0, 0, 0, 1, 8, 2, 9]), None);
        assert_eq!(socket.owner(&[0xe0, 0x6b, 0x33, 0x43, 0xcf, 8, 2, 9]), None);
        assert_eq!(socket.owner(&[0xe0, 0, 0, 0, 1, 20, 2, 9]), None);
        assert_eq!(socket.owner(&[0x40]), None);
    }

    #[test]
    fn connection_ids_name_their_worker_and_are_otherwise_random() {
        let mut cids = WorkerCids::new(3);
        let a = cids.generate_cid();
        let b = cids.generate_cid();
        assert_eq!(a.len(), CID_LEN);
        assert_eq!((a[0], b[0]), (3, 3));
        assert_ne!(a[1..], b[1..]);
    }
}
