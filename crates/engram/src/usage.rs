//! What a model call used, as the provider's reply reports it: input tokens, those read from
//! its prompt cache and those written to it, output tokens; in OpenAI's Chat Completions and
//! Responses shapes and Anthropic's, from a whole JSON reply or from a stream of server-sent
//! events ([`UsageScanner`]).

use serde_json::Value;

/// Tokens one model call used, as its reply's `usage` object reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct CallUsage {
    /// Input tokens, cached ones included.
    pub input_tokens: usize,
    /// Input tokens read from the provider's prompt cache.
    pub cached_tokens: usize,
    /// Input tokens written to the provider's prompt cache (Anthropic bills them at 1.25x).
    pub cache_write_tokens: usize,
    /// Output tokens.
    pub output_tokens: usize,
}

fn n(v: &Value) -> usize {
    v.as_u64().unwrap_or(0) as usize
}

/// The tokens an OpenAI usage's details say were written to the prompt cache (GPT-5.6 and
/// later bill them: `cache_write_tokens`, `cache_write_input_tokens` in some reports).
fn written(details: &Value) -> usize {
    n(&details["cache_write_tokens"]).max(n(&details["cache_write_input_tokens"]))
}

impl CallUsage {
    /// Chat Completions' shape (`prompt_tokens`, `completion_tokens`,
    /// `prompt_tokens_details.cached_tokens`); a missing number is 0.
    pub fn openai(usage: &Value) -> Self {
        CallUsage {
            input_tokens: n(&usage["prompt_tokens"]),
            cached_tokens: n(&usage["prompt_tokens_details"]["cached_tokens"]),
            cache_write_tokens: written(&usage["prompt_tokens_details"]),
            output_tokens: n(&usage["completion_tokens"]),
        }
    }

    /// The Responses API's shape (`input_tokens`, `output_tokens`,
    /// `input_tokens_details.cached_tokens`).
    pub fn responses(usage: &Value) -> Self {
        CallUsage {
            input_tokens: n(&usage["input_tokens"]),
            cached_tokens: n(&usage["input_tokens_details"]["cached_tokens"]),
            cache_write_tokens: written(&usage["input_tokens_details"]),
            output_tokens: n(&usage["output_tokens"]),
        }
    }

    /// Anthropic's shape: `input_tokens` leaves out cache reads and writes, which are added.
    pub fn anthropic(usage: &Value) -> Self {
        let read = n(&usage["cache_read_input_tokens"]);
        let write = n(&usage["cache_creation_input_tokens"]);
        CallUsage {
            input_tokens: n(&usage["input_tokens"]) + read + write,
            cached_tokens: read,
            cache_write_tokens: write,
            output_tokens: n(&usage["output_tokens"]),
        }
    }

    /// Any of the three shapes, told apart by their keys; `None` when it has neither
    /// `prompt_tokens` nor `input_tokens`.
    pub fn detect(usage: &Value) -> Option<Self> {
        if usage.get("prompt_tokens").is_some() {
            Some(Self::openai(usage))
        } else if usage.get("input_tokens_details").is_some() {
            Some(Self::responses(usage))
        } else if usage.get("input_tokens").is_some() {
            Some(Self::anthropic(usage))
        } else {
            None
        }
    }

    /// The cost in USD at `price` (cached tokens at the cached price).
    pub fn cost(&self, price: &crate::registry::Pricing) -> f64 {
        price.cost_with_writes(
            self.input_tokens.saturating_sub(self.cached_tokens),
            self.cached_tokens,
            self.cache_write_tokens,
            self.output_tokens,
        )
    }

    /// This usage with `later`'s numbers where it has them (a stream reports input at its start
    /// and output at its end).
    fn merge(self, later: CallUsage) -> CallUsage {
        let pick = |a: usize, b: usize| if b > 0 { b } else { a };
        CallUsage {
            input_tokens: pick(self.input_tokens, later.input_tokens),
            cached_tokens: pick(self.cached_tokens, later.cached_tokens),
            cache_write_tokens: pick(self.cache_write_tokens, later.cache_write_tokens),
            output_tokens: pick(self.output_tokens, later.output_tokens),
        }
    }
}

/// Reads the usage of a reply as its bytes go by: a JSON body (read whole at the end, up to a
/// cap) or server-sent events (each `data:` line as it completes). Nothing is held beyond the
/// line being read, or the body up to [`UsageScanner::MAX_BODY`].
#[derive(Debug, Default)]
pub struct UsageScanner {
    /// The bytes of the line (events) or of the body (JSON) not read yet.
    pending: Vec<u8>,
    /// True once the reply shows itself a stream of events.
    events: Option<bool>,
    /// What the events reported so far.
    seen: Option<CallUsage>,
    /// True when a JSON body outgrew the cap (its usage is not read).
    too_long: bool,
}

impl UsageScanner {
    /// The most of a JSON reply kept to read its usage.
    pub const MAX_BODY: usize = 8 << 20;

    /// A scanner for a reply whose `content-type` is `content_type`.
    pub fn new(content_type: &str) -> Self {
        UsageScanner {
            events: Some(content_type.contains("text/event-stream")),
            ..UsageScanner::default()
        }
    }

    /// Reads the next bytes of the reply.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.events == Some(true) {
            for &b in chunk {
                if b == b'\n' {
                    let line = std::mem::take(&mut self.pending);
                    self.event_line(&line);
                } else if self.pending.len() < Self::MAX_BODY {
                    self.pending.push(b);
                }
            }
        } else if !self.too_long {
            if self.pending.len() + chunk.len() > Self::MAX_BODY {
                self.too_long = true;
                self.pending = Vec::new();
            } else {
                self.pending.extend_from_slice(chunk);
            }
        }
    }

    fn event_line(&mut self, line: &[u8]) {
        let Some(data) = line
            .strip_prefix(b"data:")
            .map(|d| d.strip_prefix(b" ").unwrap_or(d))
        else {
            return;
        };
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        // Chat chunks and Anthropic's message_delta carry `usage`; Anthropic's message_start
        // carries `message.usage`, Responses' response.completed `response.usage`.
        for usage in [
            &event["usage"],
            &event["message"]["usage"],
            &event["response"]["usage"],
        ] {
            if let Some(u) = (!usage.is_null())
                .then(|| CallUsage::detect(usage))
                .flatten()
            {
                self.seen = Some(self.seen.map_or(u, |s| s.merge(u)));
            } else if usage.get("output_tokens").is_some() {
                // Anthropic's message_delta may report only the output.
                let u = CallUsage {
                    output_tokens: n(&usage["output_tokens"]),
                    ..CallUsage::default()
                };
                self.seen = Some(self.seen.map_or(u, |s| s.merge(u)));
            }
        }
    }

    /// The usage the reply reported, once it has ended; `None` when it reported none.
    pub fn finish(mut self) -> Option<CallUsage> {
        if self.events == Some(true) {
            let line = std::mem::take(&mut self.pending);
            self.event_line(&line);
            return self.seen;
        }
        if self.too_long {
            return None;
        }
        let body: Value = serde_json::from_slice(&self.pending).ok()?;
        CallUsage::detect(&body["usage"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_three_shapes_whole_and_streamed() {
        let chat = json!({"usage": {"prompt_tokens": 100, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 64}}});
        let responses = json!({"usage": {"input_tokens": 100, "output_tokens": 5,
            "input_tokens_details": {"cached_tokens": 64}}});
        let anthropic = json!({"usage": {"input_tokens": 20, "output_tokens": 5,
            "cache_read_input_tokens": 64, "cache_creation_input_tokens": 16}});
        for body in [&chat, &responses] {
            let mut s = UsageScanner::new("application/json");
            let bytes = body.to_string();
            let (a, b) = bytes.as_bytes().split_at(7);
            s.feed(a);
            s.feed(b);
            assert_eq!(
                s.finish(),
                Some(CallUsage {
                    input_tokens: 100,
                    cached_tokens: 64,
                    cache_write_tokens: 0,
                    output_tokens: 5
                })
            );
        }
        let mut s = UsageScanner::new("application/json");
        s.feed(anthropic.to_string().as_bytes());
        assert_eq!(
            s.finish(),
            Some(CallUsage {
                input_tokens: 100,
                cached_tokens: 64,
                cache_write_tokens: 16,
                output_tokens: 5
            })
        );

        // Streams: chat's last chunk; Anthropic's start and delta; Responses' completed event.
        let streams = [
            format!(
                "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                json!({"choices": [{"delta": {"content": "ok"}}], "usage": null}),
                json!({"choices": [], "usage": chat["usage"]})
            ),
            format!(
                "event: message_start\ndata: {}\n\nevent: message_delta\ndata: {}\n\n",
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 20,
                    "cache_read_input_tokens": 64, "cache_creation_input_tokens": 16, "output_tokens": 1}}}),
                json!({"type": "message_delta", "usage": {"output_tokens": 5}})
            ),
            format!(
                "event: response.completed\ndata: {}\n\n",
                json!({"type": "response.completed", "response": {"usage": responses["usage"]}})
            ),
        ];
        for (stream, writes) in streams.iter().zip([0, 16, 0]) {
            let mut s = UsageScanner::new("text/event-stream; charset=utf-8");
            for chunk in stream.as_bytes().chunks(9) {
                s.feed(chunk);
            }
            let u = s.finish().expect("usage");
            assert_eq!(
                (
                    u.input_tokens,
                    u.cached_tokens,
                    u.cache_write_tokens,
                    u.output_tokens
                ),
                (100, 64, writes, 5),
                "{stream}"
            );
        }
        assert_eq!(UsageScanner::new("application/json").finish(), None);
    }
}
