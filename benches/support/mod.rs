//! What the benchmarks share: a service whose one step creates nothing, so a
//! benchmark measures steadfast, not a service.

#![allow(dead_code)]

use steadfast::config::{ConfigSource, ResolvedConfig};
use steadfast::{Made, Plan, Service, Step, StepContext, StepError};

/// A service with one step that creates nothing.
pub struct Noop;

/// The one step: creates nothing.
pub struct Nothing;

impl Step for Nothing {
    const NAME: &'static str = "noop";
    type Config = toml::Table;
    type Output = ();

    async fn execute(&self, _cx: StepContext<'_, toml::Table>) -> Result<Made<()>, StepError> {
        Ok(Made::new("noop", "", ()))
    }
}

impl Service for Noop {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> Plan<toml::Table> {
        Plan::new().step(Nothing)
    }
}

/// A config source that always resolves to an empty table.
pub fn empty_source() -> ConfigSource {
    ConfigSource::new(|| Ok(ResolvedConfig::untracked(toml::Table::new())))
}
