//! What the benchmarks share: a service whose one step creates nothing, so a
//! benchmark measures steadfast, not a service.

#![allow(dead_code)]

use std::time::Duration;

use steadfast::config::{ConfigSource, ResolvedConfig};
use steadfast::{Plan, Resource, Service, Step, StepContext, StepError};

/// A service with one step that creates nothing.
pub struct Noop;

/// The one step: creates nothing.
pub struct Nothing;

impl Step for Nothing {
    const NAME: &'static str = "noop";
    type Config = toml::Table;
    type Output = ();

    async fn execute(&self, _cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
        Ok(Resource::new("noop", "", ()))
    }
}

impl Service for Noop {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> Plan<toml::Table> {
        Plan::new().step(Nothing)
    }
}

/// A config source that always resolves to an empty table, in place (it
/// reads nothing), as a daemon configured in code has.
pub fn empty_source() -> ConfigSource {
    ConfigSource::fixed(toml::Table::new())
}

/// The same empty table through a closure the supervisor must assume may
/// block, so it resolves on a blocking thread: the yardstick of
/// [`empty_source`]'s in-place resolve.
pub fn blocking_empty_source() -> ConfigSource {
    ConfigSource::new(|| Ok(ResolvedConfig::untracked(toml::Table::new())))
}

/// After a run, print each `(measured, baseline)` pair of `group` as the
/// ratio of their medians, read from the estimates criterion saved in this
/// run (`<target>/criterion/<group>/<name>/new/estimates.json`), so the
/// ratio a goal names comes from one run, not from two runs on a noisy
/// machine. Silent under `cargo test --benches` (one iteration each,
/// nothing saved) and for a pair that was filtered out.
pub fn print_ratios(group: &str, pairs: &[(&str, &str)]) {
    let Some(criterion) = criterion_dir() else {
        return;
    };
    let median = |name: &str| -> Option<f64> {
        let path = criterion.join(group).join(name).join("new/estimates.json");
        let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
        // Only what this process measured.
        if modified < *STARTED.get_or_init(std::time::SystemTime::now) {
            return None;
        }
        let text = std::fs::read_to_string(path).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        json["median"]["point_estimate"].as_f64()
    };
    for (measured, baseline) in pairs {
        if let (Some(m), Some(b)) = (median(measured), median(baseline)) {
            eprintln!(
                "ratio {group}/{measured} ÷ {group}/{baseline} = {:.2}x ({:.1} µs ÷ {:.1} µs, medians of this run)",
                m / b,
                m / 1e3,
                b / 1e3
            );
        }
    }
}

/// When this bench process started measuring: [`mark_start`] sets it.
static STARTED: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();

/// Note the start of the run, so [`print_ratios`] reads only its estimates.
pub fn mark_start() {
    STARTED.get_or_init(std::time::SystemTime::now);
}

/// Criterion's output dir: `$CARGO_TARGET_DIR/criterion`, else the target
/// dir this bench executable sits in (`<target>/<profile>/deps/<exe>`).
fn criterion_dir() -> Option<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Some(std::path::PathBuf::from(dir).join("criterion"));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.parent()?.join("criterion"))
}

/// The median of `samples` (sorted in place).
pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}
