//! Prometheus text metrics: requests and latencies per route and status, compactions and the
//! tokens they saved.

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
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    pub(crate) fn request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        *lock(&self.requests)
            .entry((method.to_owned(), route.to_owned(), status))
            .or_default() += 1;
        let mut latency = lock(&self.latency);
        let h = latency.entry(route.to_owned()).or_default();
        for (i, b) in BUCKETS.iter().enumerate() {
            if seconds <= *b {
                h.counts[i] += 1;
            }
        }
        h.sum += seconds;
        h.count += 1;
    }

    pub(crate) fn compaction(&self, tokens_before: usize, tokens_after: usize) {
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.tokens_saved.fetch_add(
            tokens_before.saturating_sub(tokens_after) as u64,
            Ordering::Relaxed,
        );
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
            for (b, n) in BUCKETS.iter().zip(h.counts) {
                let _ = writeln!(
                    out,
                    "engram_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{b}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "engram_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "engram_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "engram_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.count
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
        out
    }
}
