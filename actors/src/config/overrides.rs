//! The override tier ([`Overrides`]): leaves set at run time by the control
//! plane, keyed by dotted path, that win over the defaults and the declared
//! file; and how a leaf's value is parsed from and shown as text.
use super::*;

/// The override tier: leaves set at run time (by the control plane), keyed by
/// dotted path, that win over the defaults and the declared file. Clones
/// share the same tier.
#[derive(Clone, Default)]
pub struct Overrides(Arc<RwLock<BTreeMap<String, Value>>>);

impl Overrides {
    /// An empty override tier.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `leaf` to `value`, returning the value it replaces. A table value
    /// merges into the tiers below like any other table.
    pub fn set(&self, leaf: &str, value: Value) -> Result<Option<Value>, ConfigError> {
        split_leaf(leaf)?;
        Ok(self
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(leaf.to_owned(), value))
    }

    /// Removes the override of `leaf`, returning the value it had.
    pub fn unset(&self, leaf: &str) -> Option<Value> {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(leaf)
    }

    /// The override of `leaf`, if one is set.
    pub fn get(&self, leaf: &str) -> Option<Value> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(leaf)
            .cloned()
    }

    /// Every override, sorted by leaf.
    pub fn list(&self) -> Vec<(String, Value)> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(leaf, value)| (leaf.clone(), value.clone()))
            .collect()
    }

    /// A tier of its own holding a copy of this one's leaves: changes to it
    /// are invisible here until [`Self::replace_with`].
    #[must_use]
    pub fn clone_detached(&self) -> Self {
        let leaves = self
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Self(Arc::new(RwLock::new(leaves)))
    }

    /// Adopt `other`'s leaves (every clone of this tier sees them).
    pub fn replace_with(&self, other: &Self) {
        let leaves = other
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = leaves;
    }

    /// As [`Self::unset`], refusing a malformed leaf.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when `leaf` is not a dotted path.
    pub fn unset_checked(&self, leaf: &str) -> Result<Option<Value>, ConfigError> {
        split_leaf(leaf)?;
        Ok(self.unset(leaf))
    }

    /// Every override with its value as TOML text (how the control
    /// directory keeps them), sorted by leaf.
    #[must_use]
    pub fn to_text(&self) -> Vec<(String, String)> {
        self.list()
            .into_iter()
            .map(|(leaf, value)| (leaf, value_text(&value)))
            .collect()
    }

    /// Set every `(leaf, TOML text)` (what [`Self::to_text`] gave).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first leaf or value that does not
    /// parse; nothing is set then.
    pub fn load_text(&self, leaves: &[(String, String)]) -> Result<(), ConfigError> {
        let staged = self.clone_detached();
        for (leaf, text) in leaves {
            let value = parse_value_strict(text).ok_or_else(|| {
                ConfigError::Invalid(format!("override {leaf}: {text:?} is not a TOML value"))
            })?;
            staged.set(leaf, value)?;
        }
        self.replace_with(&staged);
        Ok(())
    }

    /// Put this tier on top of `config` (the tiers below it), merged deeply.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a leaf that is not a dotted path.
    pub fn merge_over(&self, config: &mut Table) -> Result<(), ConfigError> {
        merge(config, self.as_table()?);
        Ok(())
    }

    /// The tier as one table, each leaf nested at its path. Overrides are
    /// applied in leaf order, so `a = {..}` is applied before `a.b`.
    fn as_table(&self) -> Result<Table, ConfigError> {
        let overrides = self.0.read().unwrap_or_else(PoisonError::into_inner);
        let mut table = Table::new();
        for (leaf, value) in overrides.iter() {
            let segments = split_leaf(leaf)?;
            let mut nested = value.clone();
            for key in segments.into_iter().rev() {
                let mut wrapper = Table::new();
                wrapper.insert(key, nested);
                nested = Value::Table(wrapper);
            }
            if let Value::Table(nested) = nested {
                merge(&mut table, nested);
            }
        }
        Ok(table)
    }
}

impl fmt::Debug for Overrides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.list()).finish()
    }
}

/// A value as an operator types it: TOML (`8080`, `true`, `"text"`,
/// `[1, 2]`, `{ a = 1 }`), or else the text itself as a string (`debug`).
#[must_use]
pub fn parse_value(text: &str) -> Value {
    parse_value_strict(text).unwrap_or_else(|| Value::String(text.to_owned()))
}

/// `text` as one TOML value, if it is one.
fn parse_value_strict(text: &str) -> Option<Value> {
    let mut table: Table = toml::from_str(&format!("value = {text}")).ok()?;
    let value = table.remove("value")?;
    table.is_empty().then_some(value)
}

/// A value as TOML text (inline form), the inverse of [`parse_value`].
#[must_use]
pub fn value_text(value: &Value) -> String {
    let mut table = Table::new();
    table.insert("value".into(), value.clone());
    let text = toml::to_string(&table).unwrap_or_default();
    match text.trim().strip_prefix("value = ") {
        Some(inline) => inline.to_owned(),
        None => value.to_string(),
    }
}
