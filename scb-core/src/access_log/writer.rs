//! The access log's writer thread: workers hand it records through a bounded queue and
//! never wait for it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};

use super::record::{AccessLogFormat, Record};

/// How many records may wait for the writer thread by default: at 200 bytes a line,
/// about 3 MiB, a few seconds of a slow disk at a busy worker's rate.
const DEFAULT_QUEUE: usize = 16_384;

/// Written out once this much is buffered, and whenever the queue runs empty.
const FLUSH_AT: usize = 64 * 1024;

/// Where the access log goes: a thread of its own that formats records and writes them
/// to stderr or a file, buffered.
///
/// Workers hand it records through a bounded queue: when the queue is full (the disk or
/// the pipe is slower than the requests), the record is dropped and counted
/// ([`dropped`](Self::dropped) and the `scb_access_log_dropped_total` counter), and the
/// worker goes on; it never blocks on the log. Lines are written whole, in batches: one
/// `write(2)` per batch when the queue empties or 64 KiB have piled up.
///
/// Clones share the thread. When the last clone is dropped, the thread writes what is
/// queued, and the drop waits for it.
///
/// Written here rather than taken from `tracing-appender`: its non-blocking writer
/// queues formatted lines (so the worker formats) and cannot reopen a file for
/// logrotate; this one queues the record and formats on its own thread.
#[derive(Clone, Debug)]
pub struct AccessLogWriter {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    tx: Option<SyncSender<Message>>,
    dropped: AtomicU64,
    /// Shared with the thread alone (not through `Shared`, whose last drop must happen
    /// off the thread, since it joins it).
    reopen: Arc<AtomicBool>,
    format: AccessLogFormat,
    path: Option<PathBuf>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Debug)]
enum Message {
    Record(Box<Record>),
    /// Nothing but a wake-up, for a reopen asked while the thread waits.
    Wake,
}

/// Where the lines go.
enum Output {
    Stderr,
    File(PathBuf, std::fs::File),
    #[cfg(test)]
    Test(Box<dyn Write + Send>),
}

impl Output {
    fn open(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(path)?;
        Ok(Self::File(path.to_owned(), file))
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Stderr => std::io::stderr().lock().write_all(bytes),
            Self::File(_, file) => file.write_all(bytes),
            #[cfg(test)]
            Self::Test(out) => out.write_all(bytes),
        }
    }
}

impl AccessLogWriter {
    /// A writer to stderr.
    ///
    /// # Errors
    ///
    /// When the thread cannot be started.
    pub fn stderr(format: AccessLogFormat) -> std::io::Result<Self> {
        Self::spawn(Output::Stderr, None, format, DEFAULT_QUEUE)
    }

    /// A writer appending to the file at `path`, created (mode 0640) if absent.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or the thread started.
    pub fn file(path: impl Into<PathBuf>, format: AccessLogFormat) -> std::io::Result<Self> {
        let path = path.into();
        let output = Output::open(&path)?;
        Self::spawn(output, Some(path), format, DEFAULT_QUEUE)
    }

    fn spawn(
        output: Output,
        path: Option<PathBuf>,
        format: AccessLogFormat,
        queue: usize,
    ) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel(queue);
        let reopen = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            tx: Some(tx),
            dropped: AtomicU64::new(0),
            reopen: Arc::clone(&reopen),
            format,
            path,
            thread: Mutex::new(None),
        });
        let thread = std::thread::Builder::new()
            .name("scb-access-log".to_owned())
            .spawn(move || write_loop(&rx, output, format, &reopen))?;
        *shared.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        Ok(Self { shared })
    }

    /// The format lines are written in.
    pub fn format(&self) -> AccessLogFormat {
        self.shared.format
    }

    /// The file written to; `None` for stderr.
    pub fn path(&self) -> Option<&Path> {
        self.shared.path.as_deref()
    }

    /// Records dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Closes the file and opens its path again, after what is queued now: for logrotate
    /// (on SIGUSR1), which renames the file and wants a new one. Nothing for stderr.
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Release);
        if let Some(tx) = &self.shared.tx {
            // A full queue means the thread is busy and checks the flag after this batch.
            let _ = tx.try_send(Message::Wake);
        }
    }

    /// Hands `record` to the thread, or drops and counts it when the queue is full.
    pub(crate) fn send(&self, record: Box<Record>) {
        let Some(tx) = &self.shared.tx else { return };
        match tx.try_send(Message::Record(record)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(crate::metrics::ACCESS_LOG_DROPPED_TOTAL).increment(1);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has written what is queued.
        drop(self.tx.take());
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

fn write_loop(
    rx: &Receiver<Message>,
    mut output: Output,
    format: AccessLogFormat,
    reopen: &AtomicBool,
) {
    let mut buf = String::with_capacity(FLUSH_AT + 4096);
    let mut failed = false;
    let mut flush = |buf: &mut String, output: &mut Output| {
        if buf.is_empty() {
            return;
        }
        match output.write_all(buf.as_bytes()) {
            Ok(()) => failed = false,
            Err(e) => {
                // Once per run of failures: the log of the log must not flood either.
                if !failed {
                    tracing::error!("access log: cannot write: {e}");
                }
                failed = true;
            }
        }
        buf.clear();
    };
    while let Ok(first) = rx.recv() {
        // Before the batch: a record sent after `reopen` returned goes to the new file.
        if reopen.swap(false, Ordering::AcqRel)
            && let Output::File(path, _) = &output
        {
            match Output::open(path) {
                Ok(reopened) => output = reopened,
                Err(e) => tracing::error!(
                    "access log: cannot reopen {}, writing on to the old file: {e}",
                    path.display()
                ),
            }
        }
        let mut next = Some(first);
        while let Some(message) = next {
            if let Message::Record(record) = message {
                record.write(format, &mut buf);
                if buf.len() >= FLUSH_AT {
                    flush(&mut buf, &mut output);
                }
            }
            next = rx.try_recv().ok();
        }
        flush(&mut buf, &mut output);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{Receiver, channel};

    use super::*;

    /// A `Write` whose first write waits until the test lets it go.
    struct Gate {
        open: Receiver<()>,
        written: Arc<Mutex<Vec<u8>>>,
        waited: bool,
    }

    impl Write for Gate {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if !self.waited {
                self.waited = true;
                let _ = self.open.recv();
            }
            self.written.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn record(n: u64) -> Box<Record> {
        Box::new(Record {
            time: std::time::SystemTime::UNIX_EPOCH,
            request_id: None,
            client: None,
            host: None,
            method: http::Method::GET,
            uri: http::Uri::from_static("/"),
            version: http::Version::HTTP_11,
            status: Some(http::StatusCode::OK),
            bytes: n,
            duration: std::time::Duration::ZERO,
            user_agent: None,
            referer: None,
            route: None,
            upstream: None,
        })
    }

    #[test]
    fn a_stuck_output_drops_and_counts_and_never_blocks_the_sender() {
        let (open, gate) = channel();
        let written = Arc::new(Mutex::new(Vec::new()));
        let output = Output::Test(Box::new(Gate {
            open: gate,
            written: Arc::clone(&written),
            waited: false,
        }));
        let writer = AccessLogWriter::spawn(output, None, AccessLogFormat::Combined, 4).unwrap();
        // The thread takes at most one batch and then waits in its first write; the queue
        // holds four: of a thousand records, most are dropped, and none of the calls
        // waits (if one did, this test would never end).
        for n in 0..1000 {
            writer.send(record(n));
        }
        let dropped = writer.dropped();
        assert!(dropped >= 1000 - 4 - 1000 / 2, "{dropped}");
        assert!(dropped < 1000);
        open.send(()).unwrap();
        // Dropping the last clone writes what was queued and waits for it.
        drop(writer);
        let lines = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        let kept = lines.lines().count();
        assert_eq!(kept as u64, 1000 - dropped, "{lines}");
        assert!(lines.lines().all(|l| l.contains("\"GET / HTTP/1.1\" 200 ")));
    }

    #[test]
    fn reopen_starts_a_new_file_after_a_rename() {
        let dir = std::env::temp_dir().join(format!("scb-access-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let writer = AccessLogWriter::file(&path, AccessLogFormat::Json).unwrap();
        writer.send(record(1));
        let rotated = dir.join("access.log.1");
        // Wait for the first line to reach the file, as logrotate's delay would.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_to_string(&path)
            .unwrap_or_default()
            .is_empty()
        {
            assert!(std::time::Instant::now() < deadline, "nothing written");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::fs::rename(&path, &rotated).unwrap();
        writer.reopen();
        writer.send(record(2));
        drop(writer);
        let old = std::fs::read_to_string(&rotated).unwrap();
        let new = std::fs::read_to_string(&path).unwrap();
        assert!(old.contains("\"bytes\":1,"), "{old}");
        assert!(
            new.contains("\"bytes\":2,") && !new.contains("\"bytes\":1,"),
            "{new}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
