//! The model's calls to engram's history tools, answered by the proxy: each round's reply
//! relayed to the caller as it comes ([`engram::offered::Relay`]: text streams, engram's calls
//! never reach the caller), the calls answered from the history the request carried within the
//! room the request leaves, and the upstream asked again.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use engram::offered::{Answering, Ended, Offered, Relay, Turn};
use engram::tools::ToolReply;
use engram::{Message, TokenCounter};
use serde_json::Value;

use super::outcome::Outcome;
use super::upstream::{Upstream, relay, replay, send};
use super::wire::{Format, parse};
use crate::app::App;
use crate::error::ApiError;

/// What answering the model's calls to engram's history tools needs of the request: the
/// conversation it carried (the caller resends it whole), its model, whether it streams, what
/// the view sent holds verbatim, and the room the request has.
pub(super) struct Recall {
    pub(super) messages: Arc<Vec<Message>>,
    pub(super) model: String,
    pub(super) streamed: bool,
    pub(super) format: Format,
    /// The ids (a message's own, else `m<position>`) of the caller's messages the view sent
    /// holds verbatim.
    pub(super) in_view: HashSet<String>,
    /// The request's counter and room: a follow-up stays within the room.
    pub(super) counter: Arc<TokenCounter>,
    pub(super) room: usize,
}

/// How many of the model's calls engram answered for one caller's request, and the input
/// tokens of the rounds before the last (on the response, for its observer: the rounds of a
/// streamed reply end after its headers went).
#[derive(Clone, Default)]
pub(crate) struct RecallCount {
    pub(crate) calls: Arc<AtomicUsize>,
    pub(crate) earlier_input: Arc<AtomicUsize>,
}

/// The reply the caller gets: the upstream's, as it comes, when engram offered no tools (or
/// the request failed); else the rounds relayed as one reply, engram's calls answered and the
/// upstream asked again (at most [`engram::offered::MAX_ROUNDS`] times).
pub(super) async fn recall_rounds(
    app: &Arc<App>,
    to: Upstream<'_>,
    recall: Option<Recall>,
    sent: &Bytes,
    response: reqwest::Response,
    outcome: &mut Outcome,
) -> Result<Response, ApiError> {
    let (Some(recall), Some(offered)) = (recall, outcome.offered.clone()) else {
        return Ok(relay(response, Some(outcome)));
    };
    if !response.status().is_success() {
        return Ok(relay(response, Some(outcome)));
    }
    let count = RecallCount::default();
    let rounds = Rounds {
        app: Arc::clone(app),
        method: to.method.clone(),
        url: to.url.to_owned(),
        headers: to.headers.clone(),
        request: serde_json::from_slice(sent).map_err(ApiError::internal)?,
        relay: Relay::new(recall.format.wire(), offered.clone(), recall.streamed),
        offered,
        recall,
        count: count.clone(),
    };
    if rounds.recall.streamed {
        // The caller gets the first round's status and headers now, and each round's text as
        // it comes.
        let status = response.status();
        let headers = response.headers().clone();
        let (tx, rx) = channel();
        tokio::spawn(rounds.stream(response, tx));
        let mut out = replay(status, &headers, Body::from_stream(rx), outcome);
        out.extensions_mut().insert(count);
        return Ok(out);
    }
    let (status, headers, body) = rounds.whole(response).await?;
    outcome.recall_calls = count.calls.load(Ordering::Relaxed);
    let mut out = replay(status, &headers, Body::from(body), outcome);
    out.extensions_mut().insert(count);
    Ok(out)
}

/// A channel of body chunks: the sending half, and the stream a response body reads.
type Sender = tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>;

/// A body channel: what the rounds send, and the stream the caller's response body reads.
fn channel() -> (Sender, ReceiverStream) {
    let (tx, rx) = tokio::sync::mpsc::channel(32);
    (tx, ReceiverStream(rx))
}

/// The receiving half of a body channel, as a stream.
struct ReceiverStream(tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl futures_util::Stream for ReceiverStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// One caller's request over its rounds.
struct Rounds {
    app: Arc<App>,
    method: Method,
    url: String,
    headers: HeaderMap,
    /// What went upstream last (the caller's request as compacted, then each follow-up).
    request: Value,
    relay: Relay,
    offered: Offered,
    recall: Recall,
    count: RecallCount,
}

impl Rounds {
    /// A reply that is not streamed: each round read whole; the last one's status, headers and
    /// body (engram's calls left out of it).
    async fn whole(
        mut self,
        mut response: reqwest::Response,
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, Vec<u8>), ApiError> {
        loop {
            let status = response.status();
            let headers = response.headers().clone();
            if !status.is_success() {
                let body = response.bytes().await.unwrap_or_default();
                return Ok((status, headers, body.to_vec()));
            }
            let body = response.bytes().await.map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    format!("the upstream's reply broke off: {e}"),
                )
            })?;
            self.relay.feed(&body);
            let last = self.relay.round() >= engram::offered::MAX_ROUNDS;
            match self.relay.finish(last) {
                Ended::Done(body) => return Ok((status, headers, body)),
                Ended::Recall(turn) => response = self.ask_again(turn).await?,
            }
        }
    }

    /// A streamed reply: each round's events relayed to `tx` as they arrive, the rounds one
    /// reply. A failure after the caller's stream began ends it with the provider's error
    /// event.
    async fn stream(mut self, mut response: reqwest::Response, tx: Sender) {
        loop {
            loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => {
                        let out = self.relay.feed(&chunk);
                        if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
                            return; // the caller went away
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let _ = tx
                            .send(Err(std::io::Error::other(format!(
                                "the upstream's reply broke off: {e}"
                            ))))
                            .await;
                        return;
                    }
                }
            }
            let last = self.relay.round() >= engram::offered::MAX_ROUNDS;
            match self.relay.finish(last) {
                Ended::Done(end) => {
                    let _ = tx.send(Ok(Bytes::from(end))).await;
                    return;
                }
                Ended::Recall(turn) => {
                    match self.ask_again(turn).await {
                        Ok(next) if next.status().is_success() => response = next,
                        Ok(next) => {
                            let status = next.status();
                            let body = next.text().await.unwrap_or_default();
                            let _ = tx
                            .send(Ok(Bytes::from(error_event(
                                self.recall.format,
                                &format!("the upstream answered {status} to engram's follow-up: {body}"),
                            ))))
                            .await;
                            return;
                        }
                        Err(e) => {
                            let _ = tx
                                .send(Ok(Bytes::from(error_event(self.recall.format, &e.message))))
                                .await;
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Answers `turn`'s calls within the room the request leaves, and sends the follow-up.
    async fn ask_again(&mut self, turn: Turn) -> Result<reqwest::Response, ApiError> {
        let wire = self.recall.format.wire();
        let last = self.relay.round() >= engram::offered::MAX_ROUNDS;
        self.count
            .calls
            .fetch_add(turn.calls.len(), Ordering::Relaxed);
        if let Some(usage) = engram::usage::CallUsage::detect(&turn.usage) {
            self.count
                .earlier_input
                .fetch_add(usage.input_tokens, Ordering::Relaxed);
        }
        // The room the follow-up leaves for what is read: the request so far, with the turn
        // and an empty answer to each call, against the request's room.
        let placeholders: Vec<ToolReply> = turn.calls.iter().map(|_| ToolReply::ok("")).collect();
        let mut bare = self.request.clone();
        engram::offered::follow_up(wire, &mut bare, &turn, &placeholders, last);
        let used = self.tokens(&bare);
        let room = self.recall.room.saturating_sub(used);
        // Each call shares what is left. What a read brings is counted as its messages; its
        // answer wraps them (ids, times, JSON escapes), so an answer over the room is asked
        // again for half as much, until it fits or there is nothing left to give.
        let mut read_tokens = room / turn.calls.len().max(1);
        let mut next = None;
        while read_tokens >= MIN_READ_TOKENS {
            let answering = Answering {
                read_tokens,
                in_view: Some(self.recall.in_view.clone()),
            };
            let replies = self.answer(&turn, answering).await?;
            let mut candidate = self.request.clone();
            engram::offered::follow_up(wire, &mut candidate, &turn, &replies, last);
            if self.tokens(&candidate) <= self.recall.room {
                next = Some(candidate);
                break;
            }
            read_tokens /= 2;
        }
        let next = next.unwrap_or_else(|| {
            // No answer fits: the model is told so rather than the request sent over its
            // window.
            let short: Vec<ToolReply> = turn
                .calls
                .iter()
                .map(|_| no_room(used, self.recall.room))
                .collect();
            let mut next = self.request.clone();
            engram::offered::follow_up(wire, &mut next, &turn, &short, last);
            next
        });
        self.request = next;
        let bytes = Bytes::from(serde_json::to_vec(&self.request).map_err(ApiError::internal)?);
        send(
            &self.app,
            self.method.clone(),
            &self.url,
            &self.headers,
            bytes,
        )
        .await
    }

    /// The answers to `turn`'s calls (off the async threads: a search ranks the history).
    async fn answer(&self, turn: &Turn, answering: Answering) -> Result<Vec<ToolReply>, ApiError> {
        let (app, messages, model, calls, offered) = (
            Arc::clone(&self.app),
            Arc::clone(&self.recall.messages),
            self.recall.model.clone(),
            turn.calls.clone(),
            self.offered.clone(),
        );
        let replies = tokio::task::spawn_blocking(move || {
            engram::offered::answer(
                &calls,
                &messages,
                &app.config.registry,
                &model,
                &offered,
                &answering,
            )
        })
        .await
        .map_err(ApiError::internal)?;
        Ok(replies.unwrap_or_else(|e| {
            turn.calls
                .iter()
                .map(|_| ToolReply::error(format!("engram could not answer: {e}")))
                .collect()
        }))
    }

    /// The tokens of a request body as the request's plan counts them.
    fn tokens(&self, body: &Value) -> usize {
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        parse(self.recall.format, &bytes).map_or(usize::MAX, |p| {
            self.recall
                .counter
                .count_conversation(&p.conversation)
                .total()
        })
    }
}

/// The fewest tokens a read is given: below it, nothing worth reading fits.
const MIN_READ_TOKENS: usize = 64;

/// The answer to a call when the request has no room left for what it would read.
fn no_room(used: usize, room: usize) -> ToolReply {
    ToolReply::error(format!(
        "no room left in this request for what this would read: it holds {used} of the {room} tokens it may; answer from what you have"
    ))
}

/// A streamed reply's error event in the caller's format, for a failure after the stream began.
fn error_event(format: Format, message: &str) -> Vec<u8> {
    let data = match format {
        Format::Anthropic => {
            serde_json::json!({"type": "error", "error": {"type": "api_error", "message": message}})
        }
        Format::OpenAi => {
            serde_json::json!({"error": {"message": message, "type": "server_error"}})
        }
        Format::Responses => {
            serde_json::json!({"type": "error", "message": message, "code": "server_error"})
        }
    };
    let name = match format {
        Format::Anthropic => "event: error\n",
        Format::Responses => "event: error\n",
        Format::OpenAi => "",
    };
    format!("{name}data: {data}\n\n").into_bytes()
}
