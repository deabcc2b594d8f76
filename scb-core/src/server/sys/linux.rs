use std::fs::File;
use std::io;
use std::time::Duration;

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::body::FileShrunk;

/// The most one `sendfile` call is asked to move; the kernel caps it near 2 GiB anyway, and
/// a bounded count keeps one huge file from starving the worker's other connections.
const MAX_SENDFILE_CHUNK: u64 = 1 << 20;

/// Raises the soft open-file limit to the hard limit: each connection is a descriptor and
/// the common soft default (1024) is far below what one worker can serve.
pub(crate) fn raise_nofile_limit() {
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %e, "could not raise the open-file limit");
        }
    }
}

/// Sends `len` bytes of `file` from `offset` to `stream` with `sendfile(2)`.
///
/// `sendfile` has no non-blocking mode for the file side: a page-cache miss blocks the
/// worker, the same trade nginx makes. A file that shrank under us ends with `FileShrunk`
/// and the caller closes the connection (the response can no longer be completed).
pub(crate) async fn send_file(
    stream: &TcpStream,
    file: &File,
    mut offset: u64,
    len: u64,
    send_timeout: Duration,
) -> io::Result<()> {
    let end = offset + len;
    while offset < end {
        let count = (end - offset).min(MAX_SENDFILE_CHUNK) as usize;
        let result = stream.try_io(Interest::WRITABLE, || {
            rustix::fs::sendfile(stream, file, Some(&mut offset), count).map_err(io::Error::from)
        });
        match result {
            Ok(0) => {
                return Err(io::Error::other(FileShrunk {
                    missing: end - offset,
                }));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::time::timeout(send_timeout, stream.writable())
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "send timeout"))??;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
