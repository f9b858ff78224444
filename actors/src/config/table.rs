//! What is done to a resolved table: the deep merge of tiers ([`merge`]),
//! the data-dir guard ([`check_data_dir`]), the typed view ([`typed`]), the
//! leaf diff ([`changed_leaves`]) and leaf paths (`server.listen`,
//! `labels."a.b"`).
use super::*;

/// Merges `upper` into `lower`: tables merge key by key, anything else in
/// `upper` replaces what `lower` had.
pub fn merge(lower: &mut Table, upper: Table) {
    for (key, value) in upper {
        match (lower.get_mut(&key), value) {
            (Some(Value::Table(below)), Value::Table(above)) => merge(below, above),
            (_, value) => {
                lower.insert(key, value);
            }
        }
    }
}

/// Refuses a config whose top-level `data_dir` names a directory other than
/// `actual`, the one the daemon holds. Both are compared canonicalized when
/// both exist, else lexically after making them absolute. A config without
/// `data_dir` is accepted.
pub fn check_data_dir(config: &Table, actual: &Path) -> Result<(), ConfigError> {
    let configured = match config.get("data_dir") {
        None => return Ok(()),
        Some(Value::String(configured)) => PathBuf::from(configured),
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "data_dir must be a string path, not a {}",
                other.type_str()
            )));
        }
    };
    let same = match (configured.canonicalize(), actual.canonicalize()) {
        (Ok(configured), Ok(actual)) => configured == actual,
        _ => lexical(&configured) == lexical(actual),
    };
    if same {
        Ok(())
    } else {
        Err(ConfigError::MovesDataDir {
            configured,
            actual: actual.to_path_buf(),
        })
    }
}

/// `path` made absolute against the working directory, with `.` and `..`
/// removed lexically (without touching the file system).
fn lexical(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `config` as the service's config type `C`. A value that does not fit
/// names its dotted leaf and the deserializer's reason; unless
/// `allow_unknown`, a leaf `C` does not know is refused, naming it (the
/// supervisor's own `data_dir` leaf is always accepted).
///
/// # Errors
/// [`ConfigError::Leaf`], [`ConfigError::UnknownLeaves`].
pub fn typed<C: DeserializeOwned>(config: &Table, allow_unknown: bool) -> Result<C, ConfigError> {
    let mut unknown = Vec::new();
    let mut note = |path: serde_ignored::Path<'_>| {
        let leaf = path.to_string();
        if leaf != "data_dir" {
            unknown.push(leaf);
        }
    };
    let ignoring = serde_ignored::Deserializer::new(Value::Table(config.clone()), &mut note);
    let typed = serde_path_to_error::deserialize(ignoring).map_err(|error| ConfigError::Leaf {
        leaf: error.path().to_string(),
        reason: error.into_inner().message().trim_end().to_owned(),
    })?;
    if !allow_unknown && !unknown.is_empty() {
        return Err(ConfigError::UnknownLeaves { leaves: unknown });
    }
    Ok(typed)
}

/// The dotted paths of the leaves that differ between `old` and `new`, that
/// `new` added or that it removed, sorted. Arrays are leaves; an empty table
/// is a leaf of its own.
pub fn changed_leaves(old: &Table, new: &Table) -> Vec<String> {
    let mut out = Vec::new();
    diff_tables(old, new, &mut Vec::new(), &mut out);
    out.sort();
    out.dedup();
    out
}

/// Collects into `out` the changed leaves under the table at `path`.
fn diff_tables(old: &Table, new: &Table, path: &mut Vec<String>, out: &mut Vec<String>) {
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for key in keys {
        path.push(key.clone());
        match (old.get(key), new.get(key)) {
            (Some(Value::Table(a)), Some(Value::Table(b))) => diff_tables(a, b, path, out),
            (Some(a), Some(b)) if a == b => {}
            (a, b) => {
                for value in [a, b].into_iter().flatten() {
                    leaves_of(value, path, out);
                }
            }
        }
        path.pop();
    }
}

/// Collects into `out` every leaf of `value`, which sits at `path`.
fn leaves_of(value: &Value, path: &mut Vec<String>, out: &mut Vec<String>) {
    match value {
        Value::Table(table) if !table.is_empty() => {
            for (key, value) in table {
                path.push(key.clone());
                leaves_of(value, path, out);
                path.pop();
            }
        }
        _ => out.push(join_leaf(path)),
    }
}

/// Whether `key` can be written bare in a leaf path.
fn is_bare(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Writes the keys of a path as a dotted leaf, quoting keys that are not bare.
fn join_leaf(keys: &[String]) -> String {
    keys.iter()
        .map(|key| {
            if is_bare(key) {
                key.clone()
            } else {
                format!("\"{key}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Splits a dotted leaf into its keys; the inverse of [`join_leaf`].
pub(super) fn split_leaf(leaf: &str) -> Result<Vec<String>, ConfigError> {
    let invalid = || ConfigError::Invalid(format!("{leaf:?} is not a dotted leaf path"));
    let mut keys = Vec::new();
    let mut rest = leaf;
    loop {
        let (key, after) = if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').ok_or_else(invalid)?;
            (quoted[..end].to_owned(), &quoted[end + 1..])
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            let key = &rest[..end];
            if !is_bare(key) {
                return Err(invalid());
            }
            (key.to_owned(), &rest[end..])
        };
        keys.push(key);
        if after.is_empty() {
            return Ok(keys);
        }
        rest = after.strip_prefix('.').ok_or_else(invalid)?;
    }
}
