//! The access log's writer thread: workers leave records in per-thread buffers and never
//! wait for it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use super::record::{AccessLogFormat, Dates, Record};

/// How many records may wait for the writer thread by default: at 200 bytes a line,
/// about 3 MiB, a few seconds of a slow disk at a busy worker's rate.
const DEFAULT_QUEUE: usize = 16_384;

/// Buffers, each taken by the threads whose index falls on it: one per worker in
/// practice, so a record costs an uncontended lock, not a wake-up of the writer.
const SHARDS: usize = 16;

/// How often the writer takes what the buffers hold, at the latest: how late a line may
/// appear. A buffer half full wakes it sooner.
const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Written out once this much is formatted, and at the end of each round.
const WRITE_AT: usize = 64 * 1024;

/// Where the access log goes: a thread of its own that formats records and writes them
/// to stderr or a file, buffered.
///
/// A worker leaves each record in a buffer of its own (an uncontended lock, no system
/// call); the writer thread takes the buffers every 100 ms, or sooner when one is half
/// full, formats the records and writes them in 64 KiB batches, as nginx's `access_log
/// ... buffer= flush=` does. Waking the writer per record measured two `futex` calls and
/// a context switch per request. When the buffers are full (the disk or the pipe is
/// slower than the requests), a record is dropped and counted
/// ([`dropped`](Self::dropped) and the `scb_access_log_dropped_total` counter), and the
/// worker goes on: it never blocks on the log. Lines are written whole.
///
/// Clones share the thread. When the last clone is dropped, the thread writes what is
/// buffered and ends; nothing waits for it (a worker dropping the last clone must not
/// wait on a full pipe). Before a process exits, [`close`](Self::close) writes out what
/// is buffered, waiting a bounded time.
///
/// Written here rather than taken from `tracing-appender`: its non-blocking writer
/// queues formatted lines through a channel (a wake-up per line, and the worker
/// formats) and cannot reopen a file for logrotate.
#[derive(Clone, Debug)]
pub struct AccessLogWriter {
    shared: Arc<Shared>,
}

/// What the clones share; its drop stops the thread.
#[derive(Debug)]
struct Shared {
    buffers: Arc<Buffers>,
    format: AccessLogFormat,
    path: Option<PathBuf>,
    /// Told (by dropping its sender) when the thread ends.
    ended: Mutex<std::sync::mpsc::Receiver<()>>,
}

/// What the workers and the thread share.
#[derive(Debug)]
struct Buffers {
    shards: Box<[Mutex<Vec<Record>>]>,
    per_shard: usize,
    dropped: AtomicU64,
    reopen: AtomicBool,
    closed: AtomicBool,
    wake: Mutex<bool>,
    woken: Condvar,
}

impl Buffers {
    fn wake(&self) {
        *self.wake.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.woken.notify_one();
    }
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

/// This thread's buffer index.
fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

impl AccessLogWriter {
    /// A writer to stderr.
    ///
    /// # Errors
    ///
    /// When the thread cannot be started.
    pub fn stderr(format: AccessLogFormat) -> std::io::Result<Self> {
        Self::spawn(Output::Stderr, None, format, SHARDS, DEFAULT_QUEUE / SHARDS)
    }

    /// A writer appending to the file at `path`, created (mode 0640) if absent.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or the thread started.
    pub fn file(path: impl Into<PathBuf>, format: AccessLogFormat) -> std::io::Result<Self> {
        let path = path.into();
        let output = Output::open(&path)?;
        Self::spawn(output, Some(path), format, SHARDS, DEFAULT_QUEUE / SHARDS)
    }

    fn spawn(
        output: Output,
        path: Option<PathBuf>,
        format: AccessLogFormat,
        shards: usize,
        per_shard: usize,
    ) -> std::io::Result<Self> {
        let buffers = Arc::new(Buffers {
            shards: (0..shards).map(|_| Mutex::new(Vec::new())).collect(),
            per_shard: per_shard.max(1),
            dropped: AtomicU64::new(0),
            reopen: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            wake: Mutex::new(false),
            woken: Condvar::new(),
        });
        let theirs = Arc::clone(&buffers);
        let their_format = format.clone();
        let (ending, ended) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("scb-access-log".to_owned())
            .spawn(move || {
                let _ending = ending;
                write_loop(&theirs, output, &their_format);
            })?;
        Ok(Self {
            shared: Arc::new(Shared {
                buffers,
                format,
                path,
                ended: Mutex::new(ended),
            }),
        })
    }

    /// The format lines are written in.
    pub fn format(&self) -> &AccessLogFormat {
        &self.shared.format
    }

    /// The file written to; `None` for stderr.
    pub fn path(&self) -> Option<&Path> {
        self.shared.path.as_deref()
    }

    /// Records dropped because the buffers were full.
    pub fn dropped(&self) -> u64 {
        self.shared.buffers.dropped.load(Ordering::Relaxed)
    }

    /// Closes the file and opens its path again, before the next batch is written: for
    /// logrotate (on SIGUSR1), which renames the file and wants a new one. Nothing for
    /// stderr.
    pub fn reopen(&self) {
        self.shared.buffers.reopen.store(true, Ordering::Release);
        self.shared.buffers.wake();
    }

    /// Writes out what is buffered and stops the thread, waiting at most `timeout` for
    /// it (a full pipe may never drain). Whether everything was written. Records sent
    /// afterwards are dropped.
    pub fn close(&self, timeout: Duration) -> bool {
        let buffers = &self.shared.buffers;
        buffers.closed.store(true, Ordering::Release);
        buffers.wake();
        let ended = self
            .shared
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        matches!(
            ended.recv_timeout(timeout),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
        )
    }

    /// Leaves `record` in this thread's buffer, or drops and counts it when the buffer
    /// is full.
    pub(crate) fn send(&self, record: Record) {
        let buffers = &*self.shared.buffers;
        if buffers.closed.load(Ordering::Relaxed) {
            return;
        }
        let shard = &buffers.shards[shard_index() % buffers.shards.len()];
        let mut buffer = shard.lock().unwrap_or_else(PoisonError::into_inner);
        if buffer.len() >= buffers.per_shard {
            drop(buffer);
            buffers.dropped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(crate::metrics::ACCESS_LOG_DROPPED_TOTAL).increment(1);
            return;
        }
        buffer.push(record);
        let half_full = buffer.len() == buffers.per_shard.div_ceil(2);
        drop(buffer);
        if half_full {
            buffers.wake();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The thread writes what is buffered, then ends.
        self.buffers.closed.store(true, Ordering::Release);
        self.buffers.wake();
    }
}

fn write_loop(buffers: &Buffers, mut output: Output, format: &AccessLogFormat) {
    let mut text = String::with_capacity(WRITE_AT + 4096);
    let mut dates = Dates::default();
    let mut taken = Vec::new();
    let mut failed = false;
    let mut write = |text: &mut String, output: &mut Output| {
        if text.is_empty() {
            return;
        }
        match output.write_all(text.as_bytes()) {
            Ok(()) => failed = false,
            Err(e) => {
                // Once per run of failures: the log of the log must not flood either.
                if !failed {
                    tracing::error!("access log: cannot write: {e}");
                }
                failed = true;
            }
        }
        text.clear();
    };
    loop {
        {
            let mut woken = buffers.wake.lock().unwrap_or_else(PoisonError::into_inner);
            if !*woken && !buffers.closed.load(Ordering::Acquire) {
                woken = buffers
                    .woken
                    .wait_timeout(woken, FLUSH_INTERVAL)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            *woken = false;
        }
        // Read before the buffers are taken: what was sent before the close is written.
        let closing = buffers.closed.load(Ordering::Acquire);
        if buffers.reopen.swap(false, Ordering::AcqRel)
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
        for shard in &buffers.shards {
            // Swapped with the vector taken last time, so capacities go round and the
            // workers' pushes do not allocate.
            std::mem::swap(
                &mut *shard.lock().unwrap_or_else(PoisonError::into_inner),
                &mut taken,
            );
            for record in taken.drain(..) {
                record.write(format, &mut dates, &mut text);
                if text.len() >= WRITE_AT {
                    write(&mut text, &mut output);
                }
            }
        }
        write(&mut text, &mut output);
        if closing {
            return;
        }
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

    fn record(n: u64) -> Record {
        let mut r = Record::new(
            std::time::SystemTime::UNIX_EPOCH,
            None,
            http::Method::GET,
            http::Version::HTTP_11,
            [None, None, Some(&b"/"[..]), None, None],
            0,
        );
        r.status = Some(http::StatusCode::OK);
        r.bytes = n;
        r
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
        let writer = AccessLogWriter::spawn(output, None, AccessLogFormat::Combined, 1, 4).unwrap();
        // The thread takes at most one batch of four and then waits in its first write;
        // the buffer holds four more: of a thousand records, the rest are dropped, and
        // none of the calls waits (if one did, this test would never end).
        for n in 0..1000 {
            writer.send(record(n));
        }
        let dropped = writer.dropped();
        assert!(dropped >= 1000 - 8, "{dropped}");
        assert!(dropped < 1000);
        open.send(()).unwrap();
        assert!(writer.close(Duration::from_secs(10)), "not written out");
        let lines = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        let kept = lines.lines().count();
        assert_eq!(kept as u64, 1000 - dropped, "{lines}");
        assert!(lines.lines().all(|l| l.contains("\"GET / HTTP/1.1\" 200 ")));
    }

    #[test]
    fn close_gives_up_on_an_output_that_never_drains() {
        let (_never, gate) = channel();
        let output = Output::Test(Box::new(Gate {
            open: gate,
            written: Arc::default(),
            waited: false,
        }));
        let writer = AccessLogWriter::spawn(output, None, AccessLogFormat::Combined, 1, 4).unwrap();
        writer.send(record(1));
        assert!(!writer.close(Duration::from_millis(200)));
        // Dropping the last clone does not wait either.
        drop(writer);
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
        assert!(writer.close(Duration::from_secs(10)));
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
