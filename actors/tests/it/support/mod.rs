//! What the test modules share.

/// The name the test harnesses (libtest, nextest) give the test `name` of
/// the module whose `module_path!()` is `module`: that path without the
/// crate's own name (`control_dir::child_holds_store_lock`), as `--exact`
/// wants it.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

/// Attempt `n` (from 1).
pub fn nz(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).expect("an attempt counts from 1")
}
