//! steadfast's integration tests, as one test binary (`it`): the whole
//! stack (the library, tokio, rustls, tarpc) is linked once for all of
//! them, not once per file.
//!
//! Each file in this directory is one module, named for what it tests, and
//! its tests are `MODULE::TEST`: `cargo test -p steadfast --test it --
//! crash::` or `cargo nextest run -p steadfast --test it -E
//! 'test(/^crash::/)'` runs one module's tests. The fixtures the modules
//! share are in `support/` (`crate::support::common` for in-process
//! supervisors, `processes` for the example binaries and `steadfastctl` as
//! children, `pki` for TLS certificates).
//!
//! To add tests: write `tests/it/NAME.rs` and add `mod NAME;` below. A file
//! directly under `tests/` would be a binary of its own again (`.ci/run`
//! refuses one).
//!
//! Under `cargo test` every module's tests share one process, in parallel:
//! no test may depend on the process's cwd, umask, env, rlimits, signal
//! handlers or panic hook being its own. A test that measures its whole
//! process runs itself alone in a re-run of this binary
//! (`support::common::alone_in_process`).

#![allow(clippy::disallowed_methods)] // the tests time real processes and sockets; the daemon they simulate is under the rule in the libraries

mod support;

mod apply_nonblocking;
mod attempts;
mod budget;
mod children;
mod config_files;
mod control;
mod control_hostile;
mod control_methods;
mod control_tcp;
// The TLS transport exists with the cargo feature `tls` (a workspace
// build has it, through steadfastctl).
#[cfg(feature = "tls")]
mod control_tls;
mod crash;
mod ctl;
mod ctl_cli;
mod ctl_codes;
mod ctl_output;
mod daemon;
mod daemon_cli;
mod daemon_sim;
mod drain_owns;
mod durability;
mod enospc;
mod fds;
mod files;
mod fleet;
mod group_commit;
mod kubernetes;
mod kvd_compaction;
mod kvd_limits;
mod logs;
mod managers;
mod metrics;
mod notify;
mod operator_view;
mod preflight;
mod renamed;
mod replace;
mod replace_stop;
mod serve_frameworks;
mod status_record;
mod supervision;
mod supervisor;
mod timing;
mod typed_config;
mod walkthrough;
