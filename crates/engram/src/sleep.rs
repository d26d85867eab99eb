//! Sleep as a whole (memory consolidation, then compaction of the sessions), and the auto-sleep worker that runs it.
//!
//! One sleep tick consolidates working memory first, then compacts the sessions
//! above the sleep threshold (its first phase: their key facts go to working memory, to be
//! consolidated by a later tick), then applies the archive retention when one is set.
//!
//! [`AutoSleep`] runs ticks on a background thread: every interval it claims the tick in the
//! store (several processes sharing a database do not all consolidate at once) and runs it.
//! Stopping it (or dropping it) runs one last tick: the shutdown trigger.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::Error;
use crate::compact::CompactOptions;
use crate::config::Config;
use crate::memory::consolidation::{SleepPolicy, SleepReport, sleep_with};
use crate::session::{EngramStore, SessionPolicy, SessionsSlept, sleep_sessions};
use crate::timestamp::{Timestamp, now};

/// Everything a sleep tick needs to know.
#[derive(Debug, Clone)]
pub struct SleepSettings {
    /// Working memory's TTL and cap.
    pub policy: SleepPolicy,
    /// Sleep-time compaction thresholds.
    pub sessions: SessionPolicy,
    /// How sessions are compacted (strategy, prompt) and who writes the summaries: its
    /// `summarizer` writes both the sessions' summaries and memory's (`None`: the extractive
    /// digest and summary).
    pub compact: CompactOptions,
    /// Archived originals older than this are deleted; `None` keeps them (the default).
    pub archive_retention_ms: Option<i64>,
}

impl Default for SleepSettings {
    fn default() -> Self {
        SleepSettings {
            policy: SleepPolicy::default(),
            sessions: SessionPolicy::default(),
            compact: CompactOptions::new(1),
            archive_retention_ms: None,
        }
    }
}

impl SleepSettings {
    /// The settings a configuration gives (no summarizer: the caller sets one when it has one).
    pub fn from_config(config: &Config) -> Self {
        SleepSettings {
            policy: config.sleep_policy(),
            sessions: config.session_policy(),
            archive_retention_ms: config.archive_retention_ms(),
            ..SleepSettings::default()
        }
    }
}

/// What one tick did.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct SleepTick {
    /// Memory consolidation.
    pub memory: SleepReport,
    /// Sleep-time compaction of sessions.
    pub sessions: SessionsSlept,
    /// Archived originals deleted by the retention setting.
    pub archive_deleted: usize,
}

impl SleepTick {
    /// What a tick did, as every front reports it: memory's consolidation counts, then
    /// `sessions_compacted`, `timeline_lines` and `archive_deleted`.
    pub fn to_document(&self) -> serde_json::Value {
        let mut doc = serde_json::to_value(self.memory).unwrap_or_else(|_| serde_json::json!({}));
        doc["sessions_compacted"] = serde_json::json!(self.sessions.compacted.len());
        doc["timeline_lines"] = serde_json::json!(self.sessions.timeline_lines);
        doc["archive_deleted"] = serde_json::json!(self.archive_deleted);
        doc
    }
}

/// Runs one sleep tick at `at`.
pub fn sleep_tick(
    store: &dyn EngramStore,
    at: Timestamp,
    settings: &SleepSettings,
) -> Result<SleepTick, Error> {
    let memory = sleep_with(
        store,
        at,
        &settings.policy,
        settings.compact.summarizer.as_deref(),
    )?;
    let sessions = sleep_sessions(store, &settings.sessions, &settings.compact)?;
    let archive_deleted = match settings.archive_retention_ms {
        Some(keep) => store.delete_archived_before(at - keep)?.entries,
        None => 0,
    };
    crate::memory::record_tier_counts(store, at)?;
    Ok(SleepTick {
        memory,
        sessions,
        archive_deleted,
    })
}

/// Runs a tick when one is due (none ran in the last `interval_ms`, by any process sharing
/// the store); `None` when it was not due.
pub fn sleep_if_due(
    store: &dyn EngramStore,
    at: Timestamp,
    interval_ms: i64,
    settings: &SleepSettings,
) -> Result<Option<SleepTick>, Error> {
    if !store.claim_sleep(at, interval_ms)? {
        return Ok(None);
    }
    sleep_tick(store, at, settings).map(Some)
}

#[derive(Debug, Default)]
struct Shared {
    stop: bool,
    /// Run the shutdown tick on the worker's thread before it ends (when dropped).
    final_tick: bool,
    ticks: usize,
    last_error: Option<String>,
}

/// The auto-sleep background worker.
pub struct AutoSleep {
    store: Arc<dyn EngramStore>,
    settings: SleepSettings,
    shared: Arc<(Mutex<Shared>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for AutoSleep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoSleep").finish_non_exhaustive()
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

impl AutoSleep {
    /// Starts the worker: a tick every `interval` (when claimed), until stopped.
    pub fn start(store: Arc<dyn EngramStore>, interval: Duration, settings: SleepSettings) -> Self {
        let shared: Arc<(Mutex<Shared>, Condvar)> = Arc::default();
        let handle = {
            let store = Arc::clone(&store);
            let shared = Arc::clone(&shared);
            let settings = settings.clone();
            let interval_ms = interval.as_millis().min(i64::MAX as u128) as i64;
            std::thread::Builder::new()
                .name("engram-auto-sleep".into())
                .spawn(move || {
                    let (state, wake) = &*shared;
                    loop {
                        let guard = lock(state);
                        let (guard, _) = wake
                            .wait_timeout_while(guard, interval, |s| !s.stop)
                            .unwrap_or_else(|p| p.into_inner());
                        if guard.stop {
                            let final_tick = guard.final_tick;
                            drop(guard);
                            if final_tick
                                && let Err(e) = sleep_tick(store.as_ref(), now(), &settings)
                            {
                                tracing::warn!(error = %e, "the shutdown consolidation failed");
                            }
                            return;
                        }
                        drop(guard);
                        let result = sleep_if_due(store.as_ref(), now(), interval_ms, &settings);
                        let mut s = lock(state);
                        match result {
                            Ok(Some(tick)) => {
                                s.ticks += 1;
                                s.last_error = None;
                                tracing::info!(
                                    consolidated = tick.memory.items_consolidated,
                                    sessions_compacted = tick.sessions.compacted.len(),
                                    "auto-sleep"
                                );
                            }
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "auto-sleep failed; retrying next interval");
                                s.last_error = Some(e.to_string());
                            }
                        }
                    }
                })
                .ok()
        };
        AutoSleep {
            store,
            settings,
            shared,
            handle,
        }
    }

    /// Ticks run so far (not counting the shutdown tick).
    pub fn ticks(&self) -> usize {
        lock(&self.shared.0).ticks
    }

    /// The last tick's error, if it failed.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.shared.0).last_error.clone()
    }

    fn stop_thread(&mut self) {
        lock(&self.shared.0).stop = true;
        self.shared.1.notify_all();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }

    /// Stops the worker and runs the shutdown tick.
    pub fn shutdown(mut self) -> Result<SleepTick, Error> {
        self.stop_thread();
        sleep_tick(self.store.as_ref(), now(), &self.settings)
    }
}

impl Drop for AutoSleep {
    fn drop(&mut self) {
        // The shutdown tick runs on the worker's own thread: the owner may be dropped on a
        // thread that must not block on a store's I/O (an async runtime's worker, say).
        if self.handle.is_some() {
            lock(&self.shared.0).final_tick = true;
            self.stop_thread();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::in_memory::InMemoryStore;
    use crate::memory::{MemoryStore, NewEntry};

    /// `engram serve` builds its settings with this: the proxy and REST sessions then compact
    /// at the configuration's `[session]` threshold and target.
    #[test]
    fn the_settings_take_the_configurations_session_policy() {
        let config = Config::from_toml_str(
            "[session]\nthreshold = 0.7\ntarget = 0.4\nsleep_threshold = 0.5\nsleep_target = 0.3\n\n[memory]\nttl_hours = 6\n",
            "test",
        )
        .expect("valid");
        let settings = SleepSettings::from_config(&config);
        assert_eq!(settings.sessions.trigger.threshold, 0.7);
        assert_eq!(settings.sessions.trigger.target, Some(0.4));
        assert_eq!(settings.sessions.sleep_threshold, 0.5);
        assert_eq!(settings.policy.ttl_ms, 6 * 3600 * 1000);
    }

    fn aged(n: usize) -> Vec<NewEntry> {
        (0..n)
            .map(|i| NewEntry {
                created_at: now() - 13 * 3600 * 1000,
                ..NewEntry::working(format!("fact {i} about src/lib_{i}.rs"), "agent")
            })
            .collect()
    }

    #[test]
    fn the_worker_consolidates_in_the_background_and_at_shutdown() {
        let store: Arc<dyn EngramStore> = Arc::new(InMemoryStore::new());
        store.insert(&aged(5)).expect("insert");
        let worker = AutoSleep::start(
            Arc::clone(&store),
            Duration::from_millis(20),
            SleepSettings::default(),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.stats().expect("stats").working > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            store.stats().expect("stats").working,
            0,
            "consolidated in the background"
        );
        assert!(worker.ticks() >= 1);
        assert_eq!(worker.last_error(), None);
        // What arrives after the last tick is consolidated at shutdown.
        store.insert(&aged(3)).expect("insert");
        let last = worker.shutdown().expect("shutdown tick");
        assert_eq!(last.memory.items_consolidated, 3);
        assert_eq!(store.stats().expect("stats").working, 0);
    }

    #[test]
    fn dropping_the_worker_is_a_graceful_shutdown() {
        let store: Arc<dyn EngramStore> = Arc::new(InMemoryStore::new());
        let worker = AutoSleep::start(
            Arc::clone(&store),
            Duration::from_secs(3600),
            SleepSettings::default(),
        );
        store.insert(&aged(4)).expect("insert");
        drop(worker);
        assert_eq!(store.stats().expect("stats").episodic, 1);
    }

    #[test]
    fn a_tick_is_claimed_once_per_interval() {
        let store = InMemoryStore::new();
        store.insert(&aged(2)).expect("insert");
        let t = now();
        let settings = SleepSettings::default();
        assert!(
            sleep_if_due(&store, t, 60_000, &settings)
                .expect("due")
                .is_some()
        );
        assert!(
            sleep_if_due(&store, t + 10, 60_000, &settings)
                .expect("not due")
                .is_none()
        );
    }
}
