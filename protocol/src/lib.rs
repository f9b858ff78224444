//! steadfast's pure core.
//!
//! Everything a steadfast daemon *decides* is decided here, by value: the
//! lifecycle machine ([`lifecycle`]), the replacement ordering
//! ([`replacement`]) and the journal's record framing ([`journal`]). Nothing
//! in this crate reads a clock, touches a file or a socket, or spawns a task:
//! every moment arrives on an event as a [`Timestamp`], and every effect is
//! data handed back for the actors (crate `steadfast-actors`) to perform.
//!
//! # Layout
//! - [`lifecycle`]: states, events, effects, refusals and the pure
//!   [`lifecycle::step`]; the table it is held to is `spec/lifecycle.md`
//!   (checked by `tests/it/spec_table.rs`).
//! - [`replacement`]: the upgrade transaction's ordering as a pure machine.
//! - [`journal`]: the control directory journal's record types and framing.
//! - [`history`]: attempts folded from journal records, and the
//!   re-initialization confirmation token.
//! - `control` (feature `rpc`, on by default): the control plane's tarpc
//!   service trait and its wire values (`spec/control.md`).
//! - [`status_record`]: the framing of the status record the daemon keeps
//!   for `steadfastctl status` to read without a round trip.
//! - [`time`]: [`Timestamp`], the only notion of time the core has.
//!
//! The invariant this crate exists to hold is its purity: `cargo tree -p
//! steadfast-protocol --no-default-features -e normal` names neither tokio nor
//! ractor, and `.ci/run` checks it.

#![warn(unreachable_pub)]

pub mod children;
pub mod command;
#[cfg(feature = "rpc")]
pub mod control;
pub mod history;
pub mod journal;
pub mod lifecycle;
pub mod replacement;
pub mod snapshot;
pub mod status_record;
pub mod time;

pub use time::Timestamp;

/// Attempt `n` (from 1), for tests.
#[cfg(test)]
pub(crate) fn nz(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).expect("an attempt counts from 1")
}
