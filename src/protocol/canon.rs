//! The canonical representation every codec converts to and from: one request, one response, one stream
//! event vocabulary. Translating between N protocols costs N codecs instead of N² translators.

use serde_json::Value;

use super::ApiError;

/// Who spoke a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool result message (Chat `role:"tool"`); its content holds `Part::ToolResult`s.
    Tool,
}

/// An image, by URL or inline.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ImageSource {
    Url(String),
    Base64 { media_type: String, data: String },
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Part {
    Text(String),
    Image(ImageSource),
    /// A call the assistant made. `arguments` is the JSON text, as OpenAI carries it.
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    /// The result of a call, sent back by the client.
    ToolResult {
        call_id: String,
        content: Vec<Part>,
        is_error: bool,
    },
    /// Reasoning the model showed, with the vendor's opaque signature when there is one.
    Reasoning {
        text: String,
        signature: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

impl Message {
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Message {
            role,
            content: vec![Part::Text(text.into())],
        }
    }

    /// The message's text parts joined.
    pub fn joined_text(&self) -> String {
        let mut out = String::new();
        for part in &self.content {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::ToolResult { content, .. } => {
                    for p in content {
                        if let Part::Text(t) = p {
                            out.push_str(t);
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// A function the model may call. A Responses `custom` tool (free-form text input) is carried as a function
/// with one string parameter `input`, and `custom` set so the answer can be turned back into a custom call.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tool {
    pub custom: bool,
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: Value,
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ToolChoice {
    Auto,
    None,
    /// Must call some tool.
    Required,
    /// Must call this tool.
    Function(String),
    /// Must use this hosted tool (a Responses `tool_choice` of its type): sent as it came to a Responses
    /// upstream; another vendor's runs no hosted tool of OpenAI's, and gets `auto`.
    Hosted(String),
}

/// Requested shape of the text output.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum OutputFormat {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Value,
        strict: Option<bool>,
        description: Option<String>,
    },
}

/// A generation request, whatever protocol it arrived in.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Request {
    pub model: String,
    /// System prompt pieces in order (Chat system/developer messages, Responses `instructions`, Anthropic
    /// `system`).
    pub system: Vec<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Sampling from the k likeliest tokens (Messages `top_k`, Gemini `topK`), where the upstream takes it.
    pub top_k: Option<u64>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub output_format: Option<OutputFormat>,
    /// `low`, `medium`, `high`, ... as the client said it.
    pub reasoning_effort: Option<String>,
    /// The reasoning budget in tokens, where the client gave one (Messages `thinking.budget_tokens`, Gemini
    /// `thinkingBudget`); upstreams that take a budget use it (within the output limit), others the effort.
    pub reasoning_budget: Option<u64>,
    /// Whether the client asked to see the model's reasoning (Gemini `includeThoughts`); None: as its
    /// protocol shows it by default.
    pub reasoning_shown: Option<bool>,
    pub user: Option<String>,
    /// Tools of a Responses `namespace` group, flattened into plain functions: (flat name, namespace, name).
    pub namespaced_tools: Vec<(String, String, String)>,
    /// Hosted tools the client asked for that a translated upstream cannot run (left out, reported).
    pub dropped_tools: Vec<String>,
    /// A Responses client's own `instructions` field, echoed back in its response objects.
    pub instructions: Option<String>,
}

impl Request {
    /// No reasoning asked of the upstream (a model that does not reason).
    pub fn drop_reasoning(&mut self) {
        self.reasoning_effort = None;
        self.reasoning_budget = None;
    }

    /// The (namespace, name) a flattened tool name stands for.
    pub fn unflatten(&self, flat: &str) -> Option<(&str, &str)> {
        self.namespaced_tools
            .iter()
            .find(|(f, _, _)| f == flat)
            .map(|(_, ns, n)| (ns.as_str(), n.as_str()))
    }

    /// Text of the last user message (what the mock model answers to).
    pub fn last_user_text(&self) -> String {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(Message::joined_text)
            .unwrap_or_default()
    }

    /// All text in the request, for token estimates.
    pub fn all_text(&self) -> String {
        let mut out = self.system.join("\n");
        for m in &self.messages {
            out.push('\n');
            out.push_str(&m.joined_text());
            for p in &m.content {
                if let Part::ToolCall {
                    name, arguments, ..
                } = p
                {
                    out.push_str(name);
                    out.push_str(arguments);
                }
            }
        }
        for t in &self.tools {
            out.push_str(&t.name);
            out.push_str(t.description.as_deref().unwrap_or(""));
            out.push_str(&t.parameters.to_string());
        }
        out
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    /// The stop sequence that matched, when the upstream says which.
    StopSequence(Option<String>),
    ToolUse,
    ContentFilter,
    /// Anthropic `pause_turn` and anything else without an equivalent.
    Other(String),
}

/// Token usage, normalised once from each vendor's semantics (the decoders of `chat/`, `responses/`,
/// `messages/` and `gemini/`), so that one price sheet bills every path alike:
///
/// - `input_tokens` counts all input: uncached, cache reads and cache writes. OpenAI's `prompt_tokens` /
///   `input_tokens` already do (its `cached_tokens` and `cache_write_tokens` are parts of them); Anthropic's
///   three buckets (`input_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens`) are added up;
///   the Gemini API's `promptTokenCount` already holds its `cachedContentTokenCount`.
/// - `cached_input_tokens`: the part read from a cache. `cache_write_tokens`: the part written to one, of
///   which `cache_write_1h_tokens` were written for an hour (Anthropic's `ephemeral_1h_input_tokens`); the
///   rest were written for five minutes or for a lifetime the upstream does not state.
/// - `output_tokens` counts all output, reasoning included: OpenAI's `completion_tokens` / `output_tokens`
///   and Anthropic's `output_tokens` already do; Gemini's `thoughtsTokenCount` comes apart from its
///   `candidatesTokenCount` and is added to it. `reasoning_tokens` is the part that was reasoning (never
///   billed twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_tokens: u64,
    pub cache_write_1h_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
}

/// The input of a usage in its billed kinds, which add up to its `input_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InputSplit {
    pub uncached: u64,
    pub cache_reads: u64,
    /// Written for five minutes, or for a lifetime the upstream did not state.
    pub cache_writes_5m: u64,
    pub cache_writes_1h: u64,
}

impl Usage {
    /// Input and output, saturating (counts come from upstreams and clients).
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// The input by kind, the one rule every use shares (billing, the record, a Messages client's buckets):
    /// reads and writes are parts of the input, so counts that claim more than the input are cut to it
    /// (reads first, then writes, the 1-hour ones first).
    pub fn split(&self) -> InputSplit {
        let reads = self.cached_input_tokens.min(self.input_tokens);
        let writes = self.cache_write_tokens.min(self.input_tokens - reads);
        let writes_1h = self.cache_write_1h_tokens.min(writes);
        InputSplit {
            uncached: self.input_tokens - reads - writes,
            cache_reads: reads,
            cache_writes_5m: writes - writes_1h,
            cache_writes_1h: writes_1h,
        }
    }
}

/// A complete (non-streamed) answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Response {
    pub id: String,
    pub model: String,
    /// Text, tool calls and reasoning, in output order.
    pub content: Vec<Part>,
    pub stop: StopReason,
    pub usage: Usage,
    pub created: u64,
    /// The upstream's answer held what the canonical form leaves out (a refusal, redacted thinking,
    /// citations, audio or images): a replay would alter it, so it is never kept in the answer cache.
    #[serde(skip)]
    pub unkept: bool,
}

impl Response {
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// One step of a streamed answer. Tool calls are numbered by `index` in output order.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Always first: ids and what is known of the input.
    Start {
        id: String,
        model: String,
        created: u64,
        /// An estimate of input tokens when the upstream reports none yet.
        input_tokens: u64,
    },
    TextDelta(String),
    ReasoningDelta(String),
    ReasoningSignature(String),
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    ToolArgsDelta {
        index: usize,
        delta: String,
    },
    /// The call's arguments are complete (where the upstream's stream says so: see `contiguous.rs`).
    ToolCallEnd {
        index: usize,
    },
    /// Usage so far (cumulative); the last one wins.
    Usage(Usage),
    /// Generation ended for this reason; usage may still follow.
    Finish(StopReason),
    /// The stream failed after it started.
    Error(ApiError),
    /// The upstream's stream held what the canonical form leaves out (see `Response::unkept`): the answer
    /// is not kept in the answer cache. Nothing is written for it.
    Unkept,
}
