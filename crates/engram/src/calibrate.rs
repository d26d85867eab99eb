//! Counts calibrated from what the provider reports.
//!
//! Claude's tokenizer is not public: a Claude request is counted with cl100k times the
//! registry's factor (1.25), and the proxy keeps a safety margin besides. Every reply's `usage`
//! says how many input tokens the request really was, so the proxy learns, per model, how the
//! provider's count follows engram's own (cl100k without a factor): a [`Calibration`], kept in
//! the store ([`CalibrationStore`]) so that a restart, another server on the same database and
//! `engram count` use it.
//!
//! The provider's count is fitted as `ratio * counted + overhead * tools`, where `tools` is 1
//! for a request that defines tools: Anthropic adds a hidden prompt of several hundred tokens to
//! such a request, which no ratio of a short request's count could follow. The fit is a least
//! squares over decayed sums (recent requests count most, large ones as much as their size); the
//! margin kept over it is twice the relative error it made on each request before it learned
//! from it, within [`MIN_MARGIN`] and [`MAX_MARGIN`].

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::timestamp::Timestamp;

/// Requests observed before a calibration replaces the registry's factor.
pub const MIN_SAMPLES: u64 = 3;

/// The smallest safety margin a calibration narrows to.
pub const MIN_MARGIN: f64 = 0.02;

/// The largest safety margin a calibration widens to.
pub const MAX_MARGIN: f64 = 0.5;

/// Each observation's weight falls by half after this many later ones.
const HALF_LIFE: f64 = 200.0;

/// The provider's counts an observation may have, against engram's own count (cl100k): at least
/// this share of it ...
pub const MIN_RATIO: f64 = 0.5;

/// ... and at most this multiple of it, plus [`MAX_OVERHEAD`]. Claude's tokenizer counts the same
/// text 1.0 to 1.5 times cl100k's; a reply whose usage is outside these bounds does not describe
/// the one request engram counted (a sum over several calls, a request rewritten on the way) and
/// would teach the calibration a ratio no request has.
pub const MAX_RATIO: f64 = 3.0;

/// The most tokens a provider adds to a request on its own (Anthropic's hidden prompt for tool
/// use is several hundred).
pub const MAX_OVERHEAD: f64 = 2_000.0;

/// What a model's counts have been, as the provider reported them: the decayed sums of the
/// least squares fit of `reported = ratio * counted + overhead * tools`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Requests observed.
    pub samples: u64,
    /// Sum of `counted²`.
    pub xx: f64,
    /// Sum of `counted * tools`.
    pub xt: f64,
    /// Sum of `tools` (a request with tools counts 1).
    pub tt: f64,
    /// Sum of `counted * reported`.
    pub xy: f64,
    /// Sum of `tools * reported`.
    pub ty: f64,
    /// How far the fit made before each request was from what the provider reported for it, in
    /// tokens (from the [`MIN_SAMPLES`]th request on).
    pub error: f64,
    /// The provider's counts of the requests `error` measured.
    pub error_base: f64,
    /// When the last request was observed (milliseconds since the epoch).
    pub updated_at: Timestamp,
}

impl crate::stored::StoredJson for Calibration {
    const WHAT: &'static str = "a count calibration";
}

impl Calibration {
    /// This calibration after one more request: engram counted `counted` tokens (without a
    /// factor) for a request with or without `tools`, the provider reported `reported`. A request
    /// either count says is empty is not learned from, nor one whose report is outside
    /// [`MIN_RATIO`] and [`MAX_RATIO`] of the count ([`Calibration::plausible`]).
    #[must_use]
    pub fn observed(
        &self,
        counted: usize,
        tools: bool,
        reported: usize,
        at: Timestamp,
    ) -> Calibration {
        let mut next = self.clone();
        if counted == 0 || reported == 0 || !Self::plausible(counted, reported) {
            return next;
        }
        let keep = 0.5_f64.powf(1.0 / HALF_LIFE);
        let (x, t, y) = (counted as f64, f64::from(u8::from(tools)), reported as f64);
        if let Some(predicted) = self.estimate(counted, tools) {
            next.error = self.error * keep + (predicted - y).abs();
            next.error_base = self.error_base * keep + y;
        }
        next.xx = self.xx * keep + x * x;
        next.xt = self.xt * keep + x * t;
        next.tt = self.tt * keep + t * t;
        next.xy = self.xy * keep + x * y;
        next.ty = self.ty * keep + t * y;
        next.samples = self.samples + 1;
        next.updated_at = at;
        next
    }

    /// Whether a provider's count of `reported` tokens can describe a request engram counts
    /// `counted` tokens (without a factor).
    pub fn plausible(counted: usize, reported: usize) -> bool {
        let (x, y) = (counted as f64, reported as f64);
        y >= MIN_RATIO * x && y <= MAX_RATIO * x + MAX_OVERHEAD
    }

    /// The fit, `(ratio, overhead)`, once any request was observed: without a request that
    /// had tools (or with too few to tell the two apart), the overhead is 0.
    pub fn fit(&self) -> Option<(f64, f64)> {
        if self.samples == 0 || self.xx <= 0.0 {
            return None;
        }
        let det = self.xx * self.tt - self.xt * self.xt;
        if self.tt > 0.0 && det > 1e-9 * self.xx * self.tt {
            let ratio = (self.xy * self.tt - self.xt * self.ty) / det;
            let overhead = (self.xx * self.ty - self.xt * self.xy) / det;
            if ratio > 0.0 && overhead >= 0.0 {
                return Some((ratio, overhead));
            }
        }
        Some((self.xy / self.xx, 0.0))
    }

    /// The provider's count of a request engram counts `counted` tokens (without a factor),
    /// with or without `tools`, once [`MIN_SAMPLES`] requests were observed.
    pub fn estimate(&self, counted: usize, tools: bool) -> Option<f64> {
        let (ratio, overhead) = self.fit().filter(|_| self.samples >= MIN_SAMPLES)?;
        Some(ratio * counted as f64 + if tools { overhead } else { 0.0 })
    }

    /// The factor engram's counts are multiplied by, once calibrated (rounded up to a
    /// hundredth, so that the counts cached by factor stay few).
    pub fn factor(&self) -> Option<f64> {
        self.fit()
            .filter(|_| self.samples >= MIN_SAMPLES)
            .map(|(r, _)| (r * 100.0 - 1e-6).ceil() / 100.0)
    }

    /// The tokens the provider adds to a request with tools, once calibrated.
    pub fn tools_overhead(&self) -> Option<usize> {
        self.fit()
            .filter(|_| self.samples >= MIN_SAMPLES)
            .map(|(_, o)| (o - 1e-6).ceil().max(0.0) as usize)
    }

    /// The relative error of the fit on the requests it had not yet seen.
    pub fn relative_error(&self) -> Option<f64> {
        (self.error_base > 0.0).then(|| self.error / self.error_base)
    }

    /// The safety margin to keep over a calibrated count: twice the relative error measured,
    /// within [`MIN_MARGIN`] and [`MAX_MARGIN`]; `configured` (the margin kept without a
    /// calibration) until an error is measured.
    pub fn margin(&self, configured: f64) -> f64 {
        match (self.factor(), self.relative_error()) {
            (Some(_), Some(e)) => (2.0 * e).clamp(MIN_MARGIN, MAX_MARGIN),
            _ => configured,
        }
    }
}

/// Where calibrations are kept, by model (the registry's id of the model, or the name the
/// caller gave when the registry does not know it).
pub trait CalibrationStore: Send + Sync {
    /// The model's calibration, if any request was observed.
    fn calibration(&self, model: &str) -> Result<Option<Calibration>, Error>;

    /// Adds one request to the model's calibration ([`Calibration::observed`]) in one
    /// transaction, and returns the calibration it made.
    fn observe_count(&self, model: &str, seen: Observation) -> Result<Calibration, Error>;
}

/// One request as the calibration learns from it: what engram counted, whether it had tools,
/// what the provider reported, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// engram's count of the request.
    pub counted: usize,
    /// Whether the request had tool definitions.
    pub tools: bool,
    /// The provider's count of it.
    pub reported: usize,
    /// When it was sent.
    pub at: Timestamp,
}

impl Calibration {
    /// [`Calibration::observed`] of one [`Observation`].
    #[must_use]
    pub fn observed_one(&self, seen: Observation) -> Calibration {
        self.observed(seen.counted, seen.tools, seen.reported, seen.at)
    }
}

/// The checks every [`CalibrationStore`] passes (the conformance suites call them).
#[cfg(any(test, feature = "conformance"))]
pub fn conformance(store: &dyn CalibrationStore) {
    assert_eq!(store.calibration("m").expect("read"), None);
    for i in 0..6usize {
        let tools = i % 2 == 1;
        let counted = 1_000 + 100 * i;
        let reported = counted * 6 / 5 + if tools { 400 } else { 0 };
        let seen = Observation {
            counted,
            tools,
            reported,
            at: 7,
        };
        store.observe_count("m", seen).expect("observe");
    }
    let seen = Observation {
        counted: 10,
        tools: false,
        reported: 30,
        at: 8,
    };
    store.observe_count("other", seen).expect("observe");
    let c = store.calibration("m").expect("read").expect("kept");
    assert_eq!((c.samples, c.updated_at), (6, 7));
    assert_eq!(c.factor(), Some(1.2));
    assert_eq!(c.tools_overhead(), Some(400));
    assert!(c.relative_error().expect("measured") < 1e-6);
    assert_eq!(c.margin(0.1), MIN_MARGIN);
    let other = store.calibration("other").expect("read").expect("kept");
    assert_eq!((other.samples, other.factor()), (1, None));
    // Nothing to learn from an empty count.
    let seen = Observation {
        counted: 0,
        tools: false,
        reported: 50,
        at: 9,
    };
    let same = store.observe_count("m", seen).expect("observe");
    assert_eq!(same.samples, 6);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_and_the_tools_overhead_are_learned_and_the_margin_narrows_to_the_error() {
        let mut c = Calibration::default();
        assert_eq!((c.factor(), c.margin(0.1)), (None, 0.1));
        // The provider counts 1.1 times engram's, give or take 2%, and adds 350 with tools.
        for i in 0..200usize {
            let counted = 500 + 37 * (i % 11);
            let tools = i % 3 == 0;
            let wobble = if i % 2 == 0 { 1.02 } else { 0.98 };
            let reported = (counted as f64 * 1.1 * wobble) as usize + if tools { 350 } else { 0 };
            c = c.observed(counted, tools, reported, i as i64);
        }
        let factor = c.factor().expect("calibrated");
        assert!((1.09..=1.12).contains(&factor), "{factor}");
        let overhead = c.tools_overhead().expect("calibrated");
        assert!((330..=370).contains(&overhead), "{overhead}");
        let e = c.relative_error().expect("measured");
        assert!((0.005..0.04).contains(&e), "{e}");
        assert!(
            (2.0 * e - c.margin(0.1)).abs() < 1e-9,
            "the configured one replaced"
        );
        let rough = (0..10usize).fold(Calibration::default(), |c, i| {
            c.observed(1_000, false, if i % 2 == 0 { 500 } else { 2_000 }, 0)
        });
        assert_eq!(rough.margin(0.1), MAX_MARGIN, "a large error widens it");
    }

    /// A reply whose usage cannot describe the request counted (a sum over several calls, say
    /// 1.53 times a 45,982-token prompt's plus its follow-ups') teaches nothing.
    #[test]
    fn a_report_no_single_request_could_have_is_not_learned() {
        let c = (0..5usize).fold(Calibration::default(), |c, i| {
            c.observed(40_000 + i, false, 50_000 + i, 0)
        });
        let factor = c.factor().expect("calibrated");
        let summed = c.observed(45_982, false, 3 * 45_982 + 5_000, 1);
        assert_eq!(summed, c, "three requests' usage in one reply");
        let halved = c.observed(45_982, false, 20_000, 1);
        assert_eq!(halved, c);
        assert_eq!(c.observed(45_982, false, 57_000, 1).factor(), Some(factor));
        assert!(
            Calibration::plausible(100, 600),
            "a short request with the tools' hidden prompt"
        );
    }

    #[test]
    fn a_few_requests_do_not_calibrate_yet_and_no_tools_means_no_overhead() {
        let c = Calibration::default()
            .observed(100, false, 125, 1)
            .observed(200, false, 250, 2);
        assert_eq!(c.fit(), Some((1.25, 0.0)));
        assert_eq!(c.factor(), None);
        assert_eq!(c.margin(0.1), 0.1);
        let c = c.observed(300, false, 375, 3);
        assert_eq!((c.factor(), c.tools_overhead()), (Some(1.25), Some(0)));
        let estimate = c.estimate(400, true).expect("calibrated");
        assert!((estimate - 500.0).abs() < 1e-6, "{estimate}");
    }

    #[test]
    fn the_in_memory_store_conforms() {
        conformance(&crate::in_memory::InMemoryStore::new());
    }
}
