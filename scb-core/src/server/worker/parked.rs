//! A worker's parked connections: plain HTTP/1.1 keep-alive connections waiting for their
//! next request with no task of their own.
//!
//! Why our own and not a task per connection, as everywhere else: on a crowded worker most
//! connections are idle keep-alive ones, and a waiting task holds its future (a kilobyte:
//! the service, the driver's state, its timer and shutdown futures), tokio's task cell and
//! the allocations around them, where nginx keeps a few hundred bytes of connection state.
//! A parked connection is an entry of a slab (its socket, its peer, the settings it
//! started with, its keep-alive deadline, its place in the worker's count) and a small
//! waker: one task per worker waits for all of them, and a connection whose socket becomes
//! readable is served by a new task from where it left off ([`conn::resume`]).
//!
//! Readiness is tokio's (`TcpStream::poll_read_ready` with the entry's own waker), so
//! what wakes a parked connection is the same edge that wakes a task: no polling of idle
//! sockets. Deadlines are kept to the second: the task looks through the entries once a
//! second while there are any and closes those whose keep-alive deadline has passed. A
//! timer wheel (tokio-util's `DelayQueue`, tried first) cost each entry 64 more bytes and
//! each park and resume an insert and a removal; a keep-alive timeout needs no finer
//! precision, and a look through ten thousand entries is a few tens of microseconds a
//! second.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use http::{Request, Response};
use slab::Slab;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};
use tower::Service;

use crate::Body;
use crate::server::conn::{self, ConnService, Parked, ResponseBody};
use crate::server::shutdown::Trigger;

/// How often the parked connections are looked through for passed keep-alive deadlines:
/// a parked connection is closed at most this long after its deadline.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The parked connections of one worker, and the service their next requests go to. `G`
/// is what a connection holds while it is open (its place in the worker's count), moved
/// with it from task to slab and back.
pub(super) struct ParkedConnections<S, G> {
    svc: S,
    state: RefCell<State<G>>,
    woken: Arc<Woken>,
    shutdown: Trigger,
    /// Told each time a connection is parked: an accept loop at its connection limit
    /// waits for one to close.
    parked_one: Notify,
}

struct State<G> {
    entries: Slab<Entry<G>>,
    /// Tells an entry apart from an earlier one under the same slab key.
    serial: u64,
}

impl<S, G> std::fmt::Debug for ParkedConnections<S, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParkedConnections")
            .field("parked", &self.state.borrow().entries.len())
            .finish_non_exhaustive()
    }
}

/// One parked connection.
struct Entry<G> {
    parked: Parked,
    guard: G,
    serial: u64,
}

/// The slab keys (with serials) of parked connections whose sockets became readable, and
/// the waker of the task that serves them (also woken when the first entry arrives, for
/// it to start looking through them).
#[derive(Debug, Default)]
struct Woken {
    keys: Mutex<Vec<(usize, u64)>>,
    task: AtomicWaker,
}

/// The waker a parked connection's socket is polled with: says which entry it is.
struct EntryWaker {
    key: usize,
    serial: u64,
    woken: Arc<Woken>,
}

impl Wake for EntryWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((self.key, self.serial));
        self.woken.task.wake();
    }
}

impl<S, B, G> ParkedConnections<S, G>
where
    // The response type named again: it is what ties `B` to `S` in an impl block.
    S: ConnService<B> + Service<Request<Body>, Response = Response<B>>,
    B: ResponseBody,
    G: 'static,
{
    /// Starts the worker's task that waits for the parked connections: call on the
    /// worker's `LocalSet`. The task ends with the worker, or at shutdown once it has
    /// closed them.
    pub(super) fn start(svc: S, shutdown: Trigger) -> Rc<Self> {
        let parked = Rc::new(Self {
            svc,
            state: RefCell::new(State {
                entries: Slab::new(),
                serial: 0,
            }),
            woken: Arc::default(),
            shutdown,
            parked_one: Notify::new(),
        });
        tokio::task::spawn_local(Rc::clone(&parked).wait());
        parked
    }

    /// Spawns a connection's task: `serving` until it ends or returns the connection to
    /// be parked, `guard` held meanwhile (and parked with it).
    pub(super) fn spawn<F>(self: &Rc<Self>, serving: Pin<Box<F>>, guard: G)
    where
        F: Future<Output = Option<Parked>> + 'static,
    {
        let this = Rc::clone(self);
        tokio::task::spawn_local(async move {
            if let Some(parked) = serving.await {
                this.park(parked, guard);
            }
        });
    }

    /// Parks a connection until its socket is readable (then serves it again), its
    /// keep-alive deadline passes or shutdown begins (then closes it).
    fn park(self: &Rc<Self>, parked: Parked, guard: G) {
        if self.shutdown.is_fired() {
            return;
        }
        let mut state = self.state.borrow_mut();
        state.serial = state.serial.wrapping_add(1);
        let (key, serial) = (state.entries.vacant_key(), state.serial);
        let waker = Waker::from(Arc::new(EntryWaker {
            key,
            serial,
            woken: Arc::clone(&self.woken),
        }));
        let polled = parked
            .stream
            .poll_read_ready(&mut Context::from_waker(&waker));
        if polled.is_ready() {
            // Input (or its end) arrived since the driver last read: served again at
            // once; a failed socket is read by the driver, which closes it.
            drop(state);
            return self.resume(parked, guard);
        }
        if state.entries.is_empty() {
            // The task starts looking through the entries for deadlines.
            self.woken.task.wake();
        }
        state.entries.insert(Entry {
            parked,
            guard,
            serial,
        });
        drop(state);
        self.parked_one.notify_waiters();
    }

    /// Whether any connection is parked.
    pub(super) fn any(&self) -> bool {
        !self.state.borrow().entries.is_empty()
    }

    /// Completes when a connection is parked after this call.
    pub(super) fn parked_one(&self) -> tokio::sync::futures::Notified<'_> {
        self.parked_one.notified()
    }

    /// Closes the parked connection nearest its keep-alive deadline, to make room for a
    /// new one accepted by a worker at its connection limit; false when none is parked.
    /// An idle keep-alive connection may be closed at any time (RFC 9112 §9.5: its client
    /// retries on a new connection), and one idle for a second or more is the least
    /// missed.
    pub(super) fn close_oldest(&self) -> bool {
        let entry = {
            let mut state = self.state.borrow_mut();
            let oldest = state
                .entries
                .iter()
                .min_by_key(|(_, e)| e.parked.keep_alive_until)
                .map(|(key, _)| key);
            oldest.map(|key| state.entries.remove(key))
        };
        // Dropped after the borrow ends, as at shutdown.
        entry.is_some()
    }

    /// Serves a connection again, in a task of its own.
    fn resume(self: &Rc<Self>, parked: Parked, guard: G) {
        let serving = Box::pin(conn::resume(parked, self.svc.clone()));
        self.spawn(serving, guard);
    }

    /// The worker's task: serves the connections whose sockets became readable, closes
    /// those whose keep-alive deadline passed, and all of them at shutdown.
    async fn wait(self: Rc<Self>) {
        let shutdown = self.shutdown.clone();
        let mut sweep = Box::pin(tokio::time::sleep(SWEEP_EVERY));
        let mut sweeping = false;
        tokio::select! {
            () = shutdown.fired() => {}
            () = std::future::poll_fn(|cx| self.poll(cx, sweep.as_mut(), &mut sweeping)) => {}
        }
        // Dropped after the borrow ends: a guard's drop wakes the worker's drain.
        let entries = std::mem::take(&mut self.state.borrow_mut().entries);
        drop(entries);
    }

    fn poll(
        self: &Rc<Self>,
        cx: &mut Context<'_>,
        mut sweep: Pin<&mut Sleep>,
        sweeping: &mut bool,
    ) -> Poll<()> {
        self.woken.task.register(cx.waker());
        let woken = std::mem::take(
            &mut *self
                .woken
                .keys
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (key, serial) in woken {
            let entry = {
                let mut state = self.state.borrow_mut();
                if state.entries.get(key).is_none_or(|e| e.serial != serial) {
                    // Closed before this wake was seen.
                    continue;
                }
                state.entries.remove(key)
            };
            self.resume(entry.parked, entry.guard);
        }
        if *sweeping && sweep.as_mut().poll(cx).is_ready() {
            *sweeping = false;
            self.close_expired(Instant::now());
        }
        if !*sweeping && !self.state.borrow().entries.is_empty() {
            sweep.as_mut().reset(Instant::now() + SWEEP_EVERY);
            *sweeping = true;
            // Registers the timer's waker; it cannot have fired already.
            let _ = sweep.as_mut().poll(cx);
        }
        Poll::Pending
    }

    /// Closes the parked connections whose keep-alive deadline is past.
    fn close_expired(&self, now: Instant) {
        let expired: Vec<Entry<G>> = {
            let mut state = self.state.borrow_mut();
            let keys: Vec<usize> = state
                .entries
                .iter()
                .filter(|(_, e)| e.parked.keep_alive_until <= now)
                .map(|(key, _)| key)
                .collect();
            keys.into_iter()
                .map(|key| state.entries.remove(key))
                .collect()
        };
        // Dropped after the borrow ends, as at shutdown.
        drop(expired);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::net::SocketAddr;
    use std::rc::Rc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};

    use super::ParkedConnections;
    use crate::Body;
    use crate::connection::ConnectInfo;
    use crate::server::Limits;
    use crate::server::conn::{ConnCtx, Parked};
    use crate::server::shutdown::Trigger;

    /// Says whether the connection holding it has closed.
    struct Guard(Rc<Cell<bool>>);

    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.set(true);
        }
    }

    /// Answers with the client address the request was stamped with.
    fn service() -> impl tower::Service<
        http::Request<Body>,
        Response = http::Response<Body>,
        Error = std::convert::Infallible,
        Future = impl Future + 'static,
    > + Clone
    + 'static {
        tower::service_fn(|req: http::Request<Body>| async move {
            let remote = req.extensions().get::<ConnectInfo>().map(|i| i.remote);
            Ok(http::Response::new(Body::from(format!("{remote:?}"))))
        })
    }

    /// A connected pair: the client, and the server's side, read until it would block,
    /// to be parked as a connection of `client` (an address no socket has, as a PROXY header gives) under `limits`.
    async fn parked_pair(
        limits: Limits,
        shutdown: &Trigger,
        client: SocketAddr,
    ) -> (TcpStream, Parked) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (connected, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let keep_alive_until = tokio::time::Instant::now() + limits.keep_alive_timeout;
        let ctx = Rc::new(ConnCtx {
            limits,
            request_id_header: crate::request_id::X_REQUEST_ID,
            shutdown: shutdown.clone(),
            metrics: None,
        });
        let stream = accepted.unwrap().0;
        // As the driver leaves a connection it parks: its last read found nothing (which
        // clears the socket's readiness: a new one starts as readable).
        let read = stream.try_read(&mut [0u8; 1]);
        assert!(read.is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock));
        let parked = Parked {
            stream: stream.into(),
            info: ConnectInfo {
                remote: client,
                local: addr,
                secure: false,
            },
            ctx,
            keep_alive_until,
        };
        (connected.unwrap(), parked)
    }

    /// Reads from `client` until `want` has arrived (or the connection closes).
    async fn read_until(client: &mut TcpStream, want: &str) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&got).contains(want) {
            let n = client.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(got).unwrap()
    }

    /// Reads `client` to its end (bounded, so that a connection left open fails the test
    /// instead of hanging it); how many bytes came first.
    async fn closed_within_10s(client: &mut TcpStream) -> usize {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest));
        read.await.expect("still open after 10 s").unwrap()
    }

    fn run_local(test: impl Future<Output = ()>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&runtime, test);
    }

    #[test]
    fn a_parked_connection_is_served_again_when_its_client_writes() {
        run_local(async {
            let shutdown = Trigger::new();
            let set = ParkedConnections::start(service(), shutdown.clone());
            let client_addr: SocketAddr = "192.0.2.7:4242".parse().unwrap();
            let (mut client, parked) = parked_pair(Limits::default(), &shutdown, client_addr).await;
            let closed = Rc::new(Cell::new(false));
            set.park(parked, Guard(Rc::clone(&closed)));
            assert_eq!(set.state.borrow().entries.len(), 1);

            // Two requests in a row: the first wakes it, the second finds it served by
            // its new task (not crowded here: it stays in that task).
            for _ in 0..2 {
                client
                    .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                    .await
                    .unwrap();
                let answer = read_until(&mut client, "192.0.2.7:4242").await;
                assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            }
            assert_eq!(set.state.borrow().entries.len(), 0);
            assert!(
                !closed.get(),
                "the connection's guard went before it closed"
            );
            drop(client);
            let closing = async {
                while !closed.get() {
                    tokio::task::yield_now().await;
                }
            };
            tokio::time::timeout(Duration::from_secs(10), closing)
                .await
                .expect("still open 10 s after its client closed");
        });
    }

    #[test]
    fn a_parked_connection_whose_input_is_already_there_is_served_at_once() {
        run_local(async {
            let shutdown = Trigger::new();
            let set = ParkedConnections::start(service(), shutdown.clone());
            let client_addr: SocketAddr = "192.0.2.8:1".parse().unwrap();
            let (mut client, parked) = parked_pair(Limits::default(), &shutdown, client_addr).await;
            client
                .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                .await
                .unwrap();
            // Readable before it is parked: never entered.
            parked
                .stream
                .registered()
                .unwrap()
                .readable()
                .await
                .unwrap();
            set.park(parked, Guard(Rc::new(Cell::new(false))));
            assert_eq!(set.state.borrow().entries.len(), 0);
            let answer = read_until(&mut client, "192.0.2.8:1").await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        });
    }

    #[test]
    fn a_parked_connection_is_closed_when_its_keep_alive_timeout_passes() {
        run_local(async {
            let shutdown = Trigger::new();
            let set = ParkedConnections::start(service(), shutdown.clone());
            let limits = Limits {
                keep_alive_timeout: Duration::from_millis(200),
                ..Limits::default()
            };
            let client_addr: SocketAddr = "192.0.2.9:1".parse().unwrap();
            let (mut client, parked) = parked_pair(limits.clone(), &shutdown, client_addr).await;
            let closed = Rc::new(Cell::new(false));
            set.park(parked, Guard(Rc::clone(&closed)));
            // A second one, parked with a longer timeout, outlives it.
            let (_other_client, other) =
                parked_pair(Limits::default(), &shutdown, client_addr).await;
            let other_closed = Rc::new(Cell::new(false));
            set.park(other, Guard(Rc::clone(&other_closed)));

            assert_eq!(closed_within_10s(&mut client).await, 0);
            assert!(closed.get());
            assert!(!other_closed.get());
            assert_eq!(set.state.borrow().entries.len(), 1);
        });
    }

    #[test]
    fn shutdown_closes_every_parked_connection_and_refuses_more() {
        run_local(async {
            let shutdown = Trigger::new();
            let set = ParkedConnections::start(service(), shutdown.clone());
            let client_addr: SocketAddr = "192.0.2.10:1".parse().unwrap();
            let mut clients = Vec::new();
            let mut closed = Vec::new();
            for _ in 0..3 {
                let (client, parked) = parked_pair(Limits::default(), &shutdown, client_addr).await;
                let flag = Rc::new(Cell::new(false));
                set.park(parked, Guard(Rc::clone(&flag)));
                clients.push(client);
                closed.push(flag);
            }
            shutdown.fire();
            for client in &mut clients {
                assert_eq!(closed_within_10s(client).await, 0);
            }
            assert!(closed.iter().all(|c| c.get()));
            // Parked after shutdown began: closed at once.
            let (mut late, parked) = parked_pair(Limits::default(), &shutdown, client_addr).await;
            let flag = Rc::new(Cell::new(false));
            set.park(parked, Guard(Rc::clone(&flag)));
            assert!(flag.get());
            assert_eq!(closed_within_10s(&mut late).await, 0);
        });
    }
}
