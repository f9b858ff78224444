//! What the test modules share.

pub mod common;
pub mod pki;
pub mod processes;

/// The name the test harnesses (libtest, nextest) give the test `name` of
/// the module whose `module_path!()` is `module`: that path without the
/// crate's own name (`crash::chain`), as `--exact` wants it.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}
