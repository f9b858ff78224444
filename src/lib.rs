//! steadfast keeps a daemon up above its runtime.
//!
//! The daemon process stays alive while its runtime (an open store, bound
//! listeners, workers) is booted in phases, watched, drained, restarted with
//! backoff, held on bad config and replaced, all decided by one pure state
//! machine ([`protocol::lifecycle`]).
//!
//! # Layout
//! - [`protocol`]: the pure core (crate `steadfast-protocol`).
//! - [`actors`]: the supervision tree (crate `steadfast-actors`).

pub use steadfast_actors as actors;
pub use steadfast_protocol as protocol;
