//! steadfast's supervision tree: one ractor actor a file.
//!
//! The actors perform the effects that the pure machines of
//! `steadfast-protocol` hand back; none of them decides a transition. The
//! tree itself arrives with the supervisor issue; for now this crate re-exports
//! the core it builds on.

pub use steadfast_protocol as protocol;

pub mod config;
pub mod config_watcher;
pub mod control_dir;
pub mod store;
