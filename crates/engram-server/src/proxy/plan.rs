//! How much room a proxied request has, and how the proxy compacts it.

use std::sync::Arc;

use engram::TokenCounter;
use engram::compact::stable::Stable;
use engram::compact::{CompactOptions, Strategy};

use super::wire::Parsed;
use crate::app::App;

/// The budget for a request: what the window leaves after the reply, less the margin when the
/// count is an estimate (narrowed, or widened, by the model's calibration once it has one).
pub(super) struct Plan {
    pub(super) counter: Arc<TokenCounter>,
    pub(super) window: usize,
    pub(super) room: usize,
    pub(super) estimated: bool,
    /// The safety margin kept over an estimated count (0 for an exact one).
    pub(super) margin: f64,
    /// The factor the counter multiplies its tokenizer's counts by.
    pub(super) factor: f64,
    /// The model the count's calibration is kept under.
    pub(super) calibration: String,
}

pub(super) fn plan(app: &App, tenant: &str, parsed: &Parsed) -> Plan {
    let resolved = app.config.registry.resolve(&parsed.model);
    let configured = app.config.proxy.model_windows.get(&parsed.model).copied();
    let window = configured.unwrap_or(resolved.spec.context_window);
    let mut tokenizer = resolved
        .spec
        .tokenizer()
        .unwrap_or_else(|_| engram::Tokenizer::chars_per_token(4));
    let estimated = !tokenizer.is_exact();
    let mut room = engram::compact::policy::request_limit(
        window,
        resolved.spec.max_output_tokens,
        parsed.max_tokens,
    );
    let calibration = if resolved.spec.id.is_empty() {
        parsed.model.clone()
    } else {
        resolved.spec.id.clone()
    };
    let mut margin = 0.0;
    if estimated {
        margin = app.config.proxy.estimate_margin;
        let learned = app.proxy.calibration(tenant, &calibration, || {
            app.tenant_store(tenant).ok().map(|s| Arc::clone(&s.store))
        });
        if let (Some(factor), Ok(base)) = (
            learned.factor(),
            engram::Tokenizer::from_name(&resolved.spec.tokenizer),
        ) {
            tokenizer = base.scaled(factor);
            margin = learned.margin(margin);
            if !parsed.conversation.tools.is_empty() {
                room = room.saturating_sub(learned.tools_overhead().unwrap_or(0));
            }
        }
        room = (room as f64 / (1.0 + margin)) as usize;
    }
    Plan {
        margin,
        factor: tokenizer.factor(),
        counter: app.proxy.counter(tokenizer),
        window,
        room,
        estimated,
        calibration,
    }
}

/// The options every compaction of the proxy runs with: the configured pipeline (the
/// summarizer of `[summarizer]` / `--summarizer` when there is one).
pub(super) fn options(app: &App) -> CompactOptions {
    let mut options = CompactOptions::new(1);
    options.strategy = Strategy::Auto;
    options.summarizer = app.config.summarizer().cloned();
    options
}

/// How the proxy compacts a request of `plan`: the sessions' policy, against the room the
/// request leaves for its reply.
pub(super) fn stable<'o>(app: &App, plan: &Plan, options: &'o CompactOptions) -> Stable<'o> {
    Stable {
        trigger: app.config.policy().trigger,
        limit: plan.room,
        options,
    }
}
