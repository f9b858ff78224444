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

use crate::cli::{Cli, Cmd, ProbeKind};
use crate::fleet::FleetArgs;

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
