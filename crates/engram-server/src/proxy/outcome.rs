//! What engram did to a proxied request, reported in `x-engram-*` headers and carried on the
//! response to the request's observer.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;

use super::plan::Plan;
use crate::proxy_state::{Counted, Sent};

/// What engram did to a request (reported in `x-engram-*` headers).
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) model: String,
    pub(super) window: usize,
    pub(super) tokens_before: usize,
    pub(super) tokens_after: usize,
    pub(super) estimated: bool,
    pub(super) steps: Vec<&'static str>,
    pub(super) retried: bool,
    /// What became of the prefix the provider caches, for a request engram rewrote: `extended`
    /// (the view this agent's previous request got, and the new messages after it),
    /// `appended` (compacted behind the head that view kept: a summary block added after the
    /// earlier ones) or `rebuilt` (the whole history compacted: the first compaction, the
    /// summaries merged, or a retry).
    pub(super) prefix: Option<&'static str>,
    pub(super) note: Option<String>,
    /// Why engram forwarded the request as sent, when it could not compact it: `unreadable`
    /// (a shape engram does not read), `provider_state` (a conversation the provider holds),
    /// `cannot_fit` (what must be kept is over the window).
    pub(super) uncompacted: Option<&'static str>,
    /// The body sent upstream (for the inspector's list of recent requests).
    pub(super) sent: Option<Bytes>,
    /// engram's own count of what was sent, when its counts are estimates.
    pub(super) counted: Option<Counted>,
    /// engram's history tools, when the request offered them to the model.
    pub(super) offered: Option<engram::offered::Offered>,
    /// How many of the model's calls to them engram answered.
    pub(super) recall_calls: usize,
    /// The ids (a message's own, else `m<position>`) of the caller's messages the view sent
    /// holds verbatim: what `engram_search_history` says the model has in view.
    pub(super) in_view: std::collections::HashSet<String>,
    /// Of what engram sends (or would send), the tokens a provider's cache would read again:
    /// the tools and the messages it shares with what went before it.
    pub(super) reused: usize,
    /// The conversation the request belongs to (its head's hash).
    pub(super) conversation: u128,
    /// Observing: the request went as sent; `tokens_after` is what engram would have sent.
    pub(super) observed: bool,
    /// Whether engram rewrote the request (or would have, observing): `reused` is then what a
    /// cache would read again of it.
    pub(super) rewritten: bool,
}

impl Outcome {
    /// Carries the body sent upstream to the request's observer, which keeps it for the inspector.
    pub(super) fn attach_sent(&self, response: &mut Response) {
        if let Some(sent) = &self.sent {
            response.extensions_mut().insert(Sent(sent.clone()));
        }
        if let Some(counted) = &self.counted {
            response.extensions_mut().insert(counted.clone());
        }
    }

    /// What was sent, as engram counted it without a factor (for a plan whose count is an
    /// estimate).
    pub(super) fn count_sent(&mut self, plan: &Plan, tools: bool) {
        self.counted = plan.estimated.then(|| Counted {
            model: plan.calibration.clone(),
            tokens: (self.tokens_after as f64 / plan.factor).round() as usize,
            tools,
            factor: plan.factor,
        });
    }

    pub(super) fn headers(&self, headers: &mut HeaderMap) {
        let mut put = |name: &'static str, value: String| {
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.insert(HeaderName::from_static(name), v);
            }
        };
        put(
            "x-engram-model",
            crate::metrics::bounded_model(&self.model).to_owned(),
        );
        put("x-engram-tokens-before", self.tokens_before.to_string());
        put("x-engram-tokens-after", self.tokens_after.to_string());
        put("x-engram-window", self.window.to_string());
        put(
            "x-engram-steps",
            if self.steps.is_empty() {
                "none".to_owned()
            } else {
                self.steps.join(",")
            },
        );
        put("x-engram-estimated", self.estimated.to_string());
        if self.offered.is_some() {
            put("x-engram-recall-calls", self.recall_calls.to_string());
        }
        put("x-engram-retried", self.retried.to_string());
        if let Some(prefix) = self.prefix {
            put("x-engram-prefix", prefix.to_owned());
        }
        if self.observed {
            put("x-engram-observed", "true".to_owned());
            if self.rewritten {
                put("x-engram-reused", self.reused.to_string());
            }
            put(
                "x-engram-conversation",
                format!("{:032x}", self.conversation),
            );
        }
        if let Some(reason) = self.uncompacted {
            put("x-engram-uncompacted", reason.to_owned());
        }
        if let Some(note) = &self.note {
            put(
                "x-engram-note",
                note.chars()
                    .filter(|c| c.is_ascii_graphic() || *c == ' ')
                    .take(400)
                    .collect(),
            );
        }
    }
}
