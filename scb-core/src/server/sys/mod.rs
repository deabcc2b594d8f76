//! Operating-system calls of the server runtime, one portable function per operation.
//!
//! The Linux versions (rustix) live in `linux.rs`; `portable.rs` keeps other Unix systems
//! compiling with plain std calls.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(not(target_os = "linux"))]
mod portable;

#[cfg(target_os = "linux")]
pub(crate) use linux::{cork, raise_nofile_limit, send_file};
#[cfg(not(target_os = "linux"))]
pub(crate) use portable::{cork, raise_nofile_limit, send_file};
