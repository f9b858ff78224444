//! The one parse against clap's whole command.

use clap::Parser as _;

use super::*;

/// `parse_from` and the whole command, on `form` (after the program's
/// name): the same `Cli`, or the same refusal, rendered alike.
fn same_as_the_whole(form: &[&str]) {
    let argv: Vec<std::ffi::OsString> = std::iter::once("steadfastctl")
        .chain(form.iter().copied())
        .map(Into::into)
        .collect();
    match (parse_from(argv.clone()), Cli::try_parse_from(argv)) {
        (Ok(one), Ok(whole)) => assert_eq!(format!("{one:?}"), format!("{whole:?}"), "{form:?}"),
        (Err(one), Err(whole)) => {
            assert_eq!(one.kind(), whole.kind(), "{form:?}");
            assert_eq!(one.to_string(), whole.to_string(), "{form:?}");
        }
        (one, whole) => panic!("{form:?}: parse {one:?}, whole {whole:?}"),
    }
}

/// Whether `form` parses in one lean parse (without the whole command).
fn lean_accepts(form: &[&str]) -> bool {
    use clap::{CommandFactory, FromArgMatches};
    let argv: Vec<std::ffi::OsString> = std::iter::once("steadfastctl")
        .chain(form.iter().copied())
        .map(Into::into)
        .collect();
    lean_command(&Cli::command(), &argv).is_some_and(|mut lean| {
        lean.try_get_matches_from_mut(argv)
            .ok()
            .is_some_and(|mut m| Cli::from_arg_matches_mut(&mut m).is_ok())
    })
}

/// The common lines a script or a poll runs again and again (each
/// subcommand with its own flags, each global flag in each spelling before
/// the subcommand, between it and its own flags, and last, and several at
/// once in several orders) parse as the whole command parses them, in one
/// lean parse.
#[test]
fn the_common_lines_parse_once_as_the_whole_command_does() {
    let commands: &[&[&str]] = &[
        &["status"],
        &["probe", "ready"],
        &["probe", "live"],
        &["start"],
        &["start", "--wait"],
        &["restart"],
        &["restart", "--wait"],
        &["restart", "--force"],
        &["restart", "--force", "--wait"],
        &["restart", "--wait", "--force"],
        &["retry"],
        &["retry", "--wait"],
        &["stop"],
        &["stop", "--hold"],
        &["start", "--strict"],
        &["start", "--wait", "--strict"],
        &["start", "--strict", "--wait"],
        &["stop", "--strict"],
        &["stop", "--hold", "--strict"],
        &["stop", "--strict", "--hold"],
        &["start", "--no-block"],
        &["restart", "--no-block", "--force"],
        &["stop", "--no-block"],
        &["stop", "--hold", "--no-block"],
    ];
    let globals: &[&[&str]] = &[
        &["--data-dir", "/d"],
        &["--data-dir=/d =d"],
        &["--data-dir", "status"],
        &["--socket", "/s"],
        &["--socket=s"],
        &["--json"],
        &["--utc"],
        &["-v"],
        &["--verbose"],
        &["--timeout", "2.5"],
        &["--timeout=7"],
        &["--timeout", "1e3"],
        &["--timeout", "+3"],
        &["--timeout=0.001"],
        &["--timeout", "1e9"],
    ];
    // One of each kind, in each order of the four kinds.
    let sets: &[&[usize]] = &[
        &[0, 5, 6, 7, 9],
        &[3, 6, 8, 10, 5],
        &[11, 8, 1, 5, 6],
        &[6, 4, 5, 7, 11],
        &[2, 9, 7, 5],
    ];
    // A global flag goes before the subcommand (0), between its name
    // and its own flags or argument (1), or last (2).
    fn place<'a>(command: &[&'a str], at: usize, flags: &[&[&'a str]]) -> Vec<&'a str> {
        let flags = flags.iter().flat_map(|f| f.iter().copied());
        let (name, own) = command.split_at(1);
        match at {
            0 => flags.chain(command.iter().copied()).collect(),
            1 => name
                .iter()
                .copied()
                .chain(flags)
                .chain(own.iter().copied())
                .collect(),
            _ => command.iter().copied().chain(flags).collect(),
        }
    }
    let mut accepted = Vec::<Vec<&str>>::new();
    for command in commands {
        accepted.push(command.to_vec());
        for flag in globals {
            for at in 0..3 {
                accepted.push(place(command, at, &[flag]));
            }
        }
        for set in sets {
            let flags: Vec<&[&str]> = set.iter().map(|&i| globals[i]).collect();
            for at in 0..3 {
                accepted.push(place(command, at, &flags));
            }
            // Split: half before the name, half last.
            let (first, last) = flags.split_at(flags.len() / 2);
            let mut line: Vec<&str> = first.iter().flat_map(|f| f.iter().copied()).collect();
            line.extend_from_slice(command);
            line.extend(last.iter().flat_map(|f| f.iter().copied()));
            accepted.push(line);
        }
    }
    for form in &accepted {
        same_as_the_whole(form);
        assert!(lean_accepts(form), "{form:?} took the whole command");
    }
    // A path that is not UTF-8 is a path all the same.
    let odd = <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(b"/d\xff".to_vec());
    let argv: Vec<std::ffi::OsString> = vec![
        "steadfastctl".into(),
        "--data-dir".into(),
        odd,
        "status".into(),
    ];
    let one = parse_from(argv.clone()).expect("a non-UTF-8 path");
    let whole = Cli::try_parse_from(argv).expect("a non-UTF-8 path");
    assert_eq!(format!("{one:?}"), format!("{whole:?}"));
}

/// Every other line (the other commands and flags, help, the version,
/// and the malformed ones) is accepted or refused as the whole command
/// does, and a refusal reads the same.
#[test]
fn the_parse_is_the_whole_command_s() {
    let declined: &[&[&str]] = &[
        &[],
        &["--help"],
        &["-h"],
        &["--version"],
        &["-V"],
        &["help"],
        &["help", "status"],
        &["status", "--help"],
        &["probe"],
        &["probe", "sleepy"],
        &["probe", "ready", "live"],
        &["probe", "Ready"],
        &["status", "extra"],
        &["Status"],
        &["stat"],
        &["status", "--history", "3"],
        &["--json", "--json", "status"],
        &["--json", "status", "--json"],
        &["-v", "--verbose", "status"],
        &["-vv", "status"],
        &["-vj", "status"],
        &["--json=true", "status"],
        &["--data-dir", "/d", "--socket", "/s", "status"],
        &["--data-dir", "/d", "status", "--socket", "/s"],
        &["--data-dir", "/d", "--data-dir", "/e", "status"],
        &["--data-dir=", "status"],
        &["--data-dir", "", "status"],
        &["--data-dir", "-d", "status"],
        &["--data-dir=-d", "status"],
        &["status", "--data-dir"],
        &["--timeout", "soon", "status"],
        &["--timeout=-1", "status"],
        &["--timeout", "-1", "status"],
        &["--timeout", "", "status"],
        &["--timeout", "0", "status"],
        &["--timeout=inf", "status"],
        &["--timeout", "NaN", "status"],
        &["--timeout", "1e30", "status"],
        &["--timeout", "18446744073709551615", "status"],
        &["--timeout", "0.000000001", "restart"],
        &["--wait", "restart"],
        &["restart", "--wait", "--wait"],
        &["restart", "--wait=true"],
        &["status", "--wait"],
        &["start", "--wait", "--no-block"],
        &["retry", "--no-block"],
        &["start", "--force"],
        &["stop", "--wait"],
        &["start", "--strict", "--strict"],
        &["stop", "--strict=true"],
        &["--strict", "stop"],
        &["restart", "--strict"],
        &["completions", "bash"],
        &["man"],
        &["man", "start"],
        &["--", "status"],
        &["status", "--"],
        &["-", "status"],
        &["--data", "/d", "status"],
        &["--tcp", "127.0.0.1:7433", "--token-file", "/t", "status"],
        &["--tls", "127.0.0.1:7433", "--ca", "/ca", "status"],
        &["--client-config", "/c", "status"],
        &["--inventory", "/i", "status"],
        &["--only", "a", "status"],
        &["watch"],
        &["journal"],
        &["reload"],
        &["metrics"],
        &["config", "show"],
        &["exit"],
        &["reinit"],
    ];
    for form in declined {
        same_as_the_whole(form);
    }
    let forms: &[&[&str]] = &[
        &["status"],
        &["--data-dir", "/d", "status"],
        &["status", "--data-dir", "/d", "--json"],
        &["--json", "--utc", "status", "--history", "3"],
        &["--socket", "/s", "restart", "--wait"],
        &[
            "--data-dir",
            "/d",
            "restart",
            "--force",
            "--wait",
            "--timeout",
            "2.5",
        ],
        &["restart", "--wait", "--json", "--data-dir", "/d"],
        &["--tcp", "127.0.0.1:7433", "--token-file", "/t", "status"],
        &[
            "--tls",
            "127.0.0.1:7433",
            "--ca",
            "/ca",
            "--token-file",
            "/t",
            "probe",
            "ready",
        ],
        &["-v", "probe", "live"],
        &["start", "--wait"],
        &["stop", "--hold"],
        &["stop", "--hold", "--strict"],
        &["start", "--strict", "--wait"],
        &["completions", "zsh"],
        &["man"],
        &["man", "stop"],
        &[
            "--tls",
            "daemon.example:7443",
            "--ca",
            "/ca",
            "--token-file",
            "/t",
            "status",
        ],
        &[
            "--tls",
            "[::1]:7443",
            "--ca",
            "/ca",
            "--token-file",
            "/t",
            "status",
        ],
        &["watch", "--until", "running", "--timeout", "3"],
        &["journal", "-n", "5"],
        &["config", "set", "log.level", "-1"],
        &["config", "show"],
        &["--inventory", "/i", "status", "--only", "a,b"],
        &["--inventory", "/i", "restart", "--all", "--parallel", "2"],
        &["replace", "--binary", "/b", "--mode", "overlap"],
        // Refused by both.
        &[],
        &["--help"],
        &["status", "--help"],
        &["--version"],
        &["status", "--nosuch"],
        &["nosuch"],
        &["--data-dir", "/d", "--socket", "/s", "status"],
        &["--tcp", "127.0.0.1:7433", "status"],
        &["--tcp", "not-an-address", "--token-file", "/t", "status"],
        &[
            "--tls",
            "no-port",
            "--ca",
            "/ca",
            "--token-file",
            "/t",
            "status",
        ],
        &[
            "--tls",
            "::1:7443",
            "--ca",
            "/ca",
            "--token-file",
            "/t",
            "status",
        ],
        &["completions", "nosuchshell"],
        &["stop", "--strict", "--strict"],
        &["--timeout", "soon", "status"],
        &["watch", "--until", "sleeping"],
        &["--only", "a", "--all", "status"],
        &["status", "--data-dir"],
        // A flag's value that names another subcommand; two names.
        &["--data-dir", "stop", "status"],
        &["--socket", "status", "stop", "--hold"],
        &["status", "stop"],
        &["help", "status"],
        // A subcommand's name as a flag's value, and no subcommand.
        &["--data-dir", "status"],
        &["--json", "--socket", "stop"],
    ];
    for form in forms {
        same_as_the_whole(form);
    }
    // Help and the version always come from the whole command.
    for form in [
        &["--help"][..],
        &["status", "-h"],
        &["-vh", "status"],
        &["-V"],
        &["help", "stop"],
    ] {
        assert!(!lean_accepts(form), "{form:?}");
        same_as_the_whole(form);
    }
}

/// `--timeout` must be a number of seconds a deadline can be kept to, for
/// every command (a query answered from the status record too): zero, a
/// negative, NaN, infinity, more than 10^9 s (which overflowed into "not
/// positive") and less than 1 ms (a command whose deadline passed on its
/// way, leaving unclear whether it ran) are refused as usage errors naming
/// what is wrong. Before: `status` took them all silently.
#[test]
fn a_timeout_that_cannot_be_kept_is_refused() {
    let refused: &[(&str, &str)] = &[
        ("0", "not positive"),
        ("-1", "not positive"),
        ("NaN", "not a finite number"),
        ("inf", "not a finite number"),
        ("1e30", "more than the greatest timeout"),
        ("18446744073709551615", "more than the greatest timeout"),
        ("0.000000001", "less than the least timeout"),
        ("soon", "not a number of seconds"),
    ];
    for (value, why) in refused {
        for command in ["status", "restart"] {
            let flag = format!("--timeout={value}");
            let error = parse_from(["steadfastctl", flag.as_str(), command]).expect_err(value);
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{value}"
            );
            assert!(error.to_string().contains(why), "{value}: {error}");
        }
    }
    for value in ["0.001", "2.5", "1e9", "+3"] {
        let cli = parse_from(["steadfastctl", "--timeout", value, "status"]).expect(value);
        assert!(cli.timeout.is_some_and(|secs| secs > 0.0), "{value}");
    }
}

/// The lines a poll runs (`status`, `probe ready|live` with the data dir
/// or socket, `--json`, `--utc`, `-v`, in any order) are read without
/// clap's command, into what the whole command reads; a line with
/// anything else goes to clap.
#[test]
fn a_poll_line_is_read_without_clap_as_the_whole_command_reads_it() {
    let read: &[&[&str]] = &[
        &["status"],
        &["--data-dir", "/d", "status"],
        &["--data-dir=/d", "--json", "status"],
        &["status", "--data-dir", "/d", "--json"],
        &["--json", "--utc", "-v", "status", "--data-dir", "/d =d"],
        &["--data-dir", "status", "status"],
        &["--socket", "/s", "--verbose", "status"],
        &["probe", "ready"],
        &["--data-dir", "/d", "probe", "ready"],
        &["probe", "--json", "live", "--socket=s"],
        &["-v", "probe", "live"],
    ];
    for form in read {
        let argv: Vec<std::ffi::OsString> = std::iter::once("steadfastctl")
            .chain(form.iter().copied())
            .map(Into::into)
            .collect();
        let fast = poll_line(&argv).unwrap_or_else(|| panic!("{form:?} went to clap"));
        let whole = Cli::try_parse_from(argv).expect("the whole command reads it");
        assert_eq!(format!("{fast:?}"), format!("{whole:?}"), "{form:?}");
    }
    let parsed_by_clap: &[&[&str]] = &[
        &[],
        &["--json"],
        &["probe"],
        &["ready"],
        &["ready", "probe"],
        &["status", "--history", "3"],
        &["--timeout", "1", "status"],
        &["--json", "--json", "status"],
        &["-vv", "status"],
        &["--json=true", "status"],
        &["--data-dir", "/d", "--socket", "/s", "status"],
        &["--data-dir", "/d", "--data-dir", "/e", "status"],
        &["--data-dir=", "status"],
        &["--data-dir", "-d", "status"],
        &["--data-dir=-d", "status"],
        &["status", "--data-dir"],
        &["status", "status"],
        &["probe", "ready", "live"],
        &["--", "status"],
        &["--inventory", "/i", "status"],
        &["restart"],
    ];
    for form in parsed_by_clap {
        let argv: Vec<std::ffi::OsString> = std::iter::once("steadfastctl")
            .chain(form.iter().copied())
            .map(Into::into)
            .collect();
        assert!(poll_line(&argv).is_none(), "{form:?} was read without clap");
        same_as_the_whole(form);
    }
}
