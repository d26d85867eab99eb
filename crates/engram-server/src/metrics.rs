//! Prometheus text metrics: requests and latencies per route and status, compactions and the
//! tokens they saved, and the proxy's requests (by route, model, upstream status and what became
//! of the cached prefix), their tokens before and after, the input tokens the upstream reported
//! (read from its prompt cache, written to it) and the upstream's latency.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Latency buckets, in seconds.
const BUCKETS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// The server's counters.
#[derive(Default)]
pub(crate) struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    compactions: AtomicU64,
    tokens_saved: AtomicU64,
    /// (route, model, upstream status, cache) -> requests.
    proxied: Mutex<BTreeMap<(String, String, u16, String), u64>>,
    /// (route, model) -> (tokens before, tokens after).
    proxied_tokens: Mutex<BTreeMap<(String, String), (u64, u64)>>,
    /// route -> time until the answer (compaction and the upstream, to the headers).
    upstream_latency: Mutex<BTreeMap<String, Histogram>>,
    /// (route, model) -> the upstream's usage.
    usage: Mutex<BTreeMap<(String, String), InputTokens>>,
    /// The model names the registry does not know that have a label of their own.
    unknown_models: Mutex<std::collections::BTreeSet<String>>,
    /// (route, model) -> engram's own rounds.
    recall: Mutex<BTreeMap<(String, String), Rounds>>,
    /// (route, model) -> observed bills: as sent, and as engram would have sent them (USD).
    observed: Mutex<BTreeMap<(String, String), (f64, f64)>>,
    /// (route, model, reason) -> requests forwarded as sent because engram could not compact
    /// them.
    uncompacted: Mutex<BTreeMap<(String, String, String), u64>>,
}

/// The most model names unknown to the registry that get a label of their own; the others are
/// counted as `other`, so that callers cannot grow the metrics without bound.
const UNKNOWN_MODEL_LABELS: usize = 32;

/// A model name as a header or a label shows it: the name when it is at most 64 characters of
/// letters, digits and `._:/@+-` (every real model id), else `other`.
pub(crate) fn bounded_model(name: &str) -> &str {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._:/@+-".contains(&b));
    if plain && !name.is_empty() && name.len() <= 64 {
        name
    } else {
        "other"
    }
}

/// engram's own rounds for proxied requests: calls of its tools answered, requests that had
/// any, and the input tokens of the rounds before the last.
#[derive(Default)]
struct Rounds {
    calls: u64,
    requests: u64,
    earlier_input: u64,
}

/// Input tokens an upstream reported: all of them, read from its cache, written to it.
#[derive(Default)]
struct InputTokens {
    all: u64,
    cached: u64,
    written: u64,
}

/// Upstream latency buckets, in seconds (model calls take seconds to minutes).
const UPSTREAM_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// One proxied request, as the metrics and the log line see it.
pub(crate) struct Proxied<'a> {
    pub(crate) route: &'a str,
    pub(crate) model: &'a str,
    pub(crate) status: u16,
    pub(crate) cache: &'a str,
    pub(crate) tokens_before: u64,
    pub(crate) tokens_after: u64,
    pub(crate) seconds: f64,
}

impl Histogram {
    fn observe(&mut self, buckets: &[f64], seconds: f64) {
        for (i, b) in buckets.iter().enumerate() {
            if seconds <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    /// The histogram's lines for one route, in Prometheus' text format.
    fn render(&self, out: &mut String, name: &str, route: &str, buckets: &[f64]) {
        for (b, n) in buckets.iter().zip(self.counts) {
            let _ = writeln!(out, "{name}_bucket{{route=\"{route}\",le=\"{b}\"}} {n}");
        }
        let count = self.count;
        let _ = writeln!(
            out,
            "{name}_bucket{{route=\"{route}\",le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(out, "{name}_sum{{route=\"{route}\"}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{route=\"{route}\"}} {count}");
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    /// The label of a proxied model: its bounded name when the registry knows it (`known`),
    /// else the same for the first [`UNKNOWN_MODEL_LABELS`] unknown names and `other` after.
    pub(crate) fn model_label(&self, name: &str, known: bool) -> String {
        let name = bounded_model(name);
        if known || name == "other" {
            return name.to_owned();
        }
        let mut unknown = lock(&self.unknown_models);
        if unknown.contains(name) || unknown.len() < UNKNOWN_MODEL_LABELS {
            unknown.insert(name.to_owned());
            name.to_owned()
        } else {
            "other".to_owned()
        }
    }

    pub(crate) fn request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        *lock(&self.requests)
            .entry((method.to_owned(), route.to_owned(), status))
            .or_default() += 1;
        lock(&self.latency)
            .entry(route.to_owned())
            .or_default()
            .observe(&BUCKETS, seconds);
    }

    pub(crate) fn compaction(&self, tokens_before: usize, tokens_after: usize) {
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.tokens_saved.fetch_add(
            tokens_before.saturating_sub(tokens_after) as u64,
            Ordering::Relaxed,
        );
    }

    pub(crate) fn proxied(&self, p: &Proxied<'_>) {
        *lock(&self.proxied)
            .entry((
                p.route.to_owned(),
                p.model.to_owned(),
                p.status,
                p.cache.to_owned(),
            ))
            .or_default() += 1;
        let mut tokens = lock(&self.proxied_tokens);
        let t = tokens
            .entry((p.route.to_owned(), p.model.to_owned()))
            .or_default();
        t.0 += p.tokens_before;
        t.1 += p.tokens_after;
        drop(tokens);
        lock(&self.upstream_latency)
            .entry(p.route.to_owned())
            .or_default()
            .observe(&UPSTREAM_BUCKETS, p.seconds);
    }

    /// engram's own rounds for one proxied request: `calls` of its tools answered, and the
    /// input tokens of the rounds before the last (which the caller's usage leaves out).
    pub(crate) fn recall(&self, route: &str, model: &str, calls: usize, earlier_input: usize) {
        if calls == 0 {
            return;
        }
        let mut all = lock(&self.recall);
        let r = all.entry((route.to_owned(), model.to_owned())).or_default();
        r.calls += calls as u64;
        r.requests += 1;
        r.earlier_input += earlier_input as u64;
    }

    /// An observed request's bill as sent and as engram would have sent it.
    pub(crate) fn observed(&self, route: &str, model: &str, actual: f64, engram: f64) {
        let mut all = lock(&self.observed);
        let o = all.entry((route.to_owned(), model.to_owned())).or_default();
        o.0 += actual;
        o.1 += engram;
    }

    /// A request forwarded as sent because engram could not compact it, and why; true the
    /// first time for this model and reason (the time to say so in the log).
    pub(crate) fn uncompacted(&self, route: &str, model: &str, reason: &str) -> bool {
        let mut all = lock(&self.uncompacted);
        let first = !all
            .keys()
            .any(|(_, m, r)| m.as_str() == model && r.as_str() == reason);
        *all.entry((route.to_owned(), model.to_owned(), reason.to_owned()))
            .or_default() += 1;
        first
    }

    /// What the upstream said a proxied call used.
    pub(crate) fn usage(&self, route: &str, model: &str, usage: &engram::usage::CallUsage) {
        let mut all = lock(&self.usage);
        let u = all.entry((route.to_owned(), model.to_owned())).or_default();
        u.all += usage.input_tokens as u64;
        u.cached += usage.cached_tokens as u64;
        u.written += usage.cache_write_tokens as u64;
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP engram_http_requests_total HTTP requests by method, route and status.\n",
        );
        out.push_str("# TYPE engram_http_requests_total counter\n");
        for ((method, route, status), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "engram_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP engram_http_request_duration_seconds Request latency by route.\n");
        out.push_str("# TYPE engram_http_request_duration_seconds histogram\n");
        for (route, h) in lock(&self.latency).iter() {
            h.render(
                &mut out,
                "engram_http_request_duration_seconds",
                route,
                &BUCKETS,
            );
        }
        out.push_str(
            "# HELP engram_compactions_total Session compactions (automatic and requested).\n",
        );
        out.push_str("# TYPE engram_compactions_total counter\n");
        let _ = writeln!(
            out,
            "engram_compactions_total {}",
            self.compactions.load(Ordering::Relaxed)
        );
        out.push_str("# HELP engram_tokens_saved_total Tokens removed from views by compaction.\n");
        out.push_str("# TYPE engram_tokens_saved_total counter\n");
        let _ = writeln!(
            out,
            "engram_tokens_saved_total {}",
            self.tokens_saved.load(Ordering::Relaxed)
        );
        out.push_str("# HELP engram_proxy_requests_total Proxied model requests by route, model, upstream status and summary cache.\n");
        out.push_str("# TYPE engram_proxy_requests_total counter\n");
        for ((route, model, status, cache), n) in lock(&self.proxied).iter() {
            let _ = writeln!(
                out,
                "engram_proxy_requests_total{{route=\"{route}\",model=\"{}\",status=\"{status}\",cache=\"{cache}\"}} {n}",
                label(model)
            );
        }
        out.push_str("# HELP engram_proxy_tokens_total Tokens of proxied requests as sent by the caller (before) and upstream (after).\n");
        out.push_str("# TYPE engram_proxy_tokens_total counter\n");
        for ((route, model), (before, after)) in lock(&self.proxied_tokens).iter() {
            let model = label(model);
            let _ = writeln!(
                out,
                "engram_proxy_tokens_total{{route=\"{route}\",model=\"{model}\",when=\"before\"}} {before}"
            );
            let _ = writeln!(
                out,
                "engram_proxy_tokens_total{{route=\"{route}\",model=\"{model}\",when=\"after\"}} {after}"
            );
        }
        out.push_str("# HELP engram_proxy_upstream_input_tokens_total Input tokens the upstream reported for proxied calls: all of them, those read from its prompt cache, and those written to it.\n");
        out.push_str("# TYPE engram_proxy_upstream_input_tokens_total counter\n");
        for ((route, model), u) in lock(&self.usage).iter() {
            let model = label(model);
            for (kind, n) in [
                ("all", u.all),
                ("cached", u.cached),
                ("cache_write", u.written),
            ] {
                let _ = writeln!(
                    out,
                    "engram_proxy_upstream_input_tokens_total{{route=\"{route}\",model=\"{model}\",kind=\"{kind}\"}} {n}"
                );
            }
        }
        out.push_str("# HELP engram_proxy_recall_calls_total Calls of engram's history tools the proxy answered, by route and model.\n");
        out.push_str("# TYPE engram_proxy_recall_calls_total counter\n");
        out.push_str("# HELP engram_proxy_recall_input_tokens_total Input tokens of engram's own rounds before the last (the caller's usage describes the last round only).\n");
        out.push_str("# TYPE engram_proxy_recall_input_tokens_total counter\n");
        for ((route, model), r) in lock(&self.recall).iter() {
            let (calls, requests, input) = (r.calls, r.requests, r.earlier_input);
            let model = label(model);
            let _ = writeln!(
                out,
                "engram_proxy_recall_calls_total{{route=\"{route}\",model=\"{model}\"}} {calls}"
            );
            let _ = writeln!(
                out,
                "engram_proxy_recall_requests_total{{route=\"{route}\",model=\"{model}\"}} {requests}"
            );
            let _ = writeln!(
                out,
                "engram_proxy_recall_input_tokens_total{{route=\"{route}\",model=\"{model}\"}} {input}"
            );
        }
        out.push_str("# HELP engram_proxy_observed_usd_total Observing: what proxied requests cost as sent (bill=\"actual\") and would have cost through engram (bill=\"engram\").\n");
        out.push_str("# TYPE engram_proxy_observed_usd_total counter\n");
        for ((route, model), (actual, engram)) in lock(&self.observed).iter() {
            let model = label(model);
            let _ = writeln!(
                out,
                "engram_proxy_observed_usd_total{{route=\"{route}\",model=\"{model}\",bill=\"actual\"}} {actual}"
            );
            let _ = writeln!(
                out,
                "engram_proxy_observed_usd_total{{route=\"{route}\",model=\"{model}\",bill=\"engram\"}} {engram}"
            );
        }
        out.push_str("# HELP engram_proxy_uncompacted_total Proxied requests forwarded as sent because engram could not compact them, by route, model and reason.\n");
        out.push_str("# TYPE engram_proxy_uncompacted_total counter\n");
        for ((route, model, reason), n) in lock(&self.uncompacted).iter() {
            let _ = writeln!(
                out,
                "engram_proxy_uncompacted_total{{route=\"{route}\",model=\"{}\",reason=\"{}\"}} {n}",
                label(model),
                label(reason)
            );
        }
        out.push_str("# HELP engram_proxy_duration_seconds Time until a proxied request has its answer (compaction and the upstream, to the headers), by route.\n");
        out.push_str("# TYPE engram_proxy_duration_seconds histogram\n");
        for (route, h) in lock(&self.upstream_latency).iter() {
            h.render(
                &mut out,
                "engram_proxy_duration_seconds",
                route,
                &UPSTREAM_BUCKETS,
            );
        }
        out
    }
}

/// A label value as Prometheus' text format wants it (quotes, backslashes and newlines escaped).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_labels_are_bounded() {
        let m = Metrics::default();
        assert_eq!(m.model_label("gpt-4o", true), "gpt-4o");
        assert_eq!(m.model_label(&"x".repeat(3000), true), "other");
        assert_eq!(m.model_label("evil\"name", false), "other");
        for i in 0..UNKNOWN_MODEL_LABELS {
            assert_eq!(
                m.model_label(&format!("local-{i}"), false),
                format!("local-{i}")
            );
        }
        assert_eq!(
            m.model_label("local-0", false),
            "local-0",
            "a name seen keeps its label"
        );
        assert_eq!(m.model_label("one-too-many", false), "other");
        assert_eq!(
            m.model_label("gpt-4o-mini", true),
            "gpt-4o-mini",
            "known names always do"
        );
    }
}
