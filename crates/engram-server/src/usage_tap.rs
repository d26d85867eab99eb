//! An upstream's reply read for its usage as it streams to the caller, byte for byte: when the
//! reply ends (or the caller goes away), what the provider said the call used (its cached input
//! tokens too) is handed to a closure, which counts it in the metrics, the inspector's list and
//! the log line.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::response::Response;
use engram::usage::{CallUsage, UsageScanner};
use futures_util::Stream;

/// What is done with a reply's usage once it has ended (`None`: it reported none).
pub(crate) type Done = Box<dyn FnOnce(Option<CallUsage>) + Send>;

/// `response` with its body read for its usage on the way; `done` is called once, at its end.
pub(crate) fn tap(response: Response, done: Done) -> Response {
    let content_type = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    response.map(|body| {
        Body::from_stream(Tapped {
            inner: body.into_data_stream(),
            scanner: Some(UsageScanner::new(&content_type)),
            done: Some(done),
        })
    })
}

struct Tapped<S> {
    inner: S,
    scanner: Option<UsageScanner>,
    done: Option<Done>,
}

impl<S> Tapped<S> {
    fn finish(&mut self) {
        if let (Some(scanner), Some(done)) = (self.scanner.take(), self.done.take()) {
            done(scanner.finish());
        }
    }
}

impl<S, E> Stream for Tapped<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    type Item = Result<Bytes, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = Pin::new(&mut self.inner).poll_next(cx);
        match &next {
            Poll::Ready(Some(Ok(bytes))) => {
                if let Some(scanner) = &mut self.scanner {
                    scanner.feed(bytes);
                }
            }
            Poll::Ready(None) => self.finish(),
            _ => {}
        }
        next
    }
}

impl<S> Drop for Tapped<S> {
    fn drop(&mut self) {
        self.finish();
    }
}
