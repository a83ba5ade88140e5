//! Writing a canonical event stream to a client: the client protocol's stream encoder, one chunk per step,
//! usage tracked on the way (and estimated when the upstream reports none). The text of every event passes
//! the stream's credential redactor (`secrets.rs`) before the encoder sees it, so what the encoder repeats
//! in its closing objects is redacted too; every chunk is searched for a whole credential before it goes.

use std::borrow::Cow;

use super::outcome::Delivered;
use crate::gateway::respond;
use crate::gateway::trace::Trace;
use crate::gateway::watchdog::WatchGuard;
use crate::http::ResponseWriter;
use crate::protocol::canon::{StreamEvent, Usage};
use crate::protocol::collect::Collector;
use crate::protocol::contiguous::Contiguous;
use crate::protocol::estimate;
use crate::protocol::{ApiError, StreamEncoder};
use crate::secrets::{self, Redactor, TextEdit};

/// The client went away (a write failed).
#[derive(Debug)]
pub(super) struct ClientGone;

pub(super) struct EventWriter<'a> {
    w: &'a mut ResponseWriter,
    trace: &'a Trace,
    enc: Box<dyn StreamEncoder>,
    buf: Vec<u8>,
    usage: Option<Usage>,
    input_estimate: u64,
    /// Everything generated so far, for an output estimate when no usage comes.
    produced: String,
    /// A running estimate of the tokens in `produced` (summed per delta, so cheap per event).
    produced_tokens: u64,
    /// The upstream's finish reason came (the stream completed).
    finished: bool,
    pub error: Option<ApiError>,
    /// Events held back while an upstream credential may be arriving in their text.
    redactor: Redactor<StreamEvent>,
    /// Each tool call's events together (`protocol::contiguous`), and the events it let go.
    order: Contiguous,
    ordered: Vec<StreamEvent>,
    /// The answer folded back together, for the answer cache (see [`EventWriter::keep`]).
    kept: Option<Collector>,
}

impl<'a> EventWriter<'a> {
    /// Starts the SSE response and sends the protocol's opening event(s).
    pub(super) fn start(
        w: &'a mut ResponseWriter,
        trace: &'a Trace,
        enc: Box<dyn StreamEncoder>,
        start: StreamEvent,
        extra_headers: &[(&str, &str)],
        watch: &WatchGuard,
    ) -> Result<Self, ClientGone> {
        respond::start_sse(w, trace, extra_headers).map_err(|_| ClientGone)?;
        if let Ok(shared) = w.share() {
            watch.stream_started(shared, trace.protocol);
        }
        let input_estimate = match &start {
            StreamEvent::Start { input_tokens, .. } => *input_tokens,
            _ => 0,
        };
        let mut ew = EventWriter {
            w,
            trace,
            enc,
            buf: Vec::with_capacity(1024),
            usage: None,
            input_estimate,
            produced: String::new(),
            produced_tokens: 0,
            finished: false,
            error: None,
            redactor: Redactor::new(),
            order: Contiguous::default(),
            ordered: Vec::new(),
            kept: None,
        };
        ew.emit(&start)?;
        Ok(ew)
    }

    /// Keeps the answer the events amount to (from the next event on), for the answer cache: `end` returns
    /// it if the stream completes.
    pub(super) fn keep(&mut self) {
        self.kept = Some(Collector::default());
    }

    /// Takes one event: counted at once, put in order (each tool call's events together), then encoded and
    /// written as one chunk as soon as the redactor lets it go (at once, unless its text may be the start of
    /// an upstream credential).
    pub(super) fn emit(&mut self, ev: &StreamEvent) -> Result<(), ClientGone> {
        if let StreamEvent::Error(e) = ev {
            // Upstream texts reach the client here: never with an upstream credential in them.
            let clean = StreamEvent::Error(e.clone().scrub_secrets());
            self.note(&clean);
            return self.in_order(clean);
        }
        self.note(ev);
        if self.order.passes(ev) {
            return self.accept(ev);
        }
        self.in_order(ev.clone())
    }

    /// Sends what the order lets go of `ev` and what it held.
    fn in_order(&mut self, ev: StreamEvent) -> Result<(), ClientGone> {
        let mut ready = std::mem::take(&mut self.ordered);
        self.order.push(ev, &mut ready);
        let mut sent = Ok(());
        for ev in ready.drain(..) {
            if sent.is_ok() {
                sent = self.accept(&ev);
            }
        }
        self.ordered = ready;
        sent
    }

    fn accept(&mut self, ev: &StreamEvent) -> Result<(), ClientGone> {
        if self.redactor.read(answer_text(ev)) {
            return self.send(ev);
        }
        self.redactor.hold(ev.clone());
        self.send_released()
    }

    /// Sends the events the redactor lets go, their text rewritten where a credential was found.
    fn send_released(&mut self) -> Result<(), ClientGone> {
        while let Some((mut ev, edits)) = self.redactor.ready() {
            redact_text(&mut ev, &edits);
            self.send(&ev)?;
        }
        Ok(())
    }

    fn send(&mut self, ev: &StreamEvent) -> Result<(), ClientGone> {
        self.enc.encode(ev, &mut self.buf);
        self.flush()
    }

    /// What an event tells of the stream (usage, output, its end), when it is taken.
    fn note(&mut self, ev: &StreamEvent) {
        if let Some(k) = &mut self.kept {
            k.feed(ev);
        }
        match ev {
            StreamEvent::Usage(u) => self.usage = Some(*u),
            StreamEvent::TextDelta(t) | StreamEvent::ReasoningDelta(t) => {
                self.trace.mark_first_token();
                self.produce(t);
            }
            StreamEvent::ToolArgsDelta { delta, .. } => self.produce(delta),
            StreamEvent::ToolCallStart { name, .. } => {
                self.trace.mark_first_token();
                self.produce(name);
            }
            StreamEvent::Error(e) => self.error = Some(e.clone()),
            StreamEvent::Finish(_) => self.finished = true,
            _ => {}
        }
    }

    fn produce(&mut self, text: &str) {
        self.produced.push_str(text);
        self.produced_tokens += estimate::tokens(text);
    }

    /// The output the upstream reported so far (if any) and an estimate of what was produced.
    /// The usage the upstream reported so far (cumulative), if any.
    pub(super) fn reported(&self) -> Option<Usage> {
        self.usage
    }

    pub(super) fn output_so_far(&self) -> (Option<u64>, u64) {
        (self.usage.map(|u| u.output_tokens), self.produced_tokens)
    }

    fn flush(&mut self) -> Result<(), ClientGone> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if let Cow::Owned(clean) = self.redactor.redact(&self.buf) {
            self.buf = clean;
        }
        let r = self.w.write_chunk(&self.buf);
        self.buf.clear();
        r.map_err(|_| ClientGone)
    }

    /// Usage so far, by the one rule for streams (`estimate::stream_usage`): as reported when the stream
    /// completed with a report, else topped up with what was produced; and whether it is an estimate.
    pub(super) fn usage(&self) -> (Usage, bool) {
        let completed = self.finished && self.error.is_none();
        estimate::stream_usage(self.usage, completed, &self.produced, self.input_estimate)
    }

    /// The client went away (a write failed): what was delivered, with the usage so far.
    pub(super) fn gone(self) -> Delivered {
        Delivered {
            status: 200,
            client_closed: true,
            usage: Some(self.usage()),
            error: None,
            kept: None,
        }
    }

    /// Closes the stream ([`EventWriter::finish`]): what was delivered, with the usage and the error it
    /// ended with.
    pub(super) fn end(mut self) -> Delivered {
        let error = self.error.clone();
        let kept = self.kept.take();
        // A client gone at the very end is billed what was written all the same.
        let (usage, client_closed) = match self.close() {
            Ok(u) => (Some(u), false),
            Err(u) => (Some(u), true),
        };
        let kept = kept
            .filter(|_| error.is_none() && !client_closed)
            .and_then(Collector::finish)
            .map(Box::new);
        Delivered {
            status: 200,
            client_closed,
            usage,
            error,
            kept,
        }
    }

    /// Closes the stream: when no usage came, an estimate is sent first; then the protocol's closing
    /// events and the end of the chunked body.
    pub(super) fn finish(self) -> Result<(Usage, bool), ClientGone> {
        self.close().map_err(|_| ClientGone)
    }

    /// [`finish`](Self::finish), with the usage of what was written when the client is gone.
    fn close(mut self) -> Result<(Usage, bool), (Usage, bool)> {
        // What the order still holds (a stream that ended with neither a finish nor an error).
        let mut held = std::mem::take(&mut self.ordered);
        self.order.flush(&mut held);
        for ev in held.drain(..) {
            if self.accept(&ev).is_err() {
                return Err(self.usage());
            }
        }
        self.redactor.release();
        if self.send_released().is_err() {
            return Err(self.usage());
        }
        let (usage, estimated) = self.usage();
        let gone = |_| (usage, estimated);
        if self.trace.hold_tail {
            // Strict ledger: the closing events wait until the usage record is synced.
            self.flush().map_err(gone)?;
            self.w.hold_rest();
        }
        if estimated && self.error.is_none() {
            self.enc.encode(&StreamEvent::Usage(usage), &mut self.buf);
        }
        self.enc.finish(&mut self.buf);
        self.flush().map_err(gone)?;
        self.w.finish().map_err(|_| (usage, estimated))?;
        Ok((usage, estimated))
    }
}

/// The text an event adds to the answer (what the redactor reads).
fn answer_text(ev: &StreamEvent) -> &str {
    match ev {
        StreamEvent::TextDelta(t) | StreamEvent::ReasoningDelta(t) => t,
        StreamEvent::ToolArgsDelta { delta, .. } => delta,
        _ => "",
    }
}

/// Applies the redactor's edits to an event's text.
fn redact_text(ev: &mut StreamEvent, edits: &[TextEdit]) {
    let text = match ev {
        StreamEvent::TextDelta(t) | StreamEvent::ReasoningDelta(t) => t,
        StreamEvent::ToolArgsDelta { delta, .. } => delta,
        _ => return,
    };
    if let Some(new) = secrets::apply(text, 0, edits) {
        *text = new;
    }
}
