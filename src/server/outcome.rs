//! What happened to one request, for the metrics, the log line, the availability stats and the usage
//! ledger: who asked for what ([`Outcome`]) and how it was answered ([`Answer`]: one per attempt at an
//! upstream; the request keeps the last one).

use super::hosted::{Plan, Ran};
use crate::protocol::canon::Usage;
use crate::protocol::{ApiError, Origin};
use crate::upstream::breaker::Verdict;

/// How a request was answered: by which upstream (if any), with what status, usage and error. Each attempt
/// at an upstream starts from a fresh one, so nothing an earlier attempt left behind is blamed on the next.
#[derive(Debug, Default, Clone)]
pub struct Answer {
    /// The upstream this attempt was for (None: the gateway answered before trying one).
    pub upstream: Option<String>,
    /// The attempt reached its upstream (so the request gets a usage record).
    pub called: bool,
    /// The upstream took the request: all of it was written to the upstream (or the built-in model had
    /// it), and the upstream did not refuse it with an error answer. From then on it may be working on it,
    /// whether or not an answer comes back (see `accounting::billable_usage`).
    pub taken: bool,
    pub status: u16,
    pub usage: Option<Usage>,
    /// Usage was estimated from the text because the upstream reported none.
    pub estimated: bool,
    /// What went wrong, also when the answer had started (a stream that broke: status 200 and an error).
    pub error: Option<ApiError>,
    pub client_closed: bool,
    /// The output limit sent upstream (None: the request carried none). Output beyond it is never billed.
    pub output_limit: Option<u64>,
    /// The paid hosted features this attempt set running, as far as known (see `server::hosted`).
    pub hosted: Ran,
}

impl Answer {
    pub fn for_upstream(upstream: &str) -> Answer {
        Answer {
            upstream: Some(upstream.to_string()),
            ..Answer::default()
        }
    }

    pub fn set_usage(&mut self, (usage, estimated): (Usage, bool)) {
        self.usage = Some(usage);
        self.estimated = estimated;
    }

    /// Ends the answer with `err` (its status, unless the answer had already started).
    pub fn fail(&mut self, err: ApiError) {
        if self.status == 0 {
            self.status = err.status();
        }
        self.error = Some(err);
    }

    /// The upstream's failure, if the upstream failed this answer: it did not answer, answered 5xx, broke
    /// its stream, or sent something unusable. The one rule the breaker, the availability stats and the
    /// metrics all follow. A client that left, a limit or the gateway refusing is no upstream failure; an
    /// upstream's 4xx answer is not either, its 429 included (it is alive and asks to wait: see
    /// `upstream::routing` for its cool-down).
    pub fn upstream_failure(&self) -> Option<&ApiError> {
        let e = self.error.as_ref()?;
        // Upstreams skipped because they stopped answering count too (nothing was called).
        let failed = (self.called || e.origin() == Origin::UpstreamSilent)
            && !self.client_closed
            && e.is_upstream()
            && (e.origin() == Origin::UpstreamSilent || e.status() >= 500 || self.status == 200);
        failed.then_some(e)
    }

    /// What this answer says about its upstream's health (see `upstream::breaker`); `cut`: the request was
    /// cut (client gone, shutdown), so it says nothing.
    pub fn verdict(&self, cut: bool) -> Verdict {
        if !self.called || cut || self.client_closed {
            return Verdict::Inconclusive;
        }
        match (self.upstream_failure(), &self.error) {
            (Some(e), _) if e.origin() == Origin::UpstreamSilent => {
                Verdict::Silent(e.message().to_string())
            }
            (Some(e), _) => Verdict::Erroring(e.message().to_string()),
            (None, Some(_)) => Verdict::Alive,
            (None, None) => Verdict::Success,
        }
    }
}

/// What happened to one request.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    pub key: Option<String>,
    pub group: Option<String>,
    /// The model entry that served (or, refused before one was found, the name asked for).
    pub model: Option<String>,
    /// The name the client asked for, when it is not the entry's (an alias, or a name a pattern matched).
    pub requested_model: Option<String>,
    pub stream: bool,
    /// Upstream calls made (one per attempt that reached its upstream).
    pub upstream_calls: u32,
    /// Some attempt reached an upstream (so the request gets a usage record).
    pub upstream_called: bool,
    /// How it was answered: the last attempt's answer, or the gateway's own.
    pub answer: Answer,
    /// The request was cut by the shutdown deadline.
    pub shutdown: bool,
    /// Recorded at no cost (`count_tokens`: metered, not billed).
    pub unbilled: bool,
    /// The request's input as admission estimated it (billed when an upstream worked on the request and
    /// reported no usage).
    pub input_estimate: u64,
    /// The paid hosted features the request was admitted with, and their prices.
    pub hosted: Plan,
}

impl Outcome {
    /// Keeps the answer of an attempt that has ended.
    pub fn keep(&mut self, answer: Answer) {
        if answer.called {
            self.upstream_called = true;
            self.upstream_calls += 1;
        }
        self.answer = answer;
    }

    /// The status as logs and metrics show it: the HTTP status, or `client_closed` / `shutdown`.
    pub fn status_text(&self) -> String {
        if self.answer.client_closed {
            "client_closed".to_string()
        } else if self.shutdown {
            "shutdown".to_string()
        } else {
            self.answer.status.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn called(status: u16, error: Option<ApiError>) -> Answer {
        Answer {
            called: true,
            status,
            error,
            ..Answer::default()
        }
    }

    #[test]
    fn one_rule_decides_whether_the_upstream_failed() {
        let silent = ApiError::bad_gateway("unreachable").unanswered();
        assert!(matches!(
            called(502, Some(silent)).verdict(false),
            Verdict::Silent(_)
        ));
        let five = ApiError::from_upstream(500, b"{}", None);
        assert!(matches!(
            called(500, Some(five.clone())).verdict(false),
            Verdict::Erroring(_)
        ));
        // A stream that broke after it started.
        let broke = ApiError::bad_gateway("stream broke");
        assert!(called(200, Some(broke)).upstream_failure().is_some());
        // The upstream refusing a bad request, or asking to wait (429), is alive; the gateway's own refusals
        // are not its failures.
        let limited = ApiError::from_upstream(429, b"{}", Some(3));
        assert!(matches!(
            called(429, Some(limited)).verdict(false),
            Verdict::Alive
        ));
        let bad = ApiError::from_upstream(400, b"{}", None);
        assert!(matches!(
            called(400, Some(bad)).verdict(false),
            Verdict::Alive
        ));
        let ours = ApiError::record_not_synced();
        assert!(called(503, Some(ours)).upstream_failure().is_none());
        // Nothing is concluded from a request that was cut or never reached its upstream.
        assert!(matches!(
            called(500, Some(five.clone())).verdict(true),
            Verdict::Inconclusive
        ));
        let mut not_called = called(500, Some(five));
        not_called.called = false;
        assert!(matches!(not_called.verdict(false), Verdict::Inconclusive));
    }
}
