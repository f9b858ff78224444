//! `spec/children.md` is the children machine's contract: this test reads
//! its three tables and holds the machine to every row. The groups table
//! declares the groups the decision table uses; the declarations table
//! says what `GroupSpec::check` makes of a declaration; the decision table
//! says, for a group brought to a situation by real events, what one more
//! event decides and where it leaves the group. A change to the machine
//! without the spec, or to the spec without the machine, fails here, naming
//! the row and printing the row as the machine has it.

use std::collections::{BTreeMap, BTreeSet};

use steadfast_protocol::Timestamp;
use steadfast_protocol::children::{
    AutoShutdown, ChildExit, ChildKind, ChildOp, ChildSpec, ChildState, Decision, Event, Group,
    GroupSpec, Intensity, OpRefused, Plan, Restart, SpecError, Strategy,
};

/// The table rows' child names, in declaration order; `d` is one past the
/// last (a child the group does not declare).
const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// What every exit but `normal` carries.
const MESSAGE: &str = "boom";

fn spec_text() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/spec/children.md");
    std::fs::read_to_string(path).expect("spec/children.md is readable")
}

/// One row of a marked table: its cells (code ticks trimmed), its number
/// among the table's rows (from 1) and its line in the file (from 1).
struct Line {
    cells: Vec<String>,
    row: usize,
    line: usize,
}

/// The rows of the table marked `<!-- {marker}:begin -->` …
/// `<!-- {marker}:end -->`, each `width` cells. The table may be cut in
/// parts, with prose between them: a row followed by a rule (`|---|`) is a
/// part's header, and skipped.
fn table(text: &str, marker: &str, width: usize) -> Vec<Line> {
    let begin = format!("<!-- {marker}:begin -->");
    let end = format!("<!-- {marker}:end -->");
    let mut inside = false;
    let mut rows: Vec<(Vec<String>, usize)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line == begin {
            inside = true;
            continue;
        }
        if line == end {
            assert!(inside, "{end} before {begin}");
            assert!(!rows.is_empty(), "the {marker} table has rows");
            return rows
                .into_iter()
                .enumerate()
                .map(|(i, (cells, line))| Line {
                    cells,
                    row: i + 1,
                    line,
                })
                .collect();
        }
        if !inside || !line.starts_with('|') {
            continue;
        }
        let cells: Vec<String> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').to_owned())
            .collect();
        assert_eq!(
            cells.len(),
            width,
            "line {}: a {marker} row has {width} cells: {line}",
            n + 1
        );
        if cells.iter().all(|c| c.starts_with("---")) {
            rows.pop().expect("a rule follows its header");
            continue;
        }
        rows.push((cells, n + 1));
    }
    panic!("the spec marks a table with {begin} … {end}");
}

fn strategy(s: &str) -> Strategy {
    [
        Strategy::OneForOne,
        Strategy::OneForAll,
        Strategy::RestForOne,
    ]
    .into_iter()
    .find(|x| x.as_str() == s)
    .unwrap_or_else(|| panic!("no strategy {s:?}"))
}

fn restart(s: &str) -> Restart {
    [Restart::Permanent, Restart::Transient, Restart::Temporary]
        .into_iter()
        .find(|x| x.as_str() == s)
        .unwrap_or_else(|| panic!("no restart type {s:?}"))
}

fn auto_shutdown(s: &str) -> AutoShutdown {
    match s {
        "never" => AutoShutdown::Never,
        "any_significant" => AutoShutdown::AnySignificant,
        "all_significant" => AutoShutdown::AllSignificant,
        other => panic!("no auto_shutdown {other:?}"),
    }
}

/// `N in P ms`.
fn intensity(s: &str) -> Intensity {
    let parsed = s.strip_suffix(" ms").and_then(|s| {
        let (restarts, period) = s.split_once(" in ")?;
        Some(Intensity {
            restarts: restarts.parse().ok()?,
            period_ms: period.parse().ok()?,
        })
    });
    parsed.unwrap_or_else(|| panic!("an intensity is `N in P ms`, not {s:?}"))
}

/// `TYPE` or `TYPE, significant`.
fn child(name: &str, cell: &str) -> ChildSpec {
    let (restart_type, significant) = match cell.strip_suffix(", significant") {
        Some(t) => (t, true),
        None => (cell, false),
    };
    ChildSpec {
        name: name.to_owned(),
        kind: ChildKind::Task,
        restart: restart(restart_type),
        significant,
        shutdown_ms: 1_000,
    }
}

/// The groups table: name → declaration.
fn groups(text: &str) -> BTreeMap<String, GroupSpec> {
    let mut groups = BTreeMap::new();
    for Line { cells, line, .. } in table(text, "groups", 7) {
        let spec = GroupSpec {
            strategy: strategy(&cells[1]),
            intensity: intensity(&cells[2]),
            auto_shutdown: auto_shutdown(&cells[3]),
            children: (0..3).map(|i| child(NAMES[i], &cells[4 + i])).collect(),
        };
        assert_eq!(
            spec.check(),
            Ok(()),
            "line {line}: group {} is valid",
            cells[0]
        );
        assert!(
            groups.insert(cells[0].clone(), spec).is_none(),
            "line {line}: group {} declared twice",
            cells[0]
        );
    }
    groups
}

fn exit(s: &str) -> ChildExit {
    match s {
        "normal" => ChildExit::Normal,
        "error" => ChildExit::Error(MESSAGE.into()),
        "panicked" => ChildExit::Panicked(MESSAGE.into()),
        "start_failed" => ChildExit::StartFailed(MESSAGE.into()),
        other => panic!("no exit {other:?}"),
    }
}

fn exit_label(e: &ChildExit) -> String {
    let label = match e {
        ChildExit::Normal => return "normal".into(),
        ChildExit::Error(m) => ("error", m),
        ChildExit::Panicked(m) => ("panicked", m),
        ChildExit::StartFailed(m) => ("start_failed", m),
    };
    if label.1 == MESSAGE {
        label.0.to_owned()
    } else {
        format!("{}({:?})", label.0, label.1)
    }
}

fn index(name: &str) -> usize {
    NAMES
        .iter()
        .position(|n| *n == name)
        .unwrap_or_else(|| panic!("no child {name:?}: the table's are a, b, c (and d, undeclared)"))
}

/// What happens to the group in a row: one of `Group::on`'s events, or its
/// `start()`.
#[derive(Debug)]
enum Step {
    Start,
    On(Event),
}

/// `start()`, `shutdown`, `NAME#INCARNATION EXIT [@T]`, `op OP NAME [@T]`.
fn step(s: &str) -> Step {
    let (head, at) = match s.rsplit_once(" @") {
        Some((head, t)) => (
            head,
            Timestamp(t.parse().unwrap_or_else(|_| panic!("a time in {s:?}"))),
        ),
        None => (s, Timestamp(0)),
    };
    let words: Vec<&str> = head.split(' ').collect();
    match words.as_slice() {
        ["start()"] => Step::Start,
        ["shutdown"] => Step::On(Event::Shutdown),
        ["op", op, name] => Step::On(Event::Operator {
            child: index(name),
            op: [ChildOp::Restart, ChildOp::Stop, ChildOp::Start]
                .into_iter()
                .find(|o| o.as_str() == *op)
                .unwrap_or_else(|| panic!("no op {op:?}")),
            at,
        }),
        [child, how] => {
            let (name, incarnation) = child
                .split_once('#')
                .unwrap_or_else(|| panic!("an exit is NAME#INCARNATION EXIT: {s:?}"));
            Step::On(Event::Exited {
                child: index(name),
                incarnation: incarnation.parse().expect("an incarnation"),
                exit: exit(how),
                at,
            })
        }
        _ => panic!("no event {s:?}"),
    }
}

fn state_label(state: &ChildState) -> String {
    match state {
        ChildState::NotStarted => "not_started".into(),
        ChildState::Running => "run".into(),
        ChildState::Stopped => "stopped".into(),
        ChildState::Ended(e) => format!("ended({})", exit_label(e)),
    }
}

/// `PHASE; a=STATE#N b=STATE#N c=STATE#N`.
fn situation(g: &Group) -> String {
    let children: Vec<String> = (0..g.len())
        .map(|i| {
            let (state, incarnation) = g.state(i).expect("declared");
            format!("{}={}#{incarnation}", NAMES[i], state_label(state))
        })
        .collect();
    let phase = serde_json::to_value(g.phase()).expect("a phase serializes");
    format!(
        "{}; {}",
        phase.as_str().expect("a phase is a string"),
        children.join(" ")
    )
}

fn names(stop: &[usize]) -> String {
    if stop.is_empty() {
        return "—".into();
    }
    let names: Vec<&str> = stop.iter().map(|i| NAMES[*i]).collect();
    names.join(" ")
}

fn starts(start: &[(usize, u32)]) -> String {
    if start.is_empty() {
        return "—".into();
    }
    let starts: Vec<String> = start
        .iter()
        .map(|(i, n)| format!("{}#{n}", NAMES[*i]))
        .collect();
    starts.join(" ")
}

fn restarted(plan: &Plan) -> String {
    if plan.restarted.is_empty() {
        return "—".into();
    }
    let records: Vec<String> = plan
        .restarted
        .iter()
        .map(|r| format!("{}#{} ({})", r.child, r.incarnation, r.reason))
        .collect();
    records.join("; ")
}

/// A decision's label in the spec's vocabulary. Exhaustive: a new variant
/// fails to compile here until the spec has a word for it.
fn decision_label(d: &Decision) -> String {
    match d {
        Decision::Ignore => "ignore".into(),
        Decision::Ended => "ended".into(),
        Decision::Restart(_) => "restart".into(),
        Decision::Meltdown { meltdown, .. } => format!("meltdown: {meltdown}"),
        Decision::SignificantEnded { child, exit, .. } => {
            format!("significant_ended: {child} {exit}")
        }
        Decision::Shutdown { .. } => "shutdown".into(),
        Decision::Refused(why) => format!("refused: {}", refused_label(*why)),
    }
}

fn refused_label(why: OpRefused) -> &'static str {
    match why {
        OpRefused::Running => "running",
        OpRefused::NotRunning => "not_running",
        OpRefused::ShuttingDown => "shutting_down",
    }
}

/// Every decision kind the table must show, as `kind` names it.
const KINDS: [&str; 9] = [
    "ignore",
    "ended",
    "restart",
    "meltdown",
    "significant_ended",
    "shutdown",
    "refused: running",
    "refused: not_running",
    "refused: shutting_down",
];

fn kind(d: &Decision) -> String {
    match d {
        Decision::Meltdown { .. } => "meltdown".into(),
        Decision::SignificantEnded { .. } => "significant_ended".into(),
        other => decision_label(other),
    }
}

/// What a row says: the cells after its inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    before: String,
    decision: String,
    stop: String,
    start: String,
    restarted: String,
    after: String,
}

const COLUMNS: [&str; 6] = ["before", "decision", "stop", "start", "restarted", "after"];

impl Outcome {
    fn cells(&self) -> [&str; 6] {
        [
            &self.before,
            &self.decision,
            &self.stop,
            &self.start,
            &self.restarted,
            &self.after,
        ]
    }
}

/// Run one row on the machine: the group declared, started unless the
/// given begins with `unstarted`, the given events stepped, then the event.
fn run(spec: &GroupSpec, given: &str, event: &str) -> (Outcome, Option<Decision>) {
    let mut g = Group::new(spec.clone()).expect("the groups table's groups are valid");
    let mut given: Vec<&str> = match given {
        "—" => Vec::new(),
        given => given.split("; ").collect(),
    };
    if given.first() == Some(&"unstarted") {
        given.remove(0);
    } else {
        g.start();
    }
    for s in given {
        match step(s) {
            Step::Start => {
                g.start();
            }
            Step::On(e) => {
                g.on(&e);
            }
        }
    }
    let before = situation(&g);
    let (decision, plan_cells, d) = match step(event) {
        Step::Start => {
            let plan = g.start();
            let cells = (names(&plan.stop), starts(&plan.start), restarted(&plan));
            ("plan".to_owned(), cells, None)
        }
        Step::On(e) => {
            let d = g.on(&e);
            let cells = match &d {
                Decision::Restart(plan) => {
                    (names(&plan.stop), starts(&plan.start), restarted(plan))
                }
                Decision::Meltdown { stop, .. }
                | Decision::SignificantEnded { stop, .. }
                | Decision::Shutdown { stop } => (names(stop), "—".into(), "—".into()),
                Decision::Ignore | Decision::Ended | Decision::Refused(_) => {
                    ("—".into(), "—".into(), "—".into())
                }
            };
            (decision_label(&d), cells, Some(d))
        }
    };
    let outcome = Outcome {
        before,
        decision,
        stop: plan_cells.0,
        start: plan_cells.1,
        restarted: plan_cells.2,
        after: situation(&g),
    };
    (outcome, d)
}

struct Row {
    group: String,
    given: String,
    event: String,
    outcome: Outcome,
    row: usize,
    line: usize,
}

fn rows(text: &str) -> Vec<Row> {
    table(text, "table", 9)
        .into_iter()
        .map(|Line { cells, row, line }| Row {
            group: cells[0].clone(),
            given: cells[1].clone(),
            event: cells[3].clone(),
            outcome: Outcome {
                before: cells[2].clone(),
                decision: cells[4].clone(),
                stop: cells[5].clone(),
                start: cells[6].clone(),
                restarted: cells[7].clone(),
                after: cells[8].clone(),
            },
            row,
            line,
        })
        .collect()
}

fn print_row(group: &str, given: &str, event: &str, o: &Outcome) -> String {
    format!(
        "| `{group}` | {given} | {} | {event} | {} | {} | {} | {} | {} |",
        o.before, o.decision, o.stop, o.start, o.restarted, o.after
    )
}

#[test]
fn the_machine_matches_every_row_of_the_decision_table() {
    let text = spec_text();
    let groups = groups(&text);
    let rows = rows(&text);
    let mut mismatches = Vec::new();
    for r in &rows {
        let spec = groups
            .get(&r.group)
            .unwrap_or_else(|| panic!("row {}: no group {:?}", r.row, r.group));
        let (actual, _) = run(spec, &r.given, &r.event);
        if actual != r.outcome {
            let differ: Vec<String> = COLUMNS
                .iter()
                .zip(r.outcome.cells().iter().zip(actual.cells()))
                .filter(|(_, (spec, machine))| *spec != machine)
                .map(|(column, (spec, machine))| {
                    format!("    {column}: spec says {spec:?}, machine {machine:?}")
                })
                .collect();
            mismatches.push(format!(
                "row {} (spec/children.md line {}): {} · {} · {}\n{}\n  the machine's row:\n{}",
                r.row,
                r.line,
                r.group,
                r.given,
                r.event,
                differ.join("\n"),
                print_row(&r.group, &r.given, &r.event, &actual)
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} rows differ from spec/children.md:\n{}",
        mismatches.len(),
        rows.len(),
        mismatches.join("\n")
    );
    eprintln!("spec/children.md: {} rows hold", rows.len());
}

#[test]
fn the_decision_table_has_no_duplicate_row_and_uses_every_group() {
    let text = spec_text();
    let groups = groups(&text);
    let mut seen = BTreeMap::new();
    let mut used = BTreeSet::new();
    for r in rows(&text) {
        let key = (r.group.clone(), r.given.clone(), r.event.clone());
        if let Some(first) = seen.insert(key, r.row) {
            panic!(
                "row {} repeats row {first}: {} · {} · {}",
                r.row, r.group, r.given, r.event
            );
        }
        used.insert(r.group);
    }
    let declared: BTreeSet<String> = groups.into_keys().collect();
    assert_eq!(
        used, declared,
        "every declared group is used, and only those"
    );
}

#[test]
fn the_decision_table_shows_every_decision_and_every_refusal() {
    let text = spec_text();
    let groups = groups(&text);
    let mut shown = BTreeSet::new();
    for r in rows(&text) {
        if let (_, Some(d)) = run(&groups[&r.group], &r.given, &r.event) {
            shown.insert(kind(&d));
        }
    }
    let missing: Vec<&str> = KINDS
        .iter()
        .copied()
        .filter(|k| !shown.contains(*k))
        .collect();
    assert!(missing.is_empty(), "no row decides {missing:?}");
    assert_eq!(shown.len(), KINDS.len(), "kinds outside KINDS: {shown:?}");
}

/// A child of the declarations table: `"NAME" TYPE`, `"NAME"*N TYPE`
/// (the name repeated N times), TYPE optionally followed by ` significant`;
/// NAME may hold `\u{HEX}` escapes.
fn declared_child(cell: &str) -> ChildSpec {
    let close = cell.rfind('"').expect("a quoted name");
    let inner = cell[..close]
        .strip_prefix('"')
        .unwrap_or_else(|| panic!("a name is quoted: {cell:?}"));
    let rest = &cell[close + 1..];
    let (times, restart_type) = match rest.strip_prefix('*') {
        Some(r) => {
            let (n, t) = r.split_once(' ').expect("`*N TYPE`");
            (n.parse().expect("a repeat count"), t)
        }
        None => (1, rest.trim_start()),
    };
    let mut name = String::new();
    let mut tail = inner;
    while let Some((head, escaped)) = tail.split_once("\\u{") {
        name.push_str(head);
        let (hex, after) = escaped.split_once('}').expect("\\u{HEX}");
        let c = u32::from_str_radix(hex, 16)
            .ok()
            .and_then(char::from_u32)
            .expect("a char");
        name.push(c);
        tail = after;
    }
    name.push_str(tail);
    child(
        &name.repeat(times),
        &restart_type.replace(" significant", ", significant"),
    )
}

/// A `SpecError`'s label: exhaustive, so a new rule needs a row.
fn spec_error_label(e: &SpecError) -> &'static str {
    match e {
        SpecError::EmptyName => "empty_name",
        SpecError::NameTooLong(_) => "name_too_long",
        SpecError::NameNotPrintable(_) => "name_not_printable",
        SpecError::DuplicateName(_) => "duplicate_name",
        SpecError::ZeroPeriod(_) => "zero_period",
        SpecError::SignificantWithoutAutoShutdown(_) => "significant_without_auto_shutdown",
        SpecError::SignificantPermanent(_) => "significant_permanent",
    }
}

const SPEC_ERRORS: [&str; 7] = [
    "empty_name",
    "name_too_long",
    "name_not_printable",
    "duplicate_name",
    "zero_period",
    "significant_without_auto_shutdown",
    "significant_permanent",
];

#[test]
fn check_refuses_every_declaration_the_spec_refuses() {
    let text = spec_text();
    let mut shown = BTreeSet::new();
    let mut mismatches = Vec::new();
    for Line { cells, row, line } in table(&text, "declarations", 4) {
        let children = cells[0].split(", ").map(declared_child).collect();
        let spec = GroupSpec {
            strategy: Strategy::OneForOne,
            intensity: intensity(&cells[1]),
            auto_shutdown: auto_shutdown(&cells[2]),
            children,
        };
        let actual = match spec.check() {
            Ok(()) => "ok".to_owned(),
            Err(e) => {
                shown.insert(spec_error_label(&e));
                e.to_string()
            }
        };
        if actual != cells[3] {
            mismatches.push(format!(
                "row {row} (line {line}): spec says {:?}, check says {actual:?}",
                cells[3]
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    let missing: Vec<&str> = SPEC_ERRORS
        .iter()
        .copied()
        .filter(|e| !shown.contains(e))
        .collect();
    assert!(missing.is_empty(), "no declaration row shows {missing:?}");
}
