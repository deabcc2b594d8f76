//! Connection limits and timeouts.

use std::time::Duration;

/// Size limits and timeouts that protect a worker from slow or hostile clients.
///
/// Every field has a safe default; see each one.
///
/// Change fields on [`Limits::default()`]: more may be added.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Deadline for a whole request head, counted from its first byte (or from accept for
    /// a connection's first request), not per read: a slowloris client that trickles one
    /// byte at a time is closed when it runs out. Defaults to 10 seconds.
    pub header_read_timeout: Duration,
    /// Deadline for a whole request body, counted from the end of its head. Defaults to
    /// 60 seconds.
    pub body_read_timeout: Duration,
    /// A connection whose writes make no progress for this long is closed (slow readers).
    /// Defaults to 30 seconds.
    pub send_timeout: Duration,
    /// How long an idle keep-alive connection waits for its next request. Defaults to 60
    /// seconds.
    pub keep_alive_timeout: Duration,
    /// Largest request head (request line and header fields) in bytes; larger gets 431.
    /// Defaults to 16 KiB.
    pub max_header_bytes: usize,
    /// Most header fields in a request; more gets 431. Defaults to 100.
    pub max_headers: usize,
    /// Largest request body in bytes; a larger Content-Length gets 413, and a chunked body
    /// that grows past it ends with an error and the connection is closed. Defaults to
    /// 16 MiB.
    pub max_body_bytes: u64,
    /// Most open connections per worker; at the limit a new connection takes the place
    /// of an idle keep-alive connection the worker has parked (idle for a second or more;
    /// the one nearest its keep-alive deadline is closed), and with none parked the worker
    /// stops accepting until one closes or is parked (the kernel's listen backlog holds
    /// the rest). Defaults to 10,000.
    pub max_connections: usize,
    /// Deadline for a TLS handshake on a secure listener, from accept. Defaults to 10
    /// seconds.
    pub handshake_timeout: Duration,
    /// Most concurrent streams one HTTP/2 connection may open (each is a task on the
    /// worker). Defaults to 128, nginx's `http2_max_concurrent_streams`.
    pub h2_max_concurrent_streams: u32,
    /// HTTP/2 flow-control window per stream, in bytes: how much request body a client
    /// may send before the service reads it. The window advertised is never more than
    /// `max_body_bytes` (nor less than HTTP/2's default 65,535), so that a client cannot
    /// send more than could be taken before it reads a 413. Defaults to 1 MiB.
    pub h2_stream_window: u32,
    /// HTTP/2 flow-control window per connection, in bytes. Defaults to 2 MiB.
    pub h2_connection_window: u32,
    /// Streams an HTTP/2 client may open and reset before the server has accepted them
    /// (the "rapid reset" attack, CVE-2023-44487); past it the connection gets GOAWAY.
    /// Defaults to 20.
    pub h2_max_pending_reset_streams: usize,
    /// Streams the server itself may reset for a client's protocol errors (malformed
    /// requests) before it ends the connection. Defaults to 256.
    pub h2_max_local_error_reset_streams: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(60),
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            max_body_bytes: 16 * 1024 * 1024,
            max_connections: 10_000,
            handshake_timeout: Duration::from_secs(10),
            h2_max_concurrent_streams: 128,
            h2_stream_window: 1024 * 1024,
            h2_connection_window: 2 * 1024 * 1024,
            h2_max_pending_reset_streams: 20,
            h2_max_local_error_reset_streams: 256,
        }
    }
}
