//! Binary upgrade: the running `scb run` hands its listening sockets to a new one over a
//! Unix socket (`[server] upgrade_socket`), the new one starts serving on them, and the
//! old one drains and exits, as nginx's USR2 and pingora's graceful upgrade do.
//!
//! Only the listeners are handed over, once: every worker's socket, so that connections
//! waiting in any of their queues are accepted by the new process. Connections and
//! requests stay where they are; the old process finishes them.
//!
//! The conversation, on one connection to the old process's upgrade socket:
//!
//! ```text
//! new → old   LISTENERS\n
//! old → new   <n>\n + n descriptors (SCM_RIGHTS), repeated, then 0\n
//! new → old   SERVING\n            (once its own listeners accept)
//! ```
//!
//! The new process may die at any point before `SERVING`; the old one then logs it and
//! goes on as if nothing happened.

use std::io::{IoSlice, IoSliceMut, Write as _};
use std::mem::MaybeUninit;
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rustix::fd::AsFd as _;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Descriptors per message, below the kernel's `SCM_MAX_FD` (253).
const PER_MESSAGE: usize = 200;

/// The old side: the upgrade socket the running process listens on.
pub(crate) struct UpgradeSocket {
    listener: tokio::net::UnixListener,
}

impl UpgradeSocket {
    /// Listens at `path`, replacing what is there: a socket left by a process that is
    /// gone, or the one of the process this one upgraded (which needs it no more).
    pub(crate) fn bind(path: &Path) -> anyhow::Result<Self> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("removing {}", path.display()));
            }
        }
        let listener = tokio::net::UnixListener::bind(path)
            .with_context(|| format!("listening on the upgrade socket {}", path.display()))?;
        // Only this user may take the listeners.
        rustix::fs::chmod(path, rustix::fs::Mode::from_raw_mode(0o600))
            .with_context(|| format!("chmod {}", path.display()))?;
        Ok(Self { listener })
    }

    /// The next new process asking for the listeners.
    pub(crate) async fn next(&self) -> anyhow::Result<Asking> {
        use tokio::io::AsyncReadExt as _;
        let (mut stream, _) = self.listener.accept().await?;
        let pid = rustix::net::sockopt::socket_peercred(&stream)
            .map_or(0, |cred| cred.pid.as_raw_nonzero().get());
        let mut ask = [0u8; 10];
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            stream.read_exact(&mut ask),
        )
        .await
        .context("upgrade: the new process said nothing")??;
        anyhow::ensure!(
            &ask == b"LISTENERS\n",
            "upgrade: the new process asked {ask:?}"
        );
        tracing::info!(pid, "upgrade: a new process asks for the listeners");
        Ok(Asking { stream, pid })
    }
}

/// A new process that asked for the listeners.
pub(crate) struct Asking {
    stream: tokio::net::UnixStream,
    pid: i32,
}

impl Asking {
    /// Hands `sockets` over; the future resolves to the new process's pid once it says it
    /// serves, or `None` when it goes away first. Building its stacks may take it a
    /// while, so the future has no deadline: the caller keeps handling signals meanwhile.
    pub(crate) fn hand_over(
        self,
        sockets: &[TcpListener],
    ) -> anyhow::Result<impl std::future::Future<Output = Option<i32>> + use<>> {
        use tokio::io::AsyncReadExt as _;
        let Self { mut stream, pid } = self;
        // A few small messages into an empty socket buffer: they do not block.
        for chunk in sockets.chunks(PER_MESSAGE) {
            send_fds(&stream, chunk)?;
        }
        send_fds(&stream, &[])?;
        tracing::info!(
            pid,
            sockets = sockets.len(),
            "upgrade: listeners handed over"
        );
        Ok(async move {
            let mut said = [0u8; 8];
            let serving = stream.read_exact(&mut said).await.is_ok() && &said == b"SERVING\n";
            if serving {
                Some(pid)
            } else {
                tracing::warn!(pid, "upgrade: the new process went away; serving on");
                None
            }
        })
    }
}

fn send_fds(stream: &impl rustix::fd::AsFd, sockets: &[TcpListener]) -> std::io::Result<()> {
    let count = format!("{}\n", sockets.len());
    let fds: Vec<_> = sockets.iter().map(|s| s.as_fd()).collect();
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other(
            "the descriptors do not fit one message",
        ));
    }
    let sent = rustix::net::sendmsg(
        stream,
        &[IoSlice::new(count.as_bytes())],
        &mut control,
        SendFlags::empty(),
    )?;
    if sent != count.len() {
        return Err(std::io::Error::other("short write on the upgrade socket"));
    }
    Ok(())
}

/// The new side: the listeners taken from the running process, and the connection on
/// which to tell it that this one serves.
pub(crate) struct TakenOver {
    stream: UnixStream,
    path: PathBuf,
}

/// Asks the process listening at `path` for its listening sockets.
pub(crate) fn take_over(path: &Path) -> anyhow::Result<(TakenOver, Vec<TcpListener>)> {
    let mut stream = UnixStream::connect(path)
        .with_context(|| format!("connecting to the upgrade socket {}", path.display()))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    stream.write_all(b"LISTENERS\n")?;
    let mut sockets = Vec::new();
    loop {
        let mut data = [0u8; 16];
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(PER_MESSAGE))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &stream,
            &mut [IoSliceMut::new(&mut data)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        anyhow::ensure!(
            got.bytes > 0,
            "the running process closed the upgrade socket"
        );
        let before = sockets.len();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                sockets.extend(fds.map(TcpListener::from));
            }
        }
        let count: usize = std::str::from_utf8(&data[..got.bytes])
            .ok()
            .and_then(|t| t.trim_end().parse().ok())
            .context("the running process sent no count")?;
        anyhow::ensure!(
            sockets.len() - before == count,
            "the running process announced {count} sockets and sent {}",
            sockets.len() - before
        );
        if count == 0 {
            break;
        }
    }
    Ok((
        TakenOver {
            stream,
            path: path.to_owned(),
        },
        sockets,
    ))
}

impl TakenOver {
    /// Tells the old process that this one serves: it drains and exits.
    pub(crate) fn serving(mut self) -> anyhow::Result<()> {
        self.stream
            .write_all(b"SERVING\n")
            .with_context(|| format!("telling the old process at {}", self.path.display()))
    }
}
