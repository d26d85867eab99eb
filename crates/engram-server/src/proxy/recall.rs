//! The model's calls to engram's history tools, answered by the proxy: the reply read for
//! them, each answered from the history the request carried, and the upstream asked again.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::outcome::Outcome;
use super::upstream::{Upstream, relay, replay, send};
use super::wire::Format;
use crate::app::App;
use crate::error::ApiError;

/// What answering the model's calls to engram's history tools needs of the request: the
/// conversation it carried (the caller resends it whole), its model and whether it streams.
pub(super) struct Recall {
    pub(super) messages: Arc<Vec<engram::Message>>,
    pub(super) model: String,
    pub(super) streamed: bool,
    pub(super) format: Format,
}

/// The reply the caller gets: the upstream's, as it comes, when engram offered no tools (or
/// the request failed); else, once the model's turn has ended, the turn read for calls to
/// engram's tools, which are answered and the upstream asked again (at most
/// [`engram::offered::MAX_ROUNDS`] times), until a reply calls none; its usage then holds every
/// round's.
pub(super) async fn recall_rounds(
    app: &Arc<App>,
    to: Upstream<'_>,
    recall: Option<&Recall>,
    sent: &Bytes,
    response: reqwest::Response,
    outcome: &mut Outcome,
) -> Result<Response, ApiError> {
    let (Some(recall), Some(offered)) = (recall, outcome.offered.clone()) else {
        return Ok(relay(response, Some(outcome)));
    };
    let wire = recall.format.wire();
    let mut request: Value = serde_json::from_slice(sent).map_err(ApiError::internal)?;
    let mut response = response;
    let mut earlier = Value::Null;
    for round in 0..=engram::offered::MAX_ROUNDS {
        let status = response.status();
        if !status.is_success() {
            return Ok(relay(response, Some(outcome)));
        }
        let upstream_headers = response.headers().clone();
        let body = response.bytes().await.map_err(|e| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                format!("the upstream's reply broke off: {e}"),
            )
        })?;
        let turn = engram::offered::read_reply(wire, &body, recall.streamed, &offered)
            .filter(|t| !t.calls.is_empty() && round < engram::offered::MAX_ROUNDS);
        let Some(turn) = turn else {
            let body = engram::offered::add_usage(wire, &body, recall.streamed, &earlier);
            return Ok(replay(status, &upstream_headers, Body::from(body), outcome));
        };
        let (app2, messages, model, calls, names) = (
            Arc::clone(app),
            Arc::clone(&recall.messages),
            recall.model.clone(),
            turn.calls.clone(),
            offered.clone(),
        );
        let replies = tokio::task::spawn_blocking(move || {
            engram::offered::answer(&calls, &messages, &app2.config.registry, &model, &names)
        })
        .await
        .map_err(ApiError::internal)?
        .unwrap_or_else(|e| {
            turn.calls
                .iter()
                .map(|_| engram::tools::ToolReply::error(format!("engram could not answer: {e}")))
                .collect()
        });
        outcome.recall_calls += turn.calls.len();
        earlier = engram::offered::sum_usage(&earlier, &turn.usage);
        let last = round + 1 == engram::offered::MAX_ROUNDS;
        engram::offered::follow_up(wire, &mut request, &turn, &replies, last);
        let bytes = Bytes::from(serde_json::to_vec(&request).map_err(ApiError::internal)?);
        response = send(app, to.method.clone(), to.url, to.headers, bytes).await?;
    }
    Err(ApiError::internal(
        "the recall rounds ended without a reply",
    ))
}
