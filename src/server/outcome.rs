//! What happened to one request, for the metrics, the log line, the availability stats and the usage
//! ledger: who asked for what ([`Asked`], found by the prepare stage), how it was answered ([`Answer`]: one
//! per attempt at an upstream, built by the step that answers and returned by it; the request keeps the last
//! one), and the two as the request's [`Outcome`], which the pipeline puts together from the values its
//! stages return.

use super::hosted::{Plan, Ran};
use crate::ledger::CacheUse;
use crate::protocol::canon::{Response, Usage};
use crate::protocol::embed::Embeddings;
use crate::protocol::ApiError;
use crate::upstream::policy::{self, Ended, Facts};

/// Who asked for what, as far as it is known (a request refused early knows less): what its usage record,
/// its metrics and its log line say of it besides how it was answered.
#[derive(Debug, Default)]
pub(super) struct Asked {
    pub key: Option<String>,
    pub group: Option<String>,
    /// The model entry that served (or, refused before one was found, the name asked for).
    pub model: Option<String>,
    /// The name the client asked for, when it is not the entry's (an alias, or a name a pattern matched).
    pub requested_model: Option<String>,
    pub stream: bool,
    /// Recorded at no cost (token counting: metered, not billed).
    pub unbilled: bool,
    /// The endpoint, as records name it (None: generation).
    pub endpoint: Option<&'static str>,
    /// The input estimated from the body, media at their providers' cost (`estimate::input`): what
    /// admission reserves for, and what a request its upstream worked on without reporting usage is billed.
    pub input_estimate: u64,
    /// Paid hosted tools and service tiers the model allows this request, at their prices.
    pub hosted: Plan,
}

/// How far a call to an upstream got (`call.rs` says).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Reached {
    /// The upstream was called.
    pub called: bool,
    /// It took the request (see [`Reach::Taken`]).
    pub taken: bool,
}

/// What writing an answer to the client came to (a stream, or a whole answer sent as one).
#[derive(Debug, Default)]
pub(super) struct Delivered {
    pub status: u16,
    /// The client went away before the end.
    pub client_closed: bool,
    /// The usage of what was written, and whether it is an estimate.
    pub usage: Option<(Usage, bool)>,
    /// The stream ended with this error (told in it).
    pub error: Option<ApiError>,
    /// The answer in canonical form, when it was kept for the answer cache and the stream completed.
    pub kept: Option<Box<Response>>,
}

/// How far an attempt got with its upstream.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reach {
    /// Not called: the gateway answered before trying one, or the call never reached it.
    #[default]
    NotCalled,
    /// The attempt reached its upstream (so the request gets a usage record).
    Called,
    /// The upstream took the request: all of it was written to the upstream (or the built-in model had
    /// it), and the upstream did not refuse it with an error answer. From then on it may be working on it,
    /// whether or not an answer comes back (see `accounting::billable_usage`).
    Taken,
}

/// How an answer ended, as far as it has.
#[derive(Debug, Default, Clone)]
pub(super) enum Ending {
    /// Nothing told yet (status 0).
    #[default]
    Open,
    /// With this status and no error.
    Status(u16),
    /// With `error`, also when the answer had started (a stream that broke: status 200 and an error).
    /// `owed`: it ended before the client had any answer, and the pipeline gives it the error.
    Failed {
        status: u16,
        error: ApiError,
        owed: bool,
    },
}

/// How a request was answered: by which upstream (if any), with what status, usage and error. Each attempt
/// at an upstream starts from a fresh one, so nothing an earlier attempt left behind is blamed on the next.
/// Its state changes only through its methods, here.
#[derive(Debug, Default, Clone)]
pub(super) struct Answer {
    /// The upstream this attempt was for (None: the gateway answered before trying one).
    upstream: Option<String>,
    reach: Reach,
    ending: Ending,
    /// The client went away before the end.
    client_closed: bool,
    usage: Option<Usage>,
    /// Usage was estimated from the text because the upstream reported none.
    estimated: bool,
    /// The output limit sent upstream (None: the request carried none). Output beyond it is never billed.
    output_limit: Option<u64>,
    /// The paid hosted features this attempt set running, as far as known (see `server::hosted`).
    hosted: Ran,
    /// The answer in canonical form, kept for the answer cache (only when the model's answers are cached:
    /// see `cached.rs`, which stores it only if the answer completed).
    kept: Option<Box<Response>>,
    /// An embeddings answer's vectors, kept for the answer cache likewise.
    kept_vectors: Option<Box<Embeddings>>,
}

impl Answer {
    /// An attempt at `upstream`, before anything happened.
    pub(super) fn for_upstream(upstream: &str) -> Answer {
        Answer {
            upstream: Some(upstream.to_string()),
            ..Answer::default()
        }
    }

    /// The gateway's own refusal, before any upstream was tried: the client is owed the error.
    pub(super) fn refused(err: ApiError) -> Answer {
        Answer::default().failed(err)
    }

    /// Notes how far a call got.
    pub(super) fn reached(&mut self, r: Reached) {
        self.reach = if r.taken {
            Reach::Taken
        } else if r.called || self.reach != Reach::NotCalled {
            Reach::Called
        } else {
            Reach::NotCalled
        };
    }

    /// Notes what reached the client.
    pub(super) fn delivered(&mut self, d: Delivered) {
        if d.status != 0 {
            self.answered(d.status);
        }
        self.client_closed |= d.client_closed;
        if let Some(u) = d.usage {
            self.set_usage(u);
        }
        if let Some(e) = d.error {
            self.ended_with(e);
        }
        if d.kept.is_some() {
            self.kept = d.kept;
        }
    }

    /// The answer's status (the error it ended with stays).
    pub(super) fn answered(&mut self, status: u16) {
        match &mut self.ending {
            Ending::Failed { status: s, .. } => *s = status,
            other => *other = Ending::Status(status),
        }
    }

    /// The usage, and whether it is an estimate.
    pub(super) fn set_usage(&mut self, (usage, estimated): (Usage, bool)) {
        self.usage = Some(usage);
        self.estimated = estimated;
    }

    /// The usage the upstream reported (None: it reported none).
    pub(super) fn reported(&mut self, usage: Option<Usage>) {
        self.usage = usage;
    }

    /// The output limit sent upstream.
    pub(super) fn limit_sent(&mut self, limit: Option<u64>) {
        self.output_limit = limit;
    }

    /// The paid hosted features the attempt set running.
    pub(super) fn ran(&mut self, ran: Ran) {
        self.hosted = ran;
    }

    /// Keeps the answer in canonical form for the answer cache.
    pub(super) fn keep(&mut self, kept: Option<Box<Response>>) {
        self.kept = kept;
    }

    /// The upstream refused the request with an error answer (`refused`): it did not take it.
    pub(super) fn refused_by_upstream(&mut self, refused: bool) {
        if refused && self.reach == Reach::Taken {
            self.reach = Reach::Called;
        }
    }

    /// Takes the answer kept for the answer cache.
    pub(super) fn take_kept(&mut self) -> Option<Box<Response>> {
        self.kept.take()
    }

    /// Keeps an embeddings answer's vectors for the answer cache.
    pub(super) fn keep_vectors(&mut self, kept: Option<Box<Embeddings>>) {
        self.kept_vectors = kept;
    }

    /// Takes the vectors kept for the answer cache.
    pub(super) fn take_kept_vectors(&mut self) -> Option<Box<Embeddings>> {
        self.kept_vectors.take()
    }

    /// The client went away before the end.
    pub(super) fn client_left(&mut self) {
        self.client_closed = true;
    }

    /// Ends the answer with `err` before the client had an answer (its status, unless one was set): the
    /// pipeline owes the client the error.
    pub(super) fn failed(mut self, err: ApiError) -> Answer {
        self.fail(err);
        if let Ending::Failed { owed, .. } = &mut self.ending {
            *owed = true;
        }
        self
    }

    /// Ends the answer with `err` (its status, unless the answer had already started).
    pub(super) fn fail(&mut self, err: ApiError) {
        let status = match self.status() {
            0 => err.status(),
            s => s,
        };
        self.ending = Ending::Failed {
            status,
            error: err,
            owed: self.owed(),
        };
    }

    /// The answer ended with `err`, its status as it is (a stream that broke, an answer withheld).
    pub(super) fn ended_with(&mut self, err: ApiError) {
        self.ending = Ending::Failed {
            status: self.status(),
            error: err,
            owed: self.owed(),
        };
    }

    /// The upstream this attempt was for.
    pub(super) fn upstream(&self) -> Option<&str> {
        self.upstream.as_deref()
    }

    /// The attempt reached its upstream (so the request gets a usage record).
    pub(super) fn called(&self) -> bool {
        self.reach != Reach::NotCalled
    }

    /// The upstream took the request (see [`Reach::Taken`]).
    pub(super) fn taken(&self) -> bool {
        self.reach == Reach::Taken
    }

    /// The answer's status (0: none yet).
    pub(super) fn status(&self) -> u16 {
        match &self.ending {
            Ending::Open => 0,
            Ending::Status(s) | Ending::Failed { status: s, .. } => *s,
        }
    }

    /// What went wrong, also when the answer had started.
    pub(super) fn error(&self) -> Option<&ApiError> {
        match &self.ending {
            Ending::Failed { error, .. } => Some(error),
            _ => None,
        }
    }

    fn owed(&self) -> bool {
        matches!(self.ending, Ending::Failed { owed: true, .. })
    }

    /// The error the client is owed, if the attempt ended before it had an answer.
    pub(super) fn owed_error(&self) -> Option<&ApiError> {
        self.error().filter(|_| self.owed())
    }

    /// The client went away before the end.
    pub(super) fn client_closed(&self) -> bool {
        self.client_closed
    }

    /// The usage (None: none known).
    pub(super) fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The usage was estimated from the text because the upstream reported none.
    pub(super) fn estimated(&self) -> bool {
        self.estimated
    }

    /// The output limit sent upstream.
    pub(super) fn output_limit(&self) -> Option<u64> {
        self.output_limit
    }

    /// The paid hosted features the attempt set running.
    pub(super) fn hosted(&self) -> &Ran {
        &self.hosted
    }

    /// How the attempt ended, for the failover policy (`upstream::policy`); `cut`: the request was cut
    /// (client gone, shutdown), so it says nothing of the upstream.
    pub(super) fn ended(&self, cut: bool) -> Ended {
        policy::classify(Facts {
            called: self.called(),
            cut: cut || self.client_closed,
            status: self.status(),
            error: self.error(),
        })
    }
}

/// What happened to one request.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub asked: Asked,
    /// How it was answered: the last attempt's answer, or the gateway's own.
    pub answer: Answer,
    /// Upstream calls made (one per attempt that reached its upstream).
    pub upstream_calls: u32,
    /// The request was cut by the shutdown deadline.
    pub shutdown: bool,
    /// What the answer cache did for it (None: its model's answers are not cached).
    pub cache: Option<CacheUse>,
}

impl Outcome {
    /// Some attempt reached an upstream (so the request gets a usage record).
    pub(super) fn upstream_called(&self) -> bool {
        self.upstream_calls > 0
    }

    /// It was answered from the answer cache.
    pub(super) fn cache_hit(&self) -> bool {
        self.cache == Some(CacheUse::Hit)
    }

    /// The status as logs and metrics show it: the HTTP status, or `client_closed` / `shutdown`.
    pub(super) fn status_text(&self) -> String {
        if self.answer.client_closed() {
            "client_closed".to_string()
        } else if self.shutdown {
            "shutdown".to_string()
        } else {
            self.answer.status().to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn called(status: u16, error: Option<ApiError>) -> Answer {
        let mut a = Answer::for_upstream("u");
        a.reached(Reached {
            called: true,
            taken: false,
        });
        a.answered(status);
        if let Some(e) = error {
            a.ended_with(e);
        }
        a
    }

    #[test]
    fn one_rule_decides_whether_the_upstream_failed() {
        let failed = |a: &Answer| policy::rule(a.ended(false)).failure;
        let silent = ApiError::bad_gateway("unreachable").unanswered();
        assert_eq!(called(502, Some(silent)).ended(false), Ended::Silent);
        let five = ApiError::from_upstream(500, b"{}", None);
        assert_eq!(
            called(500, Some(five.clone())).ended(false),
            Ended::ServerError
        );
        // A stream that broke after it started.
        let broke = ApiError::bad_gateway("stream broke");
        assert!(failed(&called(200, Some(broke))));
        // The upstream refusing a bad request, or asking to wait (429), is alive; the gateway's own refusals
        // are not its failures.
        let limited = ApiError::from_upstream(429, b"{}", Some(3));
        assert_eq!(called(429, Some(limited)).ended(false), Ended::Limited);
        let bad = ApiError::from_upstream(400, b"{}", None);
        assert_eq!(called(400, Some(bad)).ended(false), Ended::Refused);
        let ours = ApiError::record_not_synced();
        assert!(!failed(&called(503, Some(ours))));
        // Nothing is concluded from a request that was cut or never reached its upstream.
        assert_eq!(called(500, Some(five.clone())).ended(true), Ended::Cut);
        let mut gone = called(500, Some(five.clone()));
        gone.client_left();
        assert!(!failed(&gone));
        let mut not_called = Answer::default();
        not_called.answered(500);
        not_called.ended_with(five);
        assert_eq!(
            policy::verdict(not_called.ended(false), None),
            crate::upstream::breaker::HealthVerdict::Inconclusive
        );
    }
}
