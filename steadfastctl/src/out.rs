//! Everything `steadfastctl` prints goes through here ([`out!`],
//! [`outln!`], [`errln!`]), and so does what it makes of a daemon's text.
//!
//! Invariants:
//! - **No control character from outside reaches the terminal.** Every
//!   line printed has its control characters (ESC, CR, any other C0 or C1
//!   control, DEL) escaped as `\x1b`, `\r`, `\u{9b}` ([`lines`]); only the
//!   line breaks steadfastctl writes itself stay. A daemon's text that
//!   names one thing on one line (its state line, a phase, an identity, a
//!   leaf, a refusal in a table) is [`escape`]d whole, newlines included,
//!   so it cannot forge a line of the output; an error shown as a block
//!   ([`block`]) keeps its lines, each continuation indented under its
//!   column. JSON answers keep JSON's escapes, with DEL and C1 written as
//!   `\u00XX` too ([`json`]).
//!   `tests::escaping_keeps_our_lines_and_nothing_else`,
//!   `tests/it/ctl_output.rs::a_daemon_s_text_cannot_forge_a_line_or_reach_the_terminal`.
//! - **A closed stdout ends the command quietly.** When the reader goes
//!   away (`steadfastctl status | head -1`, `watch | grep -q`), the write
//!   fails with `EPIPE` (Rust ignores `SIGPIPE`), and steadfastctl exits
//!   at once, with no message, with the code the command had decided on
//!   ([`exit_code_if_closed`]; 0 unless said), as a C tool killed by
//!   `SIGPIPE` is silent. Before, `println!` panicked: "Broken pipe", exit
//!   101, a backtrace. A closed stderr is ignored.
//!   `tests/it/ctl_output.rs::a_closed_stdout_ends_the_command_quietly`.

use std::borrow::Cow;
use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};

/// `text` as one line: every control character escaped, newlines included
/// (`steadfast::daemon::escape_controls`).
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    steadfast::daemon::escape_controls(text)
}

/// `text` with every control character escaped except its line breaks.
pub(crate) fn lines(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.split('\n').map(escape).collect::<Vec<_>>().join("\n"))
}

/// A text of possibly several lines shown in a column `width` characters
/// from the left: trailing newlines dropped, each continuation line
/// indented by `width` spaces (so none starts where a line of ours does),
/// every other control character escaped.
pub(crate) fn block(text: &str, width: usize) -> String {
    let pad = format!("\n{}", " ".repeat(width));
    lines(text.trim_end_matches('\n')).replace('\n', &pad)
}

/// JSON text with DEL and the C1 controls (which JSON allows raw in a
/// string, and some terminals obey) written as `\u00XX` escapes; they can
/// only be inside strings, so the document means the same.
pub(crate) fn json(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && u32::from(c) >= 0x7f {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The code to exit with when stdout is closed under us.
static CLOSED_CODE: AtomicU8 = AtomicU8::new(0);

/// Exit with `code` if stdout turns out to be closed from now on (the
/// command's own answer: `status`'s 3 for a runtime that is not running).
pub(crate) fn exit_code_if_closed(code: u8) {
    CLOSED_CODE.store(code, Ordering::Relaxed);
}

/// Write `text` to stdout (its control characters escaped but its line
/// breaks, [`lines`]); a closed stdout exits quietly, another failure says
/// so on stderr and exits 1.
pub(crate) fn stdout(text: &str) {
    raw(lines(text).as_bytes());
}

/// Write `bytes` to stdout as they are: text steadfastctl made itself from
/// its own definitions (a completion script, a manual page), which may
/// hold a tab. A closed stdout is handled as [`stdout`] does.
pub(crate) fn raw(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let written = out.write_all(bytes).and_then(|()| out.flush());
    match written {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(i32::from(CLOSED_CODE.load(Ordering::Relaxed)));
        }
        Err(error) => {
            stderr(&format!("steadfastctl: cannot write the output: {error}\n"));
            std::process::exit(1);
        }
    }
}

/// Write `text` to stderr as [`stdout`] does; a failure is ignored (there
/// is nowhere left to say it).
pub(crate) fn stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(lines(text).as_bytes());
}

/// `print!` through [`stdout`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::stdout(&format!($($arg)*))
    };
}

/// `println!` through [`stdout`].
macro_rules! outln {
    () => {
        $crate::out::stdout("\n")
    };
    ($($arg:tt)*) => {
        $crate::out::stdout(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` through [`stderr`].
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::stderr(&format!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {errln, out, outln};

/// An error on stderr after `steadfastctl: `, its continuation lines (a
/// daemon's refusal may quote a parse error of several) under its column.
pub fn say(error: &dyn std::fmt::Display) {
    errln!("steadfastctl: {}", block(&error.to_string(), 14));
}

#[cfg(test)]
mod tests {
    use super::{block, escape, json, lines};

    /// [`lines`] keeps line breaks and escapes every other control;
    /// [`escape`] escapes line breaks too; [`block`] indents what follows a
    /// line break; [`json`] leaves valid JSON that means the same.
    #[test]
    fn escaping_keeps_our_lines_and_nothing_else() {
        let forged = "failed: x\n● forged\r\u{1b}[2J\u{9b}31m\u{7f}";
        assert_eq!(
            lines(forged),
            "failed: x\n● forged\\r\\x1b[2J\\u{9b}31m\\x7f"
        );
        assert_eq!(
            escape(forged),
            "failed: x\\n● forged\\r\\x1b[2J\\u{9b}31m\\x7f"
        );
        assert_eq!(
            block(forged, 4),
            "failed: x\n    ● forged\\r\\x1b[2J\\u{9b}31m\\x7f"
        );
        assert_eq!(lines("plain\ttext"), "plain\\ttext");
        assert!(matches!(lines("plain\n"), std::borrow::Cow::Borrowed(_)));

        let value = serde_json::json!({ "error": forged });
        let text = serde_json::to_string(&value).expect("json");
        let safe = json(&text);
        assert!(!safe.chars().any(char::is_control), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
        assert_eq!(back, value);
    }
}
