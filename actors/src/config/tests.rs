//! The config's unit tests.

use super::*;

/// `source` resolved with `overrides` on top, as the supervisor does.
fn with_tier(source: &TomlFileSource, overrides: &Overrides) -> ResolvedConfig {
    let mut resolved = source.resolve().expect("resolve");
    overrides.merge_over(&mut resolved.config).expect("merge");
    resolved
}

fn table(text: &str) -> Table {
    toml::from_str(text).expect("test toml")
}

/// Defaults < declared file < override tier, merged deeply.
#[test]
fn tiers_merge_deeply_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("service.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"0.0.0.0:80\"\n[store]\npaths = [\"/b\"]\n",
    )
    .expect("write");
    let source = TomlFileSource::new()
        .defaults_toml(
            "name = \"svc\"\n[server]\nlisten = \"127.0.0.1:1\"\nworkers = 4\n\
             [store]\npaths = [\"/a\", \"/c\"]\n",
        )
        .declared_file(&file);
    let overrides = Overrides::new();
    overrides
        .set("server.workers", Value::Integer(8))
        .expect("set");
    let resolved = with_tier(&source, &overrides);
    assert_eq!(
        resolved.config,
        table(
            "name = \"svc\"\n[server]\nlisten = \"0.0.0.0:80\"\nworkers = 8\n\
             [store]\npaths = [\"/b\"]\n"
        )
    );
    assert_eq!(
        resolved.fingerprint,
        Some(Fingerprint::of_file(&file)),
        "the fingerprint is of the declared file"
    );
}

/// The override tier: set, get, list and unset, seen by the next resolve.
#[test]
fn overrides_set_unset_and_list() {
    let source = TomlFileSource::new().defaults(table("[a]\nb = 1\nc = 2\n"));
    let overrides = Overrides::new();
    assert_eq!(overrides.set("a.b", Value::Integer(10)).expect("set"), None);
    assert_eq!(
        overrides
            .set("a.\"x.y\"", Value::Boolean(true))
            .expect("set"),
        None
    );
    assert_eq!(
        overrides.set("a.b", Value::Integer(11)).expect("set"),
        Some(Value::Integer(10))
    );
    assert_eq!(overrides.get("a.b"), Some(Value::Integer(11)));
    assert_eq!(
        overrides.list(),
        vec![
            ("a.\"x.y\"".to_owned(), Value::Boolean(true)),
            ("a.b".to_owned(), Value::Integer(11)),
        ]
    );
    let resolved = with_tier(&source, &overrides);
    assert_eq!(
        resolved.config,
        table("[a]\nb = 11\nc = 2\n\"x.y\" = true\n")
    );
    assert_eq!(resolved.fingerprint, None, "no file declared");

    assert_eq!(overrides.unset("a.b"), Some(Value::Integer(11)));
    assert_eq!(overrides.unset("a.b"), None);
    assert_eq!(
        with_tier(&source, &overrides).config,
        table("[a]\nb = 1\nc = 2\n\"x.y\" = true\n")
    );
    for bad in ["", ".a", "a.", "a..b", "a b", "\"unterminated", "\"q\"x"] {
        assert!(
            matches!(
                overrides.set(bad, Value::Integer(1)),
                Err(ConfigError::Invalid(_))
            ),
            "{bad:?} is not a leaf"
        );
    }
}

/// A leaf replaced by a table and a table by a leaf: the higher tier wins.
#[test]
fn an_override_replaces_a_leaf_with_a_table() {
    let source = TomlFileSource::new().defaults(table("a = 1\n[t]\nx = 1\n"));
    let overrides = Overrides::new();
    overrides.set("a.b", Value::Integer(2)).expect("set");
    overrides.set("t", Value::Integer(3)).expect("set");
    assert_eq!(
        with_tier(&source, &overrides).config,
        table("t = 3\n[a]\nb = 2\n")
    );
}

/// A missing declared file fails the resolve (`declared_file` and
/// `required_file` alike), naming the path; only an optional one is an
/// empty tier.
#[test]
fn a_missing_declared_file_is_an_error_unless_optional() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("absent.toml");
    let optional = TomlFileSource::new()
        .defaults(table("a = 1\n"))
        .optional_file(&file)
        .resolve()
        .expect("optional");
    assert_eq!(optional.config, table("a = 1\n"));
    assert_eq!(optional.fingerprint, Some(Fingerprint::of_file(&file)));
    for declared in [
        TomlFileSource::new()
            .defaults(table("a = 1\n"))
            .declared_file(&file),
        TomlFileSource::new().required_file(&file),
    ] {
        match declared.resolve() {
            Err(error @ ConfigError::Missing { .. }) => {
                let message = error.to_string();
                assert!(message.contains(&file.display().to_string()), "{message}");
                assert!(message.contains("create it"), "{message}");
            }
            other => panic!("expected a missing-file error, got {other:?}"),
        }
    }
}

/// A declared path that is a directory, a FIFO, a
/// device or a socket is a typed error naming the path and what it is,
/// and opening a FIFO does not wait for a writer. The fingerprint takes
/// the same read, so it says "unreadable" too.
#[test]
fn a_config_path_that_is_not_a_regular_file_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo.toml");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
    )
    .expect("mkfifo");
    let socket = dir.path().join("socket.toml");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let subdir = dir.path().join("dir.toml");
    std::fs::create_dir(&subdir).expect("mkdir");
    let link_to_zero = dir.path().join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &link_to_zero).expect("symlink");
    for (path, kind) in [
        (&fifo, "fifo"),
        (&socket, "socket"),
        (&subdir, "directory"),
        (&PathBuf::from("/dev/zero"), "character device"),
        (&link_to_zero, "character device"),
    ] {
        match read_config_file(path) {
            Err(error @ ConfigError::NotRegular { .. }) => {
                let message = error.to_string();
                assert!(message.contains(&path.display().to_string()), "{message}");
                assert!(message.contains(kind), "{message}");
                assert!(message.contains("regular file"), "{message}");
            }
            other => panic!("{}: expected not-regular, got {other:?}", path.display()),
        }
        let fingerprint = Fingerprint::of_file(path);
        assert!(!fingerprint.is_readable(), "{}", path.display());
        let resolved = TomlFileSource::new().declared_file(path).resolve();
        assert!(
            matches!(resolved, Err(ConfigError::NotRegular { .. })),
            "an optional declared file that is a {kind} is an error too: {resolved:?}"
        );
    }
    // A symlink to a regular file is the operator's own business.
    let real = dir.path().join("real.toml");
    std::fs::write(&real, "a = 1\n").expect("write");
    let link = dir.path().join("link.toml");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    assert_eq!(
        read_config_file(&link).expect("through the link"),
        b"a = 1\n"
    );
}

/// A file over the cap is refused by its `fstat`
/// length (never read whole, never cut); a file at the cap is read.
#[test]
fn a_config_over_the_cap_is_refused_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = dir.path().join("big.toml");
    let file = std::fs::File::create(&big).expect("create");
    file.set_len(50 * 1024 * 1024).expect("a sparse 50 MB file");
    match read_config_file(&big) {
        Err(error @ ConfigError::TooLarge { .. }) => {
            let message = error.to_string();
            assert!(message.contains(&big.display().to_string()), "{message}");
            assert!(message.contains("1048576-byte"), "{message}");
            assert!(message.contains("52428800 bytes"), "{message}");
        }
        other => panic!("expected too large, got {other:?}"),
    }
    file.set_len(MAX_CONFIG_BYTES).expect("at the cap");
    assert_eq!(
        read_config_file(&big).expect("at the cap is read").len() as u64,
        MAX_CONFIG_BYTES
    );
}

/// The fingerprint changes exactly when the bytes do.
#[test]
fn fingerprint_follows_the_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("f.toml");
    std::fs::write(&file, "a = 1\n").expect("write");
    let first = Fingerprint::of_file(&file);
    assert!(first.is_readable());
    std::fs::write(&file, "a = 1\n").expect("rewrite");
    assert_eq!(Fingerprint::of_file(&file), first, "same bytes");
    std::fs::write(&file, "a = 2\n").expect("change");
    assert_ne!(Fingerprint::of_file(&file), first, "same length, new bytes");
    std::fs::write(&file, "a = 1\n\n").expect("grow");
    assert_ne!(Fingerprint::of_file(&file), first, "new length");
    assert_eq!(Fingerprint::of_bytes(b"a = 1\n"), first);
}

/// A missing or unreadable file is distinct from every content.
#[test]
fn a_missing_file_has_its_own_fingerprint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("f.toml");
    let missing = Fingerprint::of_file(&file);
    assert!(!missing.is_readable());
    assert_eq!(Fingerprint::of_file(&file), missing);
    std::fs::write(&file, "").expect("write");
    assert_ne!(Fingerprint::of_file(&file), missing, "empty is not missing");
    assert_ne!(
        Fingerprint::of_file(dir.path()),
        missing,
        "a directory is unreadable, not missing"
    );
}

/// The resolved fingerprint is of the bytes that resolve parsed, so a
/// later write is seen as a change by the supervisor.
#[test]
fn the_resolved_fingerprint_is_of_the_bytes_parsed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("f.toml");
    std::fs::write(&file, "a = 1\n").expect("write");
    let source = TomlFileSource::new().declared_file(&file).into_source();
    let resolved = source.resolve().expect("resolve");
    assert_eq!(
        resolved.fingerprint,
        Some(Fingerprint::of_bytes(b"a = 1\n"))
    );
    std::fs::write(&file, "a = 2\n").expect("write");
    assert_ne!(resolved.fingerprint, Some(Fingerprint::of_file(&file)));
}

/// A parse error names the file and toml's line and column.
#[test]
fn a_parse_error_names_the_file_and_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("broken.toml");
    std::fs::write(&file, "a = 1\nb = = 2\n").expect("write");
    let err = TomlFileSource::new()
        .declared_file(&file)
        .resolve()
        .expect_err("broken");
    let text = err.to_string();
    assert!(
        matches!(&err, ConfigError::Parse { path: Some(p), .. } if *p == file),
        "{err:?}"
    );
    assert!(text.contains("broken.toml"), "{text}");
    assert!(text.contains("line 2, column"), "{text}");

    let defaults = TomlFileSource::new()
        .defaults_toml("[x\n")
        .resolve()
        .expect_err("broken defaults");
    assert!(
        defaults
            .to_string()
            .starts_with("cannot parse the defaults: line 1"),
        "{defaults}"
    );
}

/// seed 004 `a_config_that_moves_the_data_dir_is_refused`: the error
/// names `data_dir`.
#[test]
fn a_config_that_moves_the_data_dir_is_refused() {
    let held = tempfile::tempdir().expect("tempdir");
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let config = table(&format!("data_dir = {:?}\n", elsewhere.path()));
    let err = check_data_dir(&config, held.path()).expect_err("moves");
    assert!(matches!(err, ConfigError::MovesDataDir { .. }), "{err:?}");
    assert!(err.to_string().contains("data_dir"), "{err}");

    let missing = table("data_dir = \"/nonexistent/steadfast/elsewhere\"\n");
    assert!(matches!(
        check_data_dir(&missing, held.path()),
        Err(ConfigError::MovesDataDir { .. })
    ));
    let err = check_data_dir(&table("data_dir = 7\n"), held.path()).expect_err("not a path");
    assert!(matches!(err, ConfigError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("data_dir"), "{err}");
}

/// The same directory, spelled with `.`/`..`, a symlink, or not at all.
#[test]
fn the_same_data_dir_spelled_differently_is_accepted() {
    let held = tempfile::tempdir().expect("tempdir");
    let dir = held.path().join("data");
    std::fs::create_dir(&dir).expect("mkdir");
    let spelled = dir.join("..").join(".").join("data");
    let config = table(&format!("data_dir = {:?}\n", spelled));
    check_data_dir(&config, &dir).expect("same dir");
    check_data_dir(&Table::new(), &dir).expect("no data_dir");

    let link = held.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).expect("symlink");
    check_data_dir(&table(&format!("data_dir = {:?}\n", link)), &dir).expect("symlink");

    let absent = held.path().join("not-yet");
    let config = table(&format!("data_dir = {:?}\n", absent.join("x").join("..")));
    check_data_dir(&config, &absent).expect("lexically the same");
}

/// The leaf diff: changed, added, removed, arrays as leaves, sorted.
/// A config type with a nested table, as a service declares one.
#[derive(Debug, serde::Deserialize, PartialEq)]
struct Typed {
    port: u16,
    #[serde(default)]
    server: Server,
}

#[derive(Debug, Default, serde::Deserialize, PartialEq)]
struct Server {
    #[serde(default)]
    workers: u8,
}

/// A value that does not fit names its dotted leaf and the reason.
#[test]
fn a_value_that_does_not_fit_names_its_leaf() {
    let ok = typed::<Typed>(&table("port = 80\n[server]\nworkers = 4\n"), false);
    assert_eq!(
        ok.expect("fits"),
        Typed {
            port: 80,
            server: Server { workers: 4 }
        }
    );
    let error = typed::<Typed>(&table("port = 80\n[server]\nworkers = 300\n"), false)
        .expect_err("300 is no u8");
    let ConfigError::Leaf { leaf, reason } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(leaf, "server.workers");
    assert!(reason.contains("300"), "{reason}");
    let error = typed::<Typed>(&table("port = \"many\"\n"), false).expect_err("a string");
    assert!(
        error
            .to_string()
            .starts_with("invalid config: port: invalid type"),
        "{error}"
    );
    let error = typed::<Typed>(&table(""), false).expect_err("port is required");
    assert!(
        error.to_string().contains("missing field `port`"),
        "{error}"
    );
}

/// Unknown leaves are refused (named, nested ones dotted) unless
/// allowed; `data_dir` is the supervisor's and always accepted.
#[test]
fn unknown_leaves_are_refused_unless_allowed() {
    let config = table("port = 80\nprot = 81\ndata_dir = \"/d\"\n[server]\nworkerz = 1\n");
    let error = typed::<Typed>(&config, false).expect_err("unknown leaves");
    let ConfigError::UnknownLeaves { leaves } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(leaves, &["prot", "server.workerz"]);
    assert_eq!(
        error.to_string(),
        "invalid config: unknown leaf prot, server.workerz"
    );
    assert_eq!(typed::<Typed>(&config, true).expect("allowed").port, 80);
    let with_data_dir = table("port = 80\ndata_dir = \"/d\"\n");
    assert!(typed::<Typed>(&with_data_dir, false).is_ok());
    // A table type takes everything.
    assert_eq!(typed::<Table>(&config, false).expect("any table"), config);
}

#[test]
fn changed_leaves_lists_every_changed_leaf_sorted() {
    let old = table(
        "z = 1\nsame = \"s\"\narr = [1, 2]\nscalar = 1\n\
         [server]\nlisten = \"a\"\nworkers = 4\n[gone]\nx = 1\ny = [1]\n",
    );
    let new = table(
        "z = 2\nsame = \"s\"\narr = [1, 3]\nscalar = { now = \"table\" }\nadded = true\n\
         \"odd.key\" = 1\n[server]\nlisten = \"a\"\nworkers = 5\n[empty]\n",
    );
    assert_eq!(
        changed_leaves(&old, &new),
        vec![
            "\"odd.key\"",
            "added",
            "arr",
            "empty",
            "gone.x",
            "gone.y",
            "scalar",
            "scalar.now",
            "server.workers",
            "z",
        ]
    );
    assert!(changed_leaves(&old, &old).is_empty());
    for leaf in changed_leaves(&old, &new) {
        split_leaf(&leaf).expect("every reported leaf parses back");
    }
}
