//! The proxy's state, kept for the server's life: an HTTP client, one token counter per
//! tokenizer, the views it sent (in memory), the count calibrations it read or learned, and the
//! latest requests it proxied, with what each used.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use engram::TokenCounter;
use engram::session::EngramStore;
use serde_json::Value;

/// How many proxied requests the inspector lists (per server, newest first).
pub(crate) const RECENT_REQUESTS: usize = 200;

/// The proxy's state: an HTTP client, one counter per tokenizer, the summaries it wrote and
/// the latest requests it proxied.
pub(crate) struct Proxy {
    pub(crate) http: reqwest::Client,
    counters: Mutex<HashMap<String, Arc<TokenCounter>>>,
    pub(crate) views: crate::views::MemoryViews,
    /// The count calibrations read or learned, by tenant and model (the store keeps them).
    calibrations: Mutex<HashMap<(String, String), engram::calibrate::Calibration>>,
    pub(crate) recent: Mutex<VecDeque<Recent>>,
    next_id: std::sync::atomic::AtomicU64,
    /// Observing: each tenant's [`Savings`].
    savings: Mutex<HashMap<String, Savings>>,
}

/// A proxied request as the inspector lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Recent {
    #[serde(skip)]
    pub(crate) id: u64,
    #[serde(skip)]
    pub(crate) tenant: String,
    #[serde(serialize_with = "engram::timestamp::serialize_time")]
    pub(crate) at: engram::Timestamp,
    pub(crate) route: String,
    pub(crate) model: String,
    pub(crate) status: u16,
    pub(crate) tokens_before: u64,
    pub(crate) tokens_after: u64,
    pub(crate) steps: String,
    pub(crate) cache: String,
    pub(crate) retried: bool,
    pub(crate) ms: f64,
    pub(crate) note: String,
    /// What the upstream said the call used (its prompt cache too), once the reply has ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Billed>,
    /// What went upstream, redacted (only with `keep_bodies`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sent: Option<Value>,
    /// Observing: what engram would have sent instead (`tokens_after` its tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) observed: Option<Would>,
}

/// What engram would have sent for an observed request: of its tokens (`tokens_after`), those a
/// provider's cache would read again, and the conversation it belongs to.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Would {
    /// `None`: engram would have sent the request as it was sent.
    pub(crate) reused: Option<u64>,
    pub(crate) conversation: String,
}

/// What observing says of a tenant's traffic: what it cost, and what it would have cost through
/// engram, in all and per conversation (the latest [`SAVINGS_CONVERSATIONS`]).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Savings {
    pub(crate) requests: u64,
    pub(crate) actual_usd: f64,
    pub(crate) engram_usd: f64,
    pub(crate) tokens_before: u64,
    pub(crate) tokens_after: u64,
    pub(crate) conversations: Vec<Conversation>,
}

/// One conversation's part of [`Savings`].
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Conversation {
    pub(crate) id: String,
    pub(crate) requests: u64,
    pub(crate) actual_usd: f64,
    pub(crate) engram_usd: f64,
}

/// The conversations [`Savings`] lists, the latest first.
pub(crate) const SAVINGS_CONVERSATIONS: usize = 1_000;

/// What the proxy sent upstream for a request, carried on the response to the request's observer.
#[derive(Debug, Clone)]
pub(crate) struct Sent(pub(crate) Bytes);

/// engram's own count of what went upstream (its tokenizer without a factor), for a model whose
/// counts are estimates: what the upstream reports for it calibrates them
/// ([`engram::calibrate`]). Carried on the response to the request's observer.
#[derive(Debug, Clone)]
pub(crate) struct Counted {
    /// The calibration's model (the registry's id, else the name the caller gave).
    pub(crate) model: String,
    pub(crate) tokens: usize,
    pub(crate) tools: bool,
    /// The factor the count of what was sent carried (the registry's or the calibration's).
    pub(crate) factor: f64,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").finish_non_exhaustive()
    }
}

impl Proxy {
    pub(crate) fn new() -> Proxy {
        Proxy {
            http: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .build()
                .unwrap_or_else(|_| reqwest::Client::new()),
            counters: Mutex::new(HashMap::new()),
            views: crate::views::MemoryViews::default(),
            calibrations: Mutex::new(HashMap::new()),
            recent: Mutex::new(VecDeque::new()),
            next_id: std::sync::atomic::AtomicU64::new(0),
            savings: Mutex::new(HashMap::new()),
        }
    }

    /// Lists a proxied request for the inspector; its id, for [`Proxy::billed`].
    pub(crate) fn remember(&self, mut recent: Recent, keep_bodies: usize) -> u64 {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        recent.id = id;
        if recent.tenant.is_empty() {
            return id;
        }
        let mut list = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        list.push_front(recent);
        list.truncate(RECENT_REQUESTS);
        // Only the newest `keep_bodies` keep what was sent: the one that just aged out drops it.
        if let Some(r) = list.get_mut(keep_bodies) {
            r.sent = None;
        }
        id
    }

    /// Adds an observed request's bill, as sent and as engram would have sent it.
    pub(crate) fn observed(&self, recent: &Recent, billed: &Billed) {
        let (Some(would), Some(engram_usd)) = (&recent.observed, billed.engram_usd) else {
            return;
        };
        let mut all = self.savings.lock().unwrap_or_else(|p| p.into_inner());
        let s = all.entry(recent.tenant.clone()).or_default();
        s.requests += 1;
        s.actual_usd += billed.cost_usd;
        s.engram_usd += engram_usd;
        s.tokens_before += recent.tokens_before;
        s.tokens_after += recent.tokens_after;
        let at = s
            .conversations
            .iter()
            .position(|c| c.id == would.conversation);
        let mut c = at
            .map(|i| s.conversations.remove(i))
            .unwrap_or_else(|| Conversation {
                id: would.conversation.clone(),
                ..Conversation::default()
            });
        c.requests += 1;
        c.actual_usd += billed.cost_usd;
        c.engram_usd += engram_usd;
        s.conversations.insert(0, c);
        s.conversations.truncate(SAVINGS_CONVERSATIONS);
    }

    /// The tenant's [`Savings`] so far.
    pub(crate) fn savings(&self, tenant: &str) -> Savings {
        self.savings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant)
            .cloned()
            .unwrap_or_default()
    }

    /// What the request listed as `id` used, once its reply has ended.
    pub(crate) fn billed(&self, id: u64, billed: Billed) {
        let mut list = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = list.iter_mut().find(|r| r.id == id) {
            r.usage = Some(billed);
        }
    }

    /// The calibration of `model`'s counts for `tenant`: as last read or learned, else from the
    /// store (an error reads as none: the registry's factor and the margin apply).
    pub(crate) fn calibration(
        &self,
        tenant: &str,
        model: &str,
        store: impl FnOnce() -> Option<Arc<dyn EngramStore>>,
    ) -> engram::calibrate::Calibration {
        let key = (tenant.to_owned(), model.to_owned());
        if let Some(c) = self
            .calibrations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return c.clone();
        }
        let read = store()
            .and_then(|s| s.calibration(model).ok().flatten())
            .unwrap_or_default();
        self.calibrations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, read.clone());
        read
    }

    /// Learns from what the upstream reported for a request engram counted `counted`.
    pub(crate) fn learn(
        &self,
        store: &dyn EngramStore,
        tenant: &str,
        counted: &Counted,
        reported: usize,
    ) {
        let seen = engram::calibrate::Observation {
            counted: counted.tokens,
            tools: counted.tools,
            reported,
            at: engram::timestamp::now(),
        };
        match store.observe_count(&counted.model, seen) {
            Ok(c) => {
                self.calibrations
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((tenant.to_owned(), counted.model.clone()), c);
            }
            Err(e) => tracing::warn!(error = %e, "proxy: the count calibration could not be kept"),
        }
    }

    pub(crate) fn counter(&self, tokenizer: engram::Tokenizer) -> Arc<TokenCounter> {
        let id = tokenizer.id().to_owned();
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            counters
                .entry(id)
                .or_insert_with(|| Arc::new(TokenCounter::new(tokenizer))),
        )
    }
}

/// What a proxied call used, as the upstream reported it, and what it cost.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Billed {
    /// What the upstream reported (input tokens, cached ones included; those read from and
    /// written to its cache; output tokens).
    #[serde(flatten)]
    pub(crate) usage: engram::usage::CallUsage,
    /// The share of the input read from the cache.
    cached_share: f64,
    /// What the call cost at the registry's prices.
    pub(crate) cost_usd: f64,
    /// What it would have cost sent uncompacted (engram's count of the caller's request), with
    /// the same tokens read from the cache.
    uncompacted_usd: f64,
    /// Observing: what it would have cost as engram would have sent it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) engram_usd: Option<f64>,
}

impl Billed {
    pub(crate) fn of(
        registry: &engram::ModelRegistry,
        recent: &Recent,
        usage: engram::usage::CallUsage,
    ) -> Billed {
        let price = registry.resolve(&recent.model).spec.price;
        let sent_whole = (recent.tokens_before as usize).max(usage.input_tokens);
        // What engram would have sent, as the provider counts: its tokens scaled by how the
        // provider counted what was sent against engram's count of it; what the cache would
        // read again at the cached price, the rest written to the cache (at the write price,
        // where the provider bills writes).
        let engram_usd = recent.observed.as_ref().map(|would| {
            let Some(reused) = would.reused else {
                // The same bytes: the same bill.
                return usage.cost(&price);
            };
            let ratio = usage.input_tokens as f64 / recent.tokens_before.max(1) as f64;
            let tokens = (recent.tokens_after as f64 * ratio).round() as usize;
            let reused = ((reused as f64 * ratio).round() as usize).min(tokens);
            let new = tokens - reused;
            price.cost_with_writes(new, reused, new, usage.output_tokens)
        });
        Billed {
            engram_usd,
            usage,
            cached_share: if usage.input_tokens == 0 {
                0.0
            } else {
                (usage.cached_tokens as f64 / usage.input_tokens as f64 * 1e3).round() / 1e3
            },
            cost_usd: usage.cost(&price),
            uncompacted_usd: price.cost(
                sent_whole.saturating_sub(usage.cached_tokens),
                usage.cached_tokens,
                usage.output_tokens,
            ),
        }
    }
}
