use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::time::Duration;

use crate::body::FileShrunk;

pub(crate) fn raise_nofile_limit() {}

/// No `TCP_DEFER_ACCEPT` here: connections are accepted as they complete.
pub(crate) fn set_defer_accept(
    _listener: std::os::fd::BorrowedFd<'_>,
    _seconds: u32,
) -> io::Result<()> {
    Ok(())
}

/// No `TCP_CORK` here: segments go as they are written.
pub(crate) fn cork(_socket: std::os::fd::BorrowedFd<'_>, _corked: bool) {}

/// Portable stand-in for `sendfile(2)`: positional reads and ordinary writes.
pub(crate) async fn send_file(
    stream: super::PlainSocket<'_>,
    region: &crate::FileRegion,
    send_timeout: Duration,
) -> io::Result<()> {
    let file: &File = region.file();
    let mut offset = region.offset();
    let len = region.len();
    let end = offset + len;
    let mut buf = vec![0u8; (len as usize).min(crate::body::FILE_CHUNK_SIZE)];
    while offset < end {
        let want = ((end - offset) as usize).min(buf.len());
        let n = file.read_at(&mut buf[..want], offset)?;
        if n == 0 {
            return Err(io::Error::other(FileShrunk {
                missing: end - offset,
            }));
        }
        // The last bytes are read: a write during any read changed the stamp.
        if offset + n as u64 == end {
            region.verify()?;
        }
        let mut written = 0;
        while written < n {
            stream.writable().await?;
            match stream.try_write(&buf[written..n]) {
                Ok(m) => written += m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    tokio::time::timeout(send_timeout, stream.writable())
                        .await
                        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "send timeout"))??;
                }
                Err(e) => return Err(e),
            }
        }
        offset += n as u64;
    }
    Ok(())
}
