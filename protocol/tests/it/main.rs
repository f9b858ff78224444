//! steadfast-protocol's integration tests, as one test binary (`it`): the
//! spec tables (the lifecycle's, the children's), the property and
//! exhaustive tests of the machines and the journal framing.
//!
//! Each file in this directory is one module, and its tests are
//! `MODULE::TEST` (`cargo test -p steadfast-protocol --test it --
//! spec_table::`). To add tests: write `protocol/tests/it/NAME.rs` and add
//! `mod NAME;` below; what modules share goes in `support/`. A proptest
//! regressions file sits beside its module
//! (`journal_framing.proptest-regressions`), where proptest looks for it. A
//! file directly under `protocol/tests/` would be a binary of its own again
//! (`.ci/run` refuses one).
//!
//! `journal_framing` sets this binary's global allocator (a counting one,
//! which only counts on threads that ask it to): every module's tests run
//! on it.

mod support;

mod children_props;
mod children_table;
mod journal_framing;
mod journal_resume;
mod lifecycle_props;
mod replacement_exhaustive;
mod spec_table;
