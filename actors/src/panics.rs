//! A caught panic's payload, rendered: what a boot step's, a runtime task's,
//! a config source's or a device job's panic is reported as. A leaf module,
//! so every place that catches a panic can use it without depending on the
//! others.

use std::any::Any;

/// A panic payload, rendered.
#[must_use]
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}
