//! Catching a future's panic, and rendering a caught payload: what a boot
//! step's, a runtime task's, a child's, a config source's or a device job's
//! panic is reported as. A leaf module, so every place that catches a panic
//! can use it without depending on the others.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;

/// A panic payload, rendered.
#[must_use]
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}

/// `work`, with a panic in any of its polls caught and handed back as its
/// payload.
pub(crate) fn catch_unwind<F: Future>(work: F) -> CatchUnwind<F> {
    CatchUnwind(Box::pin(work))
}

/// `work`, with a panic in any of its polls caught and handed back as the
/// panic's payload (`work` is not polled again, and is dropped with this).
pub(crate) struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let work = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(out)) => std::task::Poll::Ready(Ok(out)),
            Err(payload) => std::task::Poll::Ready(Err(payload)),
        }
    }
}
