//! What the benchmarks share: a service whose one step creates nothing, so a
//! benchmark measures steadfast, not a service.

#![allow(dead_code)]

use steadfast::{
    BoxFuture, Checkpoint, ConfigSource, Observation, ResolvedConfig, ResourceRecord, Runtime,
    Service, StepContext, StepError,
};

/// A service with one step that creates nothing.
pub struct Noop;

impl Service for Noop {
    fn plan(&self, _config: &toml::Table) -> Vec<String> {
        vec!["noop".into()]
    }
    fn execute<'a>(
        &'a self,
        _step: &'a str,
        _cx: StepContext<'a>,
    ) -> BoxFuture<'a, Result<ResourceRecord, StepError>> {
        Box::pin(async {
            Ok(ResourceRecord {
                kind: "noop".into(),
                id: String::new(),
                payload: Vec::new(),
            })
        })
    }
    fn observe<'a>(
        &'a self,
        _checkpoint: &'a Checkpoint,
        _runtime: &'a Runtime,
    ) -> BoxFuture<'a, Observation> {
        Box::pin(async { Observation::Gone })
    }
    fn destroy<'a>(
        &'a self,
        _checkpoint: &'a Checkpoint,
        _runtime: &'a mut Runtime,
    ) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(async { Ok(()) })
    }
}

/// A config source that always resolves to an empty table.
pub fn empty_source() -> ConfigSource {
    ConfigSource::new(|| Ok(ResolvedConfig::untracked(toml::Table::new())))
}
