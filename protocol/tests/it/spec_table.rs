//! `spec/lifecycle.md` is the lifecycle's contract: this test reads its
//! transition table and holds the machine to every row, and checks that the
//! table lists every state × event pair exactly once. A change to the machine
//! without the spec, or to the spec without the machine, fails here.

use crate::support;

use std::collections::BTreeMap;

use support::{EVENTS, STATES, counters, effect_label, event, label, reached, state, wake_label};

/// One row of the table: what the spec says a pair does.
#[derive(Debug, PartialEq, Eq)]
struct Row {
    next: String,
    effect: String,
    counters: String,
}

fn spec_text() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/spec/lifecycle.md");
    std::fs::read_to_string(path).expect("spec/lifecycle.md is readable")
}

/// The rows of the spec's table marked `<!-- {marker}:begin -->` …
/// `<!-- {marker}:end -->`: each row's cells (code ticks trimmed), with the
/// line it came from; the header and the rule skipped; every row `width`
/// cells wide.
fn table(text: &str, marker: &str, width: usize) -> Vec<(Vec<String>, String)> {
    let table = text
        .split(&format!("<!-- {marker}:begin -->"))
        .nth(1)
        .and_then(|rest| rest.split(&format!("<!-- {marker}:end -->")).next())
        .unwrap_or_else(|| panic!("the spec marks a table with {marker}:begin / {marker}:end"));
    let mut rows = Vec::new();
    for line in table.lines().map(str::trim).filter(|l| l.starts_with('|')) {
        let cells: Vec<String> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').to_owned())
            .collect();
        if cells[0] == "state" || cells[0].starts_with("---") {
            continue;
        }
        assert_eq!(cells.len(), width, "a row has {width} cells: {line}");
        rows.push((cells, line.to_owned()));
    }
    rows
}

fn spec_rows() -> BTreeMap<(String, String), Row> {
    let text = spec_text();
    let mut rows = BTreeMap::new();
    for (cells, line) in table(&text, "table", 5) {
        let line = line.as_str();
        let key = (cells[0].clone(), cells[1].clone());
        let row = Row {
            next: cells[2].clone(),
            effect: cells[3].clone(),
            counters: cells[4].clone(),
        };
        assert!(rows.insert(key, row).is_none(), "row listed twice: {line}");
    }
    rows
}

fn machine_row(state_label: &str, event_label: &str) -> Row {
    let m = state(state_label);
    assert_eq!(
        label(&m.state),
        reached(state_label),
        "the fixture reaches the labelled state"
    );
    match m.step(&event(event_label, &m)) {
        Ok((next, effect, _)) => Row {
            next: label(&next.state),
            effect: effect_label(&effect),
            counters: counters(&m, &next),
        },
        Err(refused) => Row {
            next: format!("refused: {}", refused.reason),
            effect: "—".into(),
            counters: "—".into(),
        },
    }
}

#[test]
fn the_machine_matches_every_row_of_the_spec_table() {
    let spec = spec_rows();
    let mut mismatches = Vec::new();
    let mut checked = 0;
    for s in STATES {
        for e in EVENTS {
            let actual = machine_row(s, e);
            checked += 1;
            match spec.get(&(s.to_owned(), e.to_owned())) {
                Some(row) if *row == actual => {}
                found => mismatches.push(format!(
                    "| `{s}` | `{e}` | {} | {} | {} |   (spec says {found:?})",
                    actual.next, actual.effect, actual.counters
                )),
            }
        }
    }
    assert_eq!(checked, STATES.len() * EVENTS.len());
    assert!(
        mismatches.is_empty(),
        "{} of {checked} pairs differ from spec/lifecycle.md; the machine does:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn the_spec_table_lists_no_pair_the_machine_does_not_have() {
    let spec = spec_rows();
    for (s, e) in spec.keys() {
        assert!(
            STATES.contains(&s.as_str()),
            "unknown state label {s:?} in the spec"
        );
        assert!(
            EVENTS.contains(&e.as_str()),
            "unknown event label {e:?} in the spec"
        );
    }
    assert_eq!(
        spec.len(),
        STATES.len() * EVENTS.len(),
        "every pair exactly once"
    );
}

/// The spec's "Timers" table: the wake the machine hands back in each
/// representative state.
#[test]
fn the_machine_wants_the_wake_the_spec_lists_for_every_state() {
    let text = spec_text();
    let mut spec = BTreeMap::new();
    for (cells, line) in table(&text, "wakes", 2) {
        assert!(
            spec.insert(cells[0].clone(), cells[1].clone()).is_none(),
            "twice: {line}"
        );
    }
    let mut mismatches = Vec::new();
    for s in STATES {
        let actual = wake_label(&state(s));
        if spec.get(s) != Some(&actual) {
            mismatches.push(format!(
                "| `{s}` | {actual} |   (spec says {:?})",
                spec.get(s)
            ));
        }
    }
    assert_eq!(spec.len(), STATES.len(), "every state exactly once");
    assert!(
        mismatches.is_empty(),
        "the machine wants:\n{}",
        mismatches.join("\n")
    );
}
