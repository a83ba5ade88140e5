//! Pieces shared by the three upstream codecs (requests to, and answers from, an upstream of another
//! protocol): how it is sent (`EgressOptions`), tool-result text, reasoning-effort policy, and turning a
//! complete answer into stream events.

use super::canon::{Part, Response, StreamEvent};

/// How a canonical request is sent to an upstream of another protocol.
#[derive(Debug, Clone)]
pub struct EgressOptions {
    /// The model name the upstream knows.
    pub model: String,
    /// Ask the upstream for a streamed answer (`stream: true` in the body; a Gemini upstream's path says it
    /// instead).
    pub stream: bool,
    /// The output limit for upstreams that require one when the client gave none.
    pub default_max_tokens: u64,
    /// Chat upstreams: send the limit as `max_completion_tokens` (OpenAI) instead of `max_tokens`.
    pub max_completion_tokens_field: bool,
    /// Messages upstreams: ask for structured output with a forced tool instead of `output_config.format`.
    pub structured_via_tool: bool,
}

/// The name of the forced tool that carries structured output when `structured_via_tool` is on.
pub const STRUCTURED_TOOL: &str = "structured_output";

/// The text of a tool result for protocols whose tool results are text only. An error result is prefixed,
/// since OpenAI has no error flag; images have no place there and are named instead.
pub(crate) fn tool_result_text(content: &[Part], is_error: bool) -> String {
    let mut text = String::new();
    for p in content {
        match p {
            Part::Text(t) => text.push_str(t),
            Part::Image(_) => {
                text.push_str("[image omitted: this upstream takes text-only tool results]")
            }
            _ => {}
        }
    }
    if is_error {
        format!("Error: {text}")
    } else {
        text
    }
}

/// The Anthropic thinking budget for an effort level; `None` turns thinking off.
pub(crate) fn thinking_budget(effort: &str) -> Option<u64> {
    match effort {
        "none" => None,
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" => Some(24_576),
        _ => Some(32_000), // xhigh, max
    }
}

/// The stream events a complete answer amounts to (for an upstream that answered a streaming request with
/// one JSON body). Without the leading `Start`.
pub(crate) fn events_from_response(resp: &Response) -> Vec<StreamEvent> {
    let mut events = Vec::new();
    if resp.unkept {
        events.push(StreamEvent::Unkept);
    }
    let mut index = 0;
    for p in &resp.content {
        match p {
            Part::Text(t) => events.push(StreamEvent::TextDelta(t.clone())),
            Part::Reasoning { text, signature } => {
                events.push(StreamEvent::ReasoningDelta(text.clone()));
                if let Some(s) = signature {
                    events.push(StreamEvent::ReasoningSignature(s.clone()));
                }
            }
            Part::ToolCall {
                id,
                name,
                arguments,
            } => {
                events.push(StreamEvent::ToolCallStart {
                    index,
                    id: id.clone(),
                    name: name.clone(),
                });
                events.push(StreamEvent::ToolArgsDelta {
                    index,
                    delta: arguments.clone(),
                });
                events.push(StreamEvent::ToolCallEnd { index });
                index += 1;
            }
            _ => {}
        }
    }
    events.push(StreamEvent::Finish(resp.stop.clone()));
    events.push(StreamEvent::Usage(resp.usage));
    events
}
