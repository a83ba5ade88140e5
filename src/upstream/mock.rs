//! The built-in mock model: a deterministic answer in canonical form, which the client's codec encodes in
//! any protocol, streamed or not. Real token counts (estimated from the actual text), `max_tokens` honoured,
//! a forced tool call when the request forces one, JSON that fits the schema when structured output is
//! asked for; embeddings, a unit vector per text. It lets a newcomer try every endpoint with no upstream, and tests run without one.

use serde_json::{json, Value};

use crate::protocol::canon::{
    OutputFormat, Part, Request, Response, Role, StopReason, StreamEvent, Tool, ToolChoice, Usage,
};
use crate::protocol::embed::{EmbedInput, EmbedRequest, Embeddings};
use crate::protocol::estimate::tokens as estimate_tokens;
use crate::util::{new_id, unix_now};

/// The answer to a request, as the sequence of stream events and as the complete response they add up to.
pub(crate) struct MockReply {
    /// Without the leading `Start` (the driver emits it first with the same id).
    pub events: Vec<StreamEvent>,
    pub response: Response,
}

/// The text the mock answers to a user message.
pub(crate) fn answer_text(user_text: &str) -> String {
    let said: String = user_text.trim().chars().take(200).collect();
    if said.is_empty() {
        "Hello! This is tollgate's built-in mock model.".to_string()
    } else {
        format!("Hello! This is tollgate's built-in mock model. You said: {said}")
    }
}

/// Builds the mock's answer to `req`, naming itself `model`.
pub(crate) fn reply(req: &Request, model: &str) -> MockReply {
    let id = new_id("mock_");
    let input_tokens = estimate_tokens(&req.all_text());
    let mut said = Said {
        events: Vec::new(),
        content: Vec::new(),
        output_tokens: 0,
        reasoning_tokens: 0,
        limit: req.max_tokens.unwrap_or(u64::MAX),
        stop: StopReason::EndTurn,
    };
    if let Some(effort) = &req.reasoning_effort {
        if !matches!(effort.as_str(), "none" | "minimal") {
            said.think("The user wants an answer; I will reply briefly.");
        }
    }
    let forced_tool = match &req.tool_choice {
        Some(ToolChoice::Function(name)) => req.tools.iter().find(|t| &t.name == name),
        Some(ToolChoice::Required) => req.tools.first(),
        _ => None,
    };
    let last_is_tool_result = req.messages.last().is_some_and(|m| {
        m.role == Role::Tool
            || m.content
                .iter()
                .any(|p| matches!(p, Part::ToolResult { .. }))
    });
    match forced_tool {
        Some(tool) if !last_is_tool_result => said.call(tool),
        _ => said.write(&text_for(req, last_is_tool_result)),
    }
    let Said {
        mut events,
        content,
        output_tokens,
        reasoning_tokens,
        stop,
        ..
    } = said;
    let usage = Usage {
        input_tokens,
        output_tokens,
        reasoning_tokens,
        ..Usage::default()
    };
    events.push(StreamEvent::Finish(stop.clone()));
    events.push(StreamEvent::Usage(usage));
    MockReply {
        events,
        response: Response {
            id,
            model: model.to_string(),
            content,
            stop,
            usage,
            created: unix_now(),
            unkept: false,
        },
    }
}

/// What the mock has said so far: the stream's events and the answer's parts, with their tokens.
struct Said {
    events: Vec<StreamEvent>,
    content: Vec<Part>,
    output_tokens: u64,
    reasoning_tokens: u64,
    /// The output limit: text stops before it.
    limit: u64,
    stop: StopReason,
}

impl Said {
    /// A short thought (reasoning was asked for).
    fn think(&mut self, thought: &str) {
        self.reasoning_tokens = estimate_tokens(thought);
        self.output_tokens += self.reasoning_tokens;
        self.events
            .push(StreamEvent::ReasoningDelta(thought.to_string()));
        self.content.push(Part::Reasoning {
            text: thought.to_string(),
            signature: None,
        });
    }

    /// A call of `tool` (forced by the request) with arguments that fit its schema, streamed in two pieces.
    fn call(&mut self, tool: &Tool) {
        let args = example_for_schema(&tool.parameters).to_string();
        let call_id = new_id("call_");
        self.output_tokens += estimate_tokens(&tool.name) + estimate_tokens(&args);
        self.events.push(StreamEvent::ToolCallStart {
            index: 0,
            id: call_id.clone(),
            name: tool.name.clone(),
        });
        let mid = args.len() / 2;
        let split = (mid..=args.len())
            .find(|&i| args.is_char_boundary(i))
            .unwrap_or(args.len());
        for piece in [&args[..split], &args[split..]] {
            if !piece.is_empty() {
                self.events.push(StreamEvent::ToolArgsDelta {
                    index: 0,
                    delta: piece.to_string(),
                });
            }
        }
        self.content.push(Part::ToolCall {
            id: call_id,
            name: tool.name.clone(),
            arguments: args,
        });
        self.stop = StopReason::ToolUse;
    }

    /// `text`, a word or two per delta, as far as the output limit lets it.
    fn write(&mut self, text: &str) {
        let mut emitted = String::new();
        for piece in split_deltas(text) {
            let cost = estimate_tokens(&format!("{emitted}{piece}")) - estimate_tokens(&emitted);
            if self.output_tokens + cost > self.limit {
                self.stop = StopReason::MaxTokens;
                break;
            }
            self.output_tokens += cost;
            emitted.push_str(piece);
            self.events.push(StreamEvent::TextDelta(piece.to_string()));
        }
        if !emitted.is_empty() {
            self.content.push(Part::Text(emitted));
        }
    }
}

/// What the mock writes: JSON that fits a requested schema, what a tool returned, or its greeting.
fn text_for(req: &Request, last_is_tool_result: bool) -> String {
    match &req.output_format {
        Some(OutputFormat::JsonSchema { schema, .. }) => example_for_schema(schema).to_string(),
        Some(OutputFormat::JsonObject) => {
            json!({"answer": answer_text(&req.last_user_text())}).to_string()
        }
        _ if last_is_tool_result => {
            let result = req
                .messages
                .last()
                .map(|m| m.joined_text())
                .unwrap_or_default();
            let shown: String = result.chars().take(200).collect();
            format!("The tool returned: {shown}")
        }
        _ => answer_text(&req.last_user_text()),
    }
}

/// Splits text into deltas of a word or two each (with their trailing spaces), at least one.
fn split_deltas(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut words = 0;
    for (i, c) in text.char_indices() {
        if c == ' ' {
            words += 1;
            if words % 2 == 0 {
                out.push(&text[start..=i]);
                start = i + 1;
            }
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// A value that satisfies a (simple) JSON Schema: the first enum value, placeholder scalars, every property.
pub(crate) fn example_for_schema(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        return first.clone();
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(first) = schema
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            return example_for_schema(first);
        }
    }
    let ty = match schema.get("type") {
        Some(Value::String(s)) => s.as_str(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "string",
    };
    match ty {
        "object" => {
            let mut obj = serde_json::Map::new();
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (k, v) in props {
                    obj.insert(k.clone(), example_for_schema(v));
                }
            }
            Value::Object(obj)
        }
        "array" => json!([example_for_schema(
            schema.get("items").unwrap_or(&json!({"type": "string"}))
        )]),
        "integer" => json!(1),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!("mock"),
    }
}

/// The mock's vectors: the same text always gives the same unit vector (of `dimensions`, 256 unless asked),
/// different texts different ones; the input counted as the mock counts a generation's.
pub(crate) fn embeddings(req: &EmbedRequest) -> Embeddings {
    let size = req.dimensions.unwrap_or(256).clamp(1, 4096) as usize;
    let vectors = req
        .inputs
        .iter()
        .map(|input| {
            let mut seed = match input {
                EmbedInput::Text(t) => fnv(t.as_bytes()),
                EmbedInput::Tokens(ids) => ids
                    .iter()
                    .fold(fnv(b"ids"), |h, id| fnv_more(h, &id.to_le_bytes())),
            };
            let mut v: Vec<f32> = (0..size)
                .map(|_| {
                    // xorshift64*: a fixed sequence from the seed, in [-1, 1).
                    seed ^= seed >> 12;
                    seed ^= seed << 25;
                    seed ^= seed >> 27;
                    let x = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
                    (x as f32 / (1u64 << 23) as f32) - 1.0
                })
                .collect();
            let norm = v
                .iter()
                .map(|x| x * x)
                .sum::<f32>()
                .sqrt()
                .max(f32::MIN_POSITIVE);
            v.iter_mut().for_each(|x| *x /= norm);
            v
        })
        .collect();
    let input_tokens = Some(req.input_estimate());
    Embeddings {
        vectors,
        input_tokens,
    }
}

/// FNV-1a of `bytes` (never 0, so the generator above never sticks).
fn fnv(bytes: &[u8]) -> u64 {
    fnv_more(0xcbf2_9ce4_8422_2325, bytes)
}

fn fnv_more(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h | 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::canon::{Message, Tool};

    fn req(text: &str) -> Request {
        Request {
            model: "mock".into(),
            messages: vec![Message::text(Role::User, text)],
            ..Request::default()
        }
    }

    #[test]
    fn answers_in_several_deltas_with_real_counts() {
        let r = reply(&req("ping pong"), "mock");
        let deltas = r
            .events
            .iter()
            .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
            .count();
        assert!(deltas >= 3, "{deltas}");
        assert!(r.response.text().ends_with("You said: ping pong"));
        assert_eq!(
            r.response.usage.output_tokens,
            estimate_tokens(&r.response.text())
        );
        assert_eq!(
            r.response.usage.input_tokens,
            estimate_tokens(&req("ping pong").all_text())
        );
    }

    #[test]
    fn honours_max_tokens() {
        let mut q = req("a long question with many words in it");
        q.max_tokens = Some(3);
        let r = reply(&q, "mock");
        assert_eq!(r.response.stop, StopReason::MaxTokens);
        assert!(r.response.usage.output_tokens <= 3);
    }

    #[test]
    fn forced_tool_calls_fit_the_schema() {
        let mut q = req("weather?");
        q.tools.push(Tool {
            custom: false,
            name: "get_weather".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}),
            strict: None,
        });
        q.tool_choice = Some(ToolChoice::Required);
        let r = reply(&q, "mock");
        assert_eq!(r.response.stop, StopReason::ToolUse);
        match &r.response.content[0] {
            Part::ToolCall {
                name, arguments, ..
            } => {
                assert_eq!(name, "get_weather");
                assert_eq!(
                    serde_json::from_str::<Value>(arguments).unwrap(),
                    json!({"city": "mock", "days": 1})
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[cfg(test)]
mod embedding_tests {
    use super::*;
    use crate::protocol::embed::EmbedInput;

    #[test]
    fn the_mock_gives_each_text_its_own_unit_vector() {
        let req = EmbedRequest {
            inputs: vec![
                EmbedInput::Text("a".into()),
                EmbedInput::Text("b".into()),
                EmbedInput::Text("a".into()),
            ],
            dimensions: Some(16),
            ..EmbedRequest::default()
        };
        let got = embeddings(&req);
        assert_eq!(got.vectors.len(), 3);
        assert_eq!(got.vectors[0].len(), 16);
        assert_eq!(got.vectors[0], got.vectors[2]);
        assert_ne!(got.vectors[0], got.vectors[1]);
        let norm: f32 = got.vectors[1].iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    }
}
