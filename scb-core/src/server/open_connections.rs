//! The open connections of the worker running on this thread (a worker is a thread of its
//! own), kept where a connection's driver can read them without a handle to its worker:
//! the HTTP/1.1 driver gives an idle connection's buffers back only when there are many.

use std::cell::Cell;

thread_local! {
    static OPEN: Cell<usize> = const { Cell::new(0) };
}

/// How many connections the worker on this thread has open.
pub(crate) fn here() -> usize {
    OPEN.with(Cell::get)
}

/// One more is open.
pub(crate) fn opened() {
    OPEN.with(|open| open.set(open.get() + 1));
}

/// One has closed.
pub(crate) fn closed() {
    OPEN.with(|open| open.set(open.get() - 1));
}
