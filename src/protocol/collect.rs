//! A stream of canonical events folded back into the complete answer it amounts to (the inverse of
//! `egress::events_from_response`): what the answer cache keeps of a streamed answer.

use std::collections::HashMap;

use super::canon::{Part, Response, StopReason, StreamEvent, Usage};
use super::codec::StreamDecoder;
use super::sse::SseEvent;

/// Folds stream events into a [`Response`].
#[derive(Debug, Default)]
pub(crate) struct Collector {
    content: Vec<Part>,
    /// Where each tool call (by its stream index) sits in `content`.
    calls: HashMap<usize, usize>,
    usage: Option<Usage>,
    stop: Option<StopReason>,
    failed: bool,
}

impl Collector {
    pub(crate) fn feed(&mut self, ev: &StreamEvent) {
        match ev {
            StreamEvent::TextDelta(t) => match self.content.last_mut() {
                Some(Part::Text(s)) => s.push_str(t),
                _ => self.content.push(Part::Text(t.clone())),
            },
            StreamEvent::ReasoningDelta(t) => match self.content.last_mut() {
                Some(Part::Reasoning { text, .. }) => text.push_str(t),
                _ => self.content.push(Part::Reasoning {
                    text: t.clone(),
                    signature: None,
                }),
            },
            StreamEvent::ReasoningSignature(s) => match self.content.last_mut() {
                Some(Part::Reasoning { signature, .. }) => *signature = Some(s.clone()),
                _ => self.content.push(Part::Reasoning {
                    text: String::new(),
                    signature: Some(s.clone()),
                }),
            },
            StreamEvent::ToolCallStart { index, id, name } => {
                self.calls.insert(*index, self.content.len());
                self.content.push(Part::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                });
            }
            StreamEvent::ToolArgsDelta { index, delta } => {
                let at = self.calls.get(index).copied();
                if let Some(Part::ToolCall { arguments, .. }) =
                    at.and_then(|i| self.content.get_mut(i))
                {
                    arguments.push_str(delta);
                } else {
                    // Arguments of a call that never started: the stream is not one to keep.
                    self.failed = true;
                }
            }
            StreamEvent::Usage(u) => self.usage = Some(*u),
            StreamEvent::Finish(r) => self.stop = Some(r.clone()),
            StreamEvent::Error(_) | StreamEvent::Unkept => self.failed = true,
            StreamEvent::Start { .. } | StreamEvent::ToolCallEnd { .. } => {}
        }
    }

    /// The answer, if the stream completed (it finished, with no error); its usage as reported (zero when
    /// none came: the caller puts the usage it billed in).
    pub(crate) fn finish(self) -> Option<Response> {
        if self.failed {
            return None;
        }
        let stop = self.stop?;
        Some(Response {
            id: String::new(),
            model: String::new(),
            content: self.content,
            stop,
            usage: self.usage.unwrap_or_default(),
            created: 0,
            unkept: false,
        })
    }
}

/// A relayed stream (passed on as it came) read with its protocol's decoder into the answer it amounts to.
pub(crate) struct FromRelay {
    decoder: Box<dyn StreamDecoder>,
    events: Vec<StreamEvent>,
    collector: Collector,
    done: bool,
}

impl FromRelay {
    pub(crate) fn new(decoder: Box<dyn StreamDecoder>) -> FromRelay {
        FromRelay {
            decoder,
            events: Vec::new(),
            collector: Collector::default(),
            done: false,
        }
    }

    pub(crate) fn feed(&mut self, ev: &SseEvent) {
        self.done |= self.decoder.feed(ev, &mut self.events);
        for e in self.events.drain(..) {
            self.collector.feed(&e);
        }
    }

    /// The answer, if the upstream's stream completed (its end marker came, with no error).
    pub(crate) fn finish(self) -> Option<Response> {
        if !self.done {
            return None;
        }
        self.collector.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::egress::events_from_response;
    use crate::protocol::ApiError;

    #[test]
    fn a_stream_folds_back_into_its_answer() {
        let resp = Response {
            id: String::new(),
            model: String::new(),
            content: vec![
                Part::Reasoning {
                    text: "think".into(),
                    signature: Some("sig".into()),
                },
                Part::Text("hello".into()),
                Part::ToolCall {
                    id: "c1".into(),
                    name: "f".into(),
                    arguments: "{\"a\":1}".into(),
                },
            ],
            stop: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            },
            created: 0,
            unkept: false,
        };
        let mut c = Collector::default();
        for ev in events_from_response(&resp) {
            c.feed(&ev);
        }
        assert_eq!(c.finish(), Some(resp.clone()));
        // Deltas join; an error or a missing finish keeps nothing.
        let mut c = Collector::default();
        c.feed(&StreamEvent::TextDelta("a".into()));
        c.feed(&StreamEvent::TextDelta("b".into()));
        c.feed(&StreamEvent::Finish(StopReason::EndTurn));
        assert_eq!(c.finish().map(|r| r.text()), Some("ab".to_string()));
        let mut c = Collector::default();
        c.feed(&StreamEvent::TextDelta("a".into()));
        assert_eq!(c.finish(), None);
        let mut c = Collector::default();
        c.feed(&StreamEvent::Finish(StopReason::EndTurn));
        c.feed(&StreamEvent::Error(ApiError::bad_gateway("cut")));
        assert_eq!(c.finish(), None);
        // An answer holding what the canonical form does not (a refusal, redacted thinking) keeps nothing.
        let unkept = Response {
            unkept: true,
            ..resp
        };
        let mut c = Collector::default();
        for ev in events_from_response(&unkept) {
            c.feed(&ev);
        }
        assert_eq!(c.finish(), None);
    }
}
