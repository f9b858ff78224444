//! The control plane (`spec/control.md`): a tarpc service over a Unix
//! socket, so an operator (`steadfastctl`) or a script drives a daemon.
//!
//! - [`server`]: [`serve_unix`] serves a [`crate::SupervisorHandle`] on a
//!   socket (mode 0600, peer uid checked before any frame is read).
//! - [`client`]: [`ControlClient`] calls it.
//! - [`codec`]: the frames both sides use (bincode 1.3.3, 1 MiB limit,
//!   deadlines clamped on the server).
//!
//! The service trait and its wire values live in the pure core,
//! [`steadfast_protocol::control`]. Checked end to end by
//! `tests/control.rs` and `tests/ctl.rs`.

pub mod client;
pub mod codec;
pub mod server;

pub use client::{ClientError, ControlClient};
pub use server::{ControlError, ServerGuard, ServerLimits, serve_unix, serve_unix_with};
pub use steadfast_protocol::control::{ControlRefusal, WireSnapshot};
