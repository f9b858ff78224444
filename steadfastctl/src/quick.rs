//! The common command lines, read by hand before clap sees them.
//!
//! `steadfastctl status` runs for about as long as `sv status`, and building
//! clap's command (17 global flags copied into 16 subcommands) was the
//! largest part of what it did beyond starting a process. So the forms a
//! script or a poll runs again and again are read here, in one pass and
//! without a command to build:
//!
//! - the global flags `--data-dir DIR`, `--socket PATH`, `--timeout SECS`
//!   (each also as `--flag=VALUE`), `--json`, `--utc`, `-v`/`--verbose`,
//!   anywhere on the line, each at most once;
//! - one of `status`, `probe ready|live`, `start [--wait] [--strict]`,
//!   `restart [--force] [--wait]`, `retry [--wait]`,
//!   `stop [--hold] [--strict]`, a subcommand's own flags after its name.
//!
//! Invariant: on every line it accepts, [`parse`] gives the very [`Cli`]
//! clap gives; anything else (another command, `--help`, `--version`, a
//! flag given twice, both `--data-dir` and `--socket`, a value that is
//! empty or starts with `-`, `--`, a timeout that is not a number) it
//! declines, and clap parses the line as it always did, errors and help
//! included. Nothing here reads the environment: `$STEADFAST_DATA_DIR` is
//! read after the parse, the same way for both. Checked by
//! `tests::the_quick_parse_is_clap_s` (cli.rs), over every arrangement of
//! the accepted forms and a list of declined ones.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use crate::cli::{Cli, Cmd, FleetArgs, ProbeKind};

/// The subcommand read so far.
#[derive(Clone, Copy)]
enum Sub {
    Status,
    /// `probe`, and its argument once read.
    Probe(Option<ProbeKind>),
    Start {
        wait: bool,
        strict: bool,
    },
    Restart {
        force: bool,
        wait: bool,
    },
    Retry {
        wait: bool,
    },
    Stop {
        hold: bool,
        strict: bool,
    },
}

/// The command line `args` (the program's name first) when it is one of
/// the forms above; `None` for clap to parse.
pub(super) fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Option<Cli> {
    let mut args = args.into_iter();
    args.next()?;
    let mut data_dir = None;
    let mut socket = None;
    let mut timeout = None;
    let (mut json, mut utc, mut verbose) = (false, false, false);
    let mut sub: Option<Sub> = None;
    while let Some(arg) = args.next() {
        let bytes = arg.as_bytes();
        if bytes == b"-v" {
            set_flag(&mut verbose)?;
            continue;
        }
        let Some(long) = bytes.strip_prefix(b"--") else {
            if bytes.starts_with(b"-") {
                return None;
            }
            sub = Some(positional(sub, bytes)?);
            continue;
        };
        let (name, inline) = match long.iter().position(|&b| b == b'=') {
            Some(at) => (&long[..at], Some(OsStr::from_bytes(&long[at + 1..]))),
            None => (long, None),
        };
        match name {
            b"data-dir" => set_value(&mut data_dir, value(inline, &mut args)?.into())?,
            b"socket" => set_value(&mut socket, value(inline, &mut args)?.into())?,
            b"timeout" => {
                let secs = value(inline, &mut args)?.to_str()?.parse::<f64>().ok()?;
                set_value(&mut timeout, secs)?;
            }
            _ if inline.is_some() => return None,
            b"json" => set_flag(&mut json)?,
            b"utc" => set_flag(&mut utc)?,
            b"verbose" => set_flag(&mut verbose)?,
            own => sub = Some(own_flag(sub?, own)?),
        }
    }
    if data_dir.is_some() && socket.is_some() {
        return None;
    }
    let command = match sub? {
        Sub::Status => Cmd::Status { history: None },
        Sub::Probe(what) => Cmd::Probe { what: what? },
        Sub::Start { wait, strict } => Cmd::Start { wait, strict },
        Sub::Restart { force, wait } => Cmd::Restart { force, wait },
        Sub::Retry { wait } => Cmd::Retry { wait },
        Sub::Stop { hold, strict } => Cmd::Stop { hold, strict },
    };
    Some(Cli {
        data_dir,
        socket,
        tcp: None,
        token_file: None,
        tls: None,
        ca: None,
        cert: None,
        key: None,
        server_name: None,
        client_config: None,
        json,
        utc,
        verbose,
        timeout,
        fleet: FleetArgs {
            inventory: None,
            only: Vec::new(),
            all: false,
            parallel: None,
        },
        command,
    })
}

/// A word that is not a flag: the subcommand, or `probe`'s argument.
fn positional(sub: Option<Sub>, word: &[u8]) -> Option<Sub> {
    Some(match (sub, word) {
        (None, b"status") => Sub::Status,
        (None, b"probe") => Sub::Probe(None),
        (None, b"start") => Sub::Start {
            wait: false,
            strict: false,
        },
        (None, b"restart") => Sub::Restart {
            force: false,
            wait: false,
        },
        (None, b"retry") => Sub::Retry { wait: false },
        (None, b"stop") => Sub::Stop {
            hold: false,
            strict: false,
        },
        (Some(Sub::Probe(None)), b"ready") => Sub::Probe(Some(ProbeKind::Ready)),
        (Some(Sub::Probe(None)), b"live") => Sub::Probe(Some(ProbeKind::Live)),
        _ => return None,
    })
}

/// A subcommand's own flag (given after its name).
fn own_flag(sub: Sub, flag: &[u8]) -> Option<Sub> {
    let once = |seen: bool| (!seen).then_some(true);
    Some(match (sub, flag) {
        (Sub::Start { wait, strict }, b"wait") => Sub::Start {
            wait: once(wait)?,
            strict,
        },
        (Sub::Start { wait, strict }, b"strict") => Sub::Start {
            wait,
            strict: once(strict)?,
        },
        (Sub::Restart { force, wait }, b"wait") => Sub::Restart {
            force,
            wait: once(wait)?,
        },
        (Sub::Restart { force, wait }, b"force") => Sub::Restart {
            force: once(force)?,
            wait,
        },
        (Sub::Retry { wait }, b"wait") => Sub::Retry { wait: once(wait)? },
        (Sub::Stop { hold, strict }, b"hold") => Sub::Stop {
            hold: once(hold)?,
            strict,
        },
        (Sub::Stop { hold, strict }, b"strict") => Sub::Stop {
            hold,
            strict: once(strict)?,
        },
        _ => return None,
    })
}

/// A flag's value: after its `=`, else the next word; `None` when missing,
/// empty or starting with `-` (clap's to judge).
fn value(inline: Option<&OsStr>, args: &mut impl Iterator<Item = OsString>) -> Option<OsString> {
    let value = match inline {
        Some(value) => value.to_owned(),
        None => args.next()?,
    };
    (!value.is_empty() && !value.as_bytes().starts_with(b"-")).then_some(value)
}

/// Set a boolean flag; `None` when it was already given.
fn set_flag(flag: &mut bool) -> Option<()> {
    (!std::mem::replace(flag, true)).then_some(())
}

/// Set a flag's value; `None` when it was already given.
fn set_value<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.replace(value).is_none().then_some(())
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use crate::cli::*;
    use crate::quick;

    /// [`quick::parse`] gives what clap gives on every form it reads:
    /// each subcommand it knows, each of its global flags in each spelling
    /// before the subcommand, between it and its own flags, and last, and
    /// all of them at once in several orders; and it leaves every other
    /// line to clap.
    #[test]
    fn the_quick_parse_is_clap_s() {
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
            &["--timeout=inf"],
            &["--timeout", "NaN"],
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
            let argv: Vec<std::ffi::OsString> = std::iter::once("steadfastctl")
                .chain(form.iter().copied())
                .map(Into::into)
                .collect();
            let quick = quick::parse(argv.clone());
            let lean = lean_parse(argv.clone());
            let whole = Cli::try_parse_from(argv);
            match (&quick, &lean, &whole) {
                (Some(quick), Ok(lean), Ok(whole)) => {
                    assert_eq!(format!("{quick:?}"), format!("{whole:?}"), "{form:?}");
                    assert_eq!(format!("{lean:?}"), format!("{whole:?}"), "{form:?}");
                }
                _ => panic!("{form:?}: quick {quick:?}, lean {lean:?}, clap {whole:?}"),
            }
        }
        // A path that is not UTF-8 is a path all the same.
        let odd =
            <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(b"/d\xff".to_vec());
        let argv: Vec<std::ffi::OsString> = vec![
            "steadfastctl".into(),
            "--data-dir".into(),
            odd,
            "status".into(),
        ];
        let quick = quick::parse(argv.clone()).expect("a non-UTF-8 path");
        let whole = Cli::try_parse_from(argv).expect("a non-UTF-8 path");
        assert_eq!(format!("{quick:?}"), format!("{whole:?}"));

        // Everything else is clap's: its errors, its help, the other
        // commands and flags, and anything read two ways.
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
            &["--wait", "restart"],
            &["restart", "--wait", "--wait"],
            &["restart", "--wait=true"],
            &["status", "--wait"],
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
            let argv = std::iter::once("steadfastctl")
                .chain(form.iter().copied())
                .map(std::ffi::OsString::from);
            assert!(quick::parse(argv.clone()).is_none(), "{form:?} is clap's");
            match (lean_parse(argv.clone()), Cli::try_parse_from(argv)) {
                (Ok(lean), Ok(whole)) => {
                    assert_eq!(format!("{lean:?}"), format!("{whole:?}"), "{form:?}");
                }
                (Err(lean), Err(whole)) => assert_eq!(lean.kind(), whole.kind(), "{form:?}"),
                (lean, whole) => panic!("{form:?}: lean {lean:?}, whole {whole:?}"),
            }
        }
    }

    /// [`lean_parse`] accepts exactly what clap's whole command accepts,
    /// and means the same by it: the common forms, flags before and after
    /// the subcommand, and the malformed ones (which both refuse, with the
    /// same kind of error, so the whole command's message is what prints).
    #[test]
    fn the_lean_parse_is_clap_s() {
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
            let argv = std::iter::once("steadfastctl").chain(form.iter().copied());
            let lean = lean_parse(argv.clone());
            let whole = Cli::try_parse_from(argv);
            match (&lean, &whole) {
                (Ok(lean), Ok(whole)) => {
                    assert_eq!(format!("{lean:?}"), format!("{whole:?}"), "{form:?}");
                }
                (Err(lean), Err(whole)) => assert_eq!(lean.kind(), whole.kind(), "{form:?}"),
                _ => panic!("{form:?}: lean {lean:?}, whole {whole:?}"),
            }
        }
    }
}
