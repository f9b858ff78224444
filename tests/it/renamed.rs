//! The names renamed to say what they are still resolve, deprecated, for
//! one release (CHANGELOG, "A surface that explains itself"): each old
//! name is the new type itself, not a copy, so code written against it
//! keeps compiling with a warning. Nothing else in the repository uses an
//! old name.

#![allow(deprecated)]

use std::any::TypeId;

/// Whether `A` and `B` are one type.
fn same<A: 'static, B: 'static>() -> bool {
    TypeId::of::<A>() == TypeId::of::<B>()
}

#[test]
fn the_old_names_are_the_new_types() {
    use steadfast::protocol::replacement;
    use steadfast::{children, control, daemon};

    assert!(same::<steadfast::Made<u8>, steadfast::Resource<u8>>());
    assert!(same::<daemon::Ended, daemon::ExitReason>());
    assert!(same::<replacement::Ended, replacement::TransactionEnd>());
    assert!(same::<control::Fingerprint, control::CertFingerprint>());
    assert!(same::<children::Kind, children::ChildKind>());
    assert!(same::<children::Exit, children::ChildExit>());
    assert!(same::<children::Op, children::ChildOp>());
    #[cfg(feature = "cli")]
    assert!(same::<daemon::cli::Started, daemon::cli::Built>());
}

#[test]
fn the_old_names_still_build_and_match() {
    let made = steadfast::Made::new("listener", "127.0.0.1:7071", 7_u8);
    assert_eq!((made.record.kind.as_str(), made.output), ("listener", 7));
    assert!(matches!(
        steadfast::children::Exit::Normal,
        steadfast::children::ChildExit::Normal,
    ));
    assert_eq!(steadfast::children::Op::Restart.as_str(), "restart");
    assert_eq!(steadfast::children::Kind::Task.as_str(), "task");
    let ended = steadfast::daemon::Ended::Halt;
    assert!(matches!(ended, steadfast::daemon::Ended::Halt));
    assert_eq!(ended.code(), steadfast::daemon::EXIT_HALT);
    let hex = "ab".repeat(32);
    assert_eq!(
        steadfast::control::Fingerprint::from_hex(&hex),
        steadfast::control::CertFingerprint::from_hex(&hex),
    );
}

/// `Prepared::start` is `Prepared::build` under its old name.
#[cfg(feature = "cli")]
#[test]
fn prepared_start_is_build() {
    use std::path::Path;

    use steadfast::TomlFileSource;
    use steadfast::daemon::cli::{Built, CliError, Prepared};
    use steadfast::supervisor::SupervisorBuilder;

    type Build = fn(&Path, TomlFileSource) -> SupervisorBuilder;
    let _start: fn(Prepared, Build) -> Result<Built, CliError> = Prepared::start;
}
