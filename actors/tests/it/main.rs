//! steadfast-actors' integration tests, as one test binary (`it`): the
//! crate and its dependencies are linked once for all of them.
//!
//! Each file in this directory is one module, and its tests are
//! `MODULE::TEST` (`cargo test -p steadfast-actors --test it --
//! control_dir::`). To add tests: write `actors/tests/it/NAME.rs` and add
//! `mod NAME;` below; what modules share goes in `support/`. A file
//! directly under `actors/tests/` would be a binary of its own again
//! (`.ci/run` refuses one).
//!
//! Under `cargo test` every module's tests share one process, in parallel:
//! no test may depend on the process's cwd, umask, env, rlimits or signal
//! handlers being its own; one that changes them runs itself alone in a
//! re-run of this binary (`store_exhaustion`, `control_dir`'s lock
//! holders).

#![allow(clippy::disallowed_methods)] // the tests time real threads and files; the actors they test are under the rule in the library

mod support;

mod config;
mod control_dir;
mod replace_runner;
mod replacement_actor;
mod sim;
mod store_exhaustion;
