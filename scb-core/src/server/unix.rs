//! Listeners on Unix domain sockets: for a front proxy or a local client on the same
//! machine, with file permissions instead of addresses deciding who may connect.
//!
//! Binding is race-free for the path: the socket is bound under a temporary name beside
//! it, given its mode and owner, and renamed over the path, so nobody ever connects to a
//! socket with the wrong permissions, and a stale file from a crashed run is replaced in
//! the same step. A path where another process still accepts is refused (as a TCP port in
//! use is), unless the listeners are being taken over ([`Server::replace_unix_sockets`],
//! for `scb run --upgrade`).
//!
//! [`Server::replace_unix_sockets`]: super::Server::replace_unix_sockets

use std::io;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use socket2::{Domain, SockAddr, Socket, Type};

/// Listen backlog, as for TCP listeners.
const BACKLOG: i32 = 4096;

/// A Unix domain socket to listen on: its path, and the mode and owner of the socket file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnixListen {
    path: PathBuf,
    mode: Option<u32>,
    owner: Option<u32>,
    group: Option<u32>,
}

impl UnixListen {
    /// A socket at `path` (absolute, in a directory that exists).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            mode: None,
            owner: None,
            group: None,
        }
    }

    /// The socket file's permission bits (connecting needs write permission), such as
    /// `0o660` for the owner and the group. Defaults to what the process's umask leaves.
    #[must_use]
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode & 0o7777);
        self
    }

    /// The socket file's owner (a user id). Changing it needs privilege. Defaults to the
    /// process's user.
    #[must_use]
    pub fn owner(mut self, uid: u32) -> Self {
        self.owner = Some(uid);
        self
    }

    /// The socket file's group (a group id). Defaults to the process's group.
    #[must_use]
    pub fn group(mut self, gid: u32) -> Self {
        self.group = Some(gid);
        self
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Which file a bound socket is: removed at the end only if the path still names it (a
/// process that took the path over owns it then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

/// Binds `listen`. `replace_live`: take the path even from a process accepting on it.
pub(crate) fn bind(listen: &UnixListen, replace_live: bool) -> io::Result<(UnixListener, FileId)> {
    let path = &listen.path;
    let named =
        |e: io::Error| io::Error::new(e.kind(), format!("binding unix:{}: {e}", path.display()));
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(named(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket",
            )));
        }
        Ok(_) if !replace_live => match probe(path) {
            Probe::Stale => {}
            Probe::Live => {
                return Err(named(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "address already in use (another process accepts on it)",
                )));
            }
            Probe::Unknown(e) => {
                return Err(named(io::Error::new(
                    e.kind(),
                    format!("cannot tell whether another process accepts on it: {e}"),
                )));
            }
        },
        // A stale socket of an earlier run (or one being taken over), or nothing: the
        // rename below replaces it.
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(named(e)),
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(named)?;
    socket
        .bind(&SockAddr::unix(&tmp).map_err(named)?)
        .map_err(named)?;
    let placed = (|| {
        if let Some(mode) = listen.mode {
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        }
        if listen.owner.is_some() || listen.group.is_some() {
            std::os::unix::fs::chown(&tmp, listen.owner, listen.group)?;
        }
        socket.listen(BACKLOG)?;
        socket.set_nonblocking(true)?;
        std::fs::rename(&tmp, path)?;
        let meta = std::fs::symlink_metadata(path)?;
        Ok(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    })();
    match placed {
        Ok(id) => Ok((socket.into(), id)),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(named(e))
        }
    }
}

/// What a socket file found at a listener's path is.
enum Probe {
    /// Nobody accepts on it: left by a run that ended.
    Stale,
    /// A process accepts on it (or its queue is full).
    Live,
    /// The connect failed otherwise (no permission, say): never replaced on a guess.
    Unknown(io::Error),
}

/// Connects to the socket at `path` without blocking (a full queue would block a plain
/// connect).
fn probe(path: &Path) -> Probe {
    let connect = || -> io::Result<()> {
        let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
        socket.set_nonblocking(true)?;
        socket.connect(&SockAddr::unix(path)?)
    };
    match connect() {
        Ok(()) => Probe::Live,
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Probe::Stale,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Probe::Live,
        Err(e) => Probe::Unknown(e),
    }
}

/// Gives a kept socket file a changed mode or owner (a reload), if the path still names
/// the socket bound as `id`: never through a symlink or onto someone else's file.
pub(crate) fn restyle(listen: &UnixListen, id: FileId) -> io::Result<()> {
    let ours = std::fs::symlink_metadata(&listen.path).is_ok_and(|meta| {
        meta.file_type().is_socket()
            && FileId {
                dev: meta.dev(),
                ino: meta.ino(),
            } == id
    });
    if !ours {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "unix:{}: the path no longer names the socket scb bound (removed or replaced); \
                 restart to bind it again",
                listen.path.display()
            ),
        ));
    }
    if let Some(mode) = listen.mode {
        std::fs::set_permissions(&listen.path, std::fs::Permissions::from_mode(mode))?;
    }
    if listen.owner.is_some() || listen.group.is_some() {
        std::os::unix::fs::chown(&listen.path, listen.owner, listen.group)?;
    }
    Ok(())
}

/// Removes the socket file at `path` if it is still the one bound as `id`.
pub(crate) fn remove(path: &Path, id: FileId) {
    let ours = std::fs::symlink_metadata(path).is_ok_and(|meta| {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        } == id
    });
    if ours && let Err(e) = std::fs::remove_file(path) {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove the socket file");
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("scb-unix-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_stale_socket_is_replaced_a_live_one_refused_and_a_file_kept() {
        let dir = dir("stale");
        let path = dir.join("s.sock");
        let listen = UnixListen::new(&path).mode(0o600);
        let (first, id) = bind(&listen, false).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Live: refused, unless taken over.
        let e = bind(&listen, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        // Stale (the listener gone, the file left): replaced.
        drop(first);
        let (second, second_id) = bind(&listen, false).unwrap();
        assert_ne!(id, second_id);
        UnixStream::connect(&path).expect("the new socket accepts");
        // Someone else's path now: not removed by the old id.
        remove(&path, id);
        assert!(path.exists());
        remove(&path, second_id);
        assert!(!path.exists());
        drop(second);
        // A regular file is never replaced.
        std::fs::write(&path, "data").unwrap();
        let e = bind(&listen, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "data");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_reload_never_restyles_through_a_path_that_is_no_longer_ours() {
        let dir = dir("restyle");
        let path = dir.join("s.sock");
        let (_socket, id) = bind(&UnixListen::new(&path), false).unwrap();
        restyle(&UnixListen::new(&path).mode(0o600), id).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Replaced by a symlink to someone's file: refused, and the file untouched.
        let victim = dir.join("victim");
        std::fs::write(&victim, "x").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        assert!(restyle(&UnixListen::new(&path).mode(0o666), id).is_err());
        assert_eq!(
            std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
            0o644
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_taken_over_path_moves_to_the_new_socket() {
        let dir = dir("take");
        let path = dir.join("s.sock");
        let listen = UnixListen::new(&path);
        let (old, _) = bind(&listen, false).unwrap();
        let (new, _) = bind(&listen, true).unwrap();
        let _client = UnixStream::connect(&path).unwrap();
        new.set_nonblocking(false).unwrap();
        new.accept().expect("the new listener has the connection");
        old.set_nonblocking(true).unwrap();
        assert_eq!(
            old.accept().unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "the old one does not"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
