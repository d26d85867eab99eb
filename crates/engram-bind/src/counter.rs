//! A token counter for one model (or one tokenizer), with the model's window.

use crate::{Res, err, parse_json, registry, request, to_json};
use engram::{TokenCounter, Tokenizer};
use serde_json::{Value, json};

/// A token counter for one model (or one tokenizer), with the model's window from the registry.
pub struct Counter {
    pub(crate) counter: TokenCounter,
    model: String,
    pub(crate) window: usize,
    max_output_tokens: usize,
    warning: Option<String>,
}

impl Counter {
    pub(crate) fn build(model: Option<&str>, tokenizer: Option<&str>) -> Res<Counter> {
        let registry = registry()?;
        let name = model.unwrap_or_else(|| registry.default_model());
        let resolved = registry.resolve(name);
        let tokenizer = match tokenizer {
            Some(t) => Tokenizer::from_name(t).map_err(err)?,
            None => resolved.spec.tokenizer().map_err(err)?,
        };
        Ok(Counter {
            counter: TokenCounter::new(tokenizer),
            model: name.to_owned(),
            window: resolved.spec.context_window,
            max_output_tokens: resolved.spec.max_output_tokens,
            warning: resolved.warning(),
        })
    }
}

impl Counter {
    /// A counter for `model` (the default model when `None`), or for a tokenizer by name.
    pub fn new(model: Option<&str>, tokenizer: Option<&str>) -> Res<Counter> {
        Counter::build(model, tokenizer)
    }

    /// Tokens of one text.
    pub fn count(&self, text: &str) -> usize {
        self.counter.count_text(text)
    }

    /// Tokens of each text, counted with the interpreter released.
    pub fn count_batch(&self, texts: Vec<String>) -> Vec<usize> {
        texts.iter().map(|t| self.counter.count_text(t)).collect()
    }

    /// A conversation's count as JSON: total, per message, tools. An Anthropic request counts
    /// as the Messages API does (its `system` prompt too, each `tool_use` with its result).
    pub fn count_messages(&self, messages_json: &str, tools_json: Option<&str>) -> Res<String> {
        let (mut conversation, _) = request(messages_json)?;
        if let Some(tools) = tools_json {
            match parse_json(tools, "tools")? {
                Value::Array(t) => conversation.tools = t,
                Value::Null => {}
                _ => return Err(err("tools must be a list of tool definitions")),
            }
        }
        let count = self.counter.count_conversation(&conversation);
        let tools = self.counter.count_tools(&conversation.tools);
        to_json(&json!({
            "total": count.total(),
            "content_tokens": count.content_tokens(),
            "messages": count.messages.iter().map(|m| m.total()).collect::<Vec<_>>(),
            "tools": tools,
            "estimated": count.estimated(),
            "tokenizer": self.counter.tokenizer().id(),
            "model": self.model,
            "window": self.window,
        }))
    }

    /// The model name asked for.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The model's context window (the registry's; the fallback's for an unknown model).
    pub fn window(&self) -> usize {
        self.window
    }

    /// The model's output limit.
    pub fn max_output_tokens(&self) -> usize {
        self.max_output_tokens
    }

    /// The tokenizer's id (`o200k_base`, `chars/4`, ...).
    pub fn tokenizer(&self) -> String {
        self.counter.tokenizer().id().to_string()
    }

    /// True when counts are exact for the model (not an estimate).
    pub fn exact(&self) -> bool {
        self.counter.tokenizer().is_exact()
    }

    /// Why the model's numbers are a guess, when the registry does not know it.
    pub fn warning(&self) -> Option<String> {
        self.warning.clone()
    }
}
