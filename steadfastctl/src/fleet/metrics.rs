//! `metrics` across the fleet: every daemon's exposition parsed and
//! merged into one, each sample labelled `daemon="NAME"`.

use std::collections::BTreeMap;

use super::inventory::Entry;
use super::{Answer, Failure};

/// The fleet's `metrics`: one OpenMetrics exposition, and the daemons
/// whose text could not join it (their index and why).
pub(super) struct Merged {
    pub(super) text: String,
    pub(super) left_out: Vec<(usize, String)>,
}

/// One metric family of an exposition: its name, its `# HELP`/`# TYPE`/
/// `# UNIT` lines, its type, and its sample lines.
#[derive(Debug, Default)]
pub(super) struct Family {
    name: String,
    meta: Vec<String>,
    kind: Option<String>,
    samples: Vec<String>,
}

/// The family the fleet's `metrics` adds: whether each daemon answered
/// (with text that could be merged).
pub(super) const UP_FAMILY: &str = "steadfastctl_fleet_up";

/// Every daemon's OpenMetrics text merged into ONE exposition, as a
/// scraper of the whole fleet reads it: each family once (its metadata as
/// the first daemon that has it gives it), the samples of every daemon
/// under it in inventory order, each with `daemon="NAME"` added (NAME: the
/// inventory entry's), then [`UP_FAMILY`] (1 answered, 0 not, for every
/// daemon asked) and one `# EOF`. A daemon whose text does not fit (not
/// OpenMetrics, a family another daemon gives another type, a sample that
/// already has a `daemon` label) is left out whole and named.
pub(super) fn merge_metrics(entries: &[Entry], replies: &[Result<Answer, Failure>]) -> Merged {
    let mut families: Vec<Family> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut left_out = Vec::new();
    let mut up = Vec::new();
    for (i, (entry, reply)) in entries.iter().zip(replies).enumerate() {
        let Ok(Answer::Metrics(text)) = reply else {
            up.push((entry, false));
            continue;
        };
        let parsed = parse_exposition(text, &entry.name).and_then(|parsed| {
            for family in &parsed {
                if family.name == UP_FAMILY {
                    return Err(format!(
                        "it has a family named {UP_FAMILY}, the fleet's own"
                    ));
                }
                if let Some(&at) = index.get(&family.name)
                    && families[at].kind != family.kind
                {
                    return Err(format!(
                        "its family {} is a {}, another daemon's a {}",
                        family.name,
                        family.kind.as_deref().unwrap_or("(untyped)"),
                        families[at].kind.as_deref().unwrap_or("(untyped)")
                    ));
                }
            }
            Ok(parsed)
        });
        match parsed {
            Ok(parsed) => {
                up.push((entry, true));
                for family in parsed {
                    match index.get(&family.name) {
                        Some(&at) => families[at].samples.extend(family.samples),
                        None => {
                            index.insert(family.name.clone(), families.len());
                            families.push(family);
                        }
                    }
                }
            }
            Err(why) => {
                up.push((entry, false));
                left_out.push((i, why));
            }
        }
    }
    let mut text = String::new();
    for family in &families {
        for line in family.meta.iter().chain(&family.samples) {
            text.push_str(line);
            text.push('\n');
        }
    }
    text.push_str(&format!(
        "# HELP {UP_FAMILY} Whether the daemon answered steadfastctl's metrics call with text that \
         is merged here (1) or not (0).\n# TYPE {UP_FAMILY} gauge\n"
    ));
    for (entry, answered) in up {
        text.push_str(&format!(
            "{UP_FAMILY}{{daemon=\"{}\"}} {}\n",
            label_value(&entry.name),
            u8::from(answered)
        ));
    }
    text.push_str("# EOF\n");
    Merged { text, left_out }
}

/// A label value as OpenMetrics writes it between its quotes.
pub(super) fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One daemon's exposition as families, each sample with
/// `daemon="DAEMON"` added; or why it is not one this can merge.
pub(super) fn parse_exposition(text: &str, daemon: &str) -> Result<Vec<Family>, String> {
    let mut families: Vec<Family> = Vec::new();
    let mut ended = false;
    for line in text.lines() {
        if ended {
            return Err("it has lines after `# EOF`".to_owned());
        }
        if line.is_empty() {
            continue;
        }
        if line == "# EOF" {
            ended = true;
            continue;
        }
        if let Some(comment) = line.strip_prefix("# ") {
            let mut words = comment.splitn(3, ' ');
            let (Some(what @ ("HELP" | "TYPE" | "UNIT")), Some(name)) =
                (words.next(), words.next())
            else {
                return Err(format!("the line `{line}` is not OpenMetrics"));
            };
            if families.last().is_none_or(|f| f.name != name) {
                if families.iter().any(|f| f.name == name) {
                    return Err(format!("its family {name} is given twice"));
                }
                families.push(Family {
                    name: name.to_owned(),
                    ..Family::default()
                });
            }
            let family = families.last_mut().expect("a family");
            if what == "TYPE" {
                family.kind = words.next().map(str::to_owned);
            }
            family.meta.push(line.to_owned());
            continue;
        }
        if line.starts_with('#') {
            return Err(format!("the line `{line}` is not OpenMetrics"));
        }
        let sample = with_daemon(line, daemon)?;
        match families.last_mut() {
            Some(family) => family.samples.push(sample),
            None => {
                // A sample before any metadata: a family of its own, untyped.
                let name = line.split(['{', ' ']).next().unwrap_or(line);
                families.push(Family {
                    name: name.to_owned(),
                    samples: vec![sample],
                    ..Family::default()
                });
            }
        }
    }
    Ok(families)
}

/// Sample `line` (`name{labels} value …` or `name value …`) with
/// `daemon="DAEMON"` first among its labels; refused when it has a
/// `daemon` label already or its labels do not parse.
pub(super) fn with_daemon(line: &str, daemon: &str) -> Result<String, String> {
    let label = format!("daemon=\"{}\"", label_value(daemon));
    let Some(cut) = line.find(['{', ' ']) else {
        return Err(format!("the sample `{line}` has no value"));
    };
    let (name, rest) = line.split_at(cut);
    let Some(labels) = rest.strip_prefix('{') else {
        return Ok(format!("{name}{{{label}}}{rest}"));
    };
    // The label names, to refuse a `daemon` of the daemon's own; quoted
    // values may hold any of `,}="` escaped.
    let mut chars = labels.char_indices().peekable();
    let mut names = Vec::new();
    let end = loop {
        match chars.peek() {
            Some(&(at, '}')) => break at,
            None => return Err(format!("the sample `{line}` has unclosed labels")),
            _ => {}
        }
        let mut label_name = String::new();
        for (_, c) in chars.by_ref() {
            if c == '=' {
                break;
            }
            label_name.push(c);
        }
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err(format!(
                "the sample `{line}` has a label without a quoted value"
            ));
        }
        let mut escaped = false;
        let mut closed = false;
        for (_, c) in chars.by_ref() {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => {
                    closed = true;
                    break;
                }
                _ => escaped = false,
            }
        }
        if !closed {
            return Err(format!("the sample `{line}` has an unclosed label value"));
        }
        names.push(label_name.trim().to_owned());
        if chars.peek().map(|&(_, c)| c) == Some(',') {
            chars.next();
        }
    };
    if names.iter().any(|n| n == "daemon") {
        return Err(format!(
            "the sample `{line}` has a `daemon` label already (the fleet adds its own)"
        ));
    }
    let separator = if end == 0 { "" } else { "," };
    Ok(format!("{name}{{{label}{separator}{labels}"))
}
