//! A stream's events put in an order every client protocol can encode: each tool call's events together,
//! and nothing between a call's start and its end. Upstreams may interleave parallel calls (arguments for
//! call 0 and call 1 alternating) or put text between them; the Responses and Messages encoders write one
//! output item (or content block) at a time, closing it at the next one, and Gemini's sends a call whole,
//! so what came for a call after another began would be lost.
//!
//! One call streams live. A call that starts while it runs, and text or reasoning that comes meanwhile, is
//! held (each in its lane, in the order it first came) until the live call ends: when its upstream says so
//! (`ToolCallEnd`: Messages blocks, Responses items and Gemini parts end; a Chat stream's calls never say)
//! or the stream finishes. The next held lane then goes out, and a held call that has not ended streams
//! live from there. Usage and the stream's start pass at once; its finish, or an error, comes after every
//! held lane.

use super::canon::StreamEvent;

/// What a held lane holds.
#[derive(Debug, PartialEq)]
enum Lane {
    Call(usize),
    Other,
}

/// See the module's documentation.
#[derive(Debug, Default)]
pub(crate) struct Contiguous {
    /// The call streaming live.
    live: Option<usize>,
    /// Held lanes, in the order they first came.
    held: Vec<(Lane, Vec<StreamEvent>)>,
    /// Held calls whose end came already.
    ended: Vec<usize>,
}

impl Contiguous {
    /// Whether `ev` goes out at once, as it is, changing nothing here (most events of most streams): the
    /// caller may send it without [`push`](Self::push).
    pub(crate) fn passes(&self, ev: &StreamEvent) -> bool {
        match (self.live, ev) {
            (None, StreamEvent::ToolCallStart { .. }) => false,
            (None, _) => true,
            (Some(live), StreamEvent::ToolArgsDelta { index, .. }) => *index == live,
            (Some(_), StreamEvent::Start { .. } | StreamEvent::Usage(_)) => true,
            (Some(_), _) => false,
        }
    }

    /// Takes one event; what may go out now is pushed to `out`, in order.
    pub(crate) fn push(&mut self, ev: StreamEvent, out: &mut Vec<StreamEvent>) {
        let Some(live) = self.live else {
            if let StreamEvent::ToolCallStart { index, .. } = &ev {
                self.live = Some(*index);
            }
            out.push(ev);
            return;
        };
        match ev {
            StreamEvent::ToolArgsDelta { index, .. } if index == live => out.push(ev),
            StreamEvent::ToolCallEnd { index } if index == live => {
                out.push(ev);
                self.live = None;
                self.release(out);
            }
            StreamEvent::ToolCallStart { index, .. } => {
                self.held.push((Lane::Call(index), vec![ev]))
            }
            StreamEvent::ToolArgsDelta { index, .. } | StreamEvent::ToolCallEnd { index } => {
                if matches!(ev, StreamEvent::ToolCallEnd { .. }) {
                    self.ended.push(index);
                }
                match self.held.iter_mut().find(|(l, _)| *l == Lane::Call(index)) {
                    Some((_, events)) => events.push(ev),
                    // A call never started: nothing to keep it with.
                    None => out.push(ev),
                }
            }
            StreamEvent::Start { .. } | StreamEvent::Usage(_) => out.push(ev),
            StreamEvent::Finish(_) | StreamEvent::Error(_) => {
                self.flush(out);
                out.push(ev);
            }
            StreamEvent::TextDelta(_)
            | StreamEvent::ReasoningDelta(_)
            | StreamEvent::ReasoningSignature(_)
            | StreamEvent::Unkept => match self.held.last_mut() {
                Some((Lane::Other, events)) => events.push(ev),
                _ => self.held.push((Lane::Other, vec![ev])),
            },
        }
    }

    /// Everything held goes out, in order (the stream ends).
    pub(crate) fn flush(&mut self, out: &mut Vec<StreamEvent>) {
        self.live = None;
        for (_, events) in self.held.drain(..) {
            out.extend(events);
        }
        self.ended.clear();
    }

    /// The live call ended: held lanes go out in order, until one is a call still running (it streams live
    /// from now on).
    fn release(&mut self, out: &mut Vec<StreamEvent>) {
        while !self.held.is_empty() {
            let (lane, events) = self.held.remove(0);
            out.extend(events);
            if let Lane::Call(i) = lane {
                match self.ended.iter().position(|e| *e == i) {
                    Some(at) => {
                        self.ended.remove(at);
                    }
                    None => {
                        self.live = Some(i);
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::canon::StopReason;

    fn start(i: usize) -> StreamEvent {
        StreamEvent::ToolCallStart {
            index: i,
            id: format!("c{i}"),
            name: format!("f{i}"),
        }
    }

    fn args(i: usize, d: &str) -> StreamEvent {
        StreamEvent::ToolArgsDelta {
            index: i,
            delta: d.into(),
        }
    }

    fn run(events: Vec<StreamEvent>) -> Vec<StreamEvent> {
        let mut c = Contiguous::default();
        let mut out = Vec::new();
        for ev in events {
            c.push(ev, &mut out);
        }
        out
    }

    /// Interleaved calls (a Chat upstream's, which never say they ended) come out one after the other,
    /// each whole, with the text between them after the call it interrupted.
    #[test]
    fn interleaved_calls_come_out_one_after_the_other() {
        let text = StreamEvent::TextDelta("\n".into());
        let finish = StreamEvent::Finish(StopReason::ToolUse);
        let out = run(vec![
            start(0),
            start(1),
            args(0, "{\"x\":"),
            args(1, "{\"y\":2}"),
            text.clone(),
            args(0, "1}"),
            finish.clone(),
        ]);
        assert_eq!(
            out,
            vec![
                start(0),
                args(0, "{\"x\":"),
                args(0, "1}"),
                start(1),
                args(1, "{\"y\":2}"),
                text,
                finish
            ]
        );
    }

    /// Calls whose upstream says they ended stream live one after the other; one that ended while held
    /// goes out whole, and the next running one streams live.
    #[test]
    fn ended_calls_let_the_next_one_stream() {
        let end = |i| StreamEvent::ToolCallEnd { index: i };
        let out = run(vec![
            start(0),
            args(0, "{}"),
            end(0),
            start(1),
            args(1, "{"),
        ]);
        assert_eq!(
            out,
            vec![start(0), args(0, "{}"), end(0), start(1), args(1, "{")]
        );
        let out = run(vec![
            start(0),
            start(1),
            args(1, "{}"),
            end(1),
            start(2),
            args(0, "{}"),
            end(0),
            args(2, "{"),
        ]);
        assert_eq!(
            out,
            vec![
                start(0),
                args(0, "{}"),
                end(0),
                start(1),
                args(1, "{}"),
                end(1),
                start(2),
                args(2, "{")
            ]
        );
    }
}
