//! The canonical representation every codec converts to and from: one request, one response, one stream
//! event vocabulary. Translating between N protocols costs N codecs instead of N² translators.

use serde_json::Value;

use super::ApiError;

/// Who spoke a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Role {
    /// A system or developer message among the conversation's messages (Chat and Responses take the leading
    /// ones into `Request::system` instead).
    System,
    /// A user turn (Gemini `user`); in Messages it also carries the tool results the client sends back.
    User,
    /// The model's turn (Gemini `model`): text, reasoning and tool calls.
    Assistant,
    /// A tool result message (Chat `role:"tool"`); its content holds `Part::ToolResult`s.
    Tool,
}

/// An image, by URL or inline.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ImageSource {
    /// An image at a URL (Chat `image_url.url`, Messages `source.url`); an OpenAI `data:` URI becomes
    /// `Base64`.
    Url(String),
    /// Inline image data.
    Base64 {
        /// The image's MIME type (`image/png`, ...).
        media_type: String,
        /// The image bytes, base64-encoded.
        data: String,
    },
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Part {
    /// Plain text.
    Text(String),
    /// An image the client sent (in a user message, or in a tool result where its protocol allows one).
    Image(ImageSource),
    /// A call the assistant made. `arguments` is the JSON text, as OpenAI carries it.
    ToolCall {
        /// The call's id, which the `ToolResult` answering it names (made up where a Gemini client's call
        /// has none).
        id: String,
        /// The name of the function called (a Responses namespace tool's flat `ns__name`).
        name: String,
        /// The arguments: a JSON object as text (a Messages `input` object is serialized to it).
        arguments: String,
    },
    /// The result of a call, sent back by the client.
    ToolResult {
        /// The id of the `ToolCall` this answers (Chat `tool_call_id`, Messages `tool_use_id`, Responses
        /// `call_id`).
        call_id: String,
        /// What the tool returned: text, and images where the client's protocol carries them.
        content: Vec<Part>,
        /// The tool failed (Messages `is_error`); false where the client's protocol has no such flag.
        is_error: bool,
    },
    /// Reasoning the model showed, with the vendor's opaque signature when there is one.
    Reasoning {
        /// The reasoning text (empty where the vendor sent only a signature).
        text: String,
        /// The vendor's opaque signature that lets the reasoning be sent back (Anthropic `signature`, Gemini
        /// `thoughtSignature`); None from other vendors.
        signature: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
/// One turn of the conversation: who spoke, and the content parts in order.
pub struct Message {
    /// Who spoke it.
    pub role: Role,
    /// Its content parts, in order.
    pub content: Vec<Part>,
}

impl Message {
    /// A message of `role` holding one text part.
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
    /// A Responses `custom` tool carried as a function (see above): a call to it is answered as a custom
    /// call.
    pub custom: bool,
    /// The function's name, as the model calls it.
    pub name: String,
    /// What the tool does, for the model; None when the client gave no description.
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: Value,
    /// OpenAI's `strict`: the model's arguments must follow `parameters` exactly. None when not given
    /// (always for custom tools and for Messages and Gemini clients).
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
/// How the model may use the request's tools (`tool_choice`; Gemini `functionCallingConfig.mode`).
pub enum ToolChoice {
    /// The model decides whether to call a tool (`auto`; Gemini `AUTO`).
    Auto,
    /// The model may call no tool (`none`; Gemini `NONE`).
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
    /// Plain text, the default (`{"type": "text"}`).
    Text,
    /// Any JSON object: OpenAI's JSON mode (`json_object`), a Gemini `responseMimeType` of
    /// `application/json` without a schema.
    JsonObject,
    /// JSON that follows a schema (OpenAI `json_schema`, Messages `output_config.format`, Gemini
    /// `responseJsonSchema` or `responseSchema`).
    JsonSchema {
        /// The schema's name (`output` where the client gave none, `response` for Gemini clients).
        name: String,
        /// The JSON Schema the output must follow.
        schema: Value,
        /// OpenAI's `strict` as the client gave it (None when not given, always for Gemini clients);
        /// `Some(true)` for Messages clients.
        strict: Option<bool>,
        /// What the output is, for the model; None when not given.
        description: Option<String>,
    },
}

/// A generation request, whatever protocol it arrived in.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Request {
    /// The model the client's body names (its public name); empty for Gemini clients, whose path names it.
    /// Upstream bodies name `EgressOptions::model` instead.
    pub model: String,
    /// System prompt pieces in order (Chat system/developer messages, Responses `instructions`, Anthropic
    /// `system`).
    pub system: Vec<String>,
    /// The conversation, in order.
    pub messages: Vec<Message>,
    /// The functions the model may call (hosted tools are left out: see `dropped_tools`).
    pub tools: Vec<Tool>,
    /// How the model may use `tools`; None when the client did not say.
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may make several tool calls in one turn (`parallel_tool_calls`; a Messages
    /// `disable_parallel_tool_use` gives `Some(false)`); None when not given.
    pub parallel_tool_calls: Option<bool>,
    /// The most output tokens the answer may take (Chat `max_completion_tokens`, else `max_tokens`;
    /// Responses `max_output_tokens`; Messages `max_tokens`; Gemini `maxOutputTokens`); None when the client
    /// gave none. A translated request is capped at the model's `max_output_tokens`.
    pub max_tokens: Option<u64>,
    /// Sampling temperature as the client sent it; clamped to the upstream's range when sent.
    pub temperature: Option<f64>,
    /// Nucleus sampling (`top_p`, Gemini `topP`) as the client sent it; clamped to the upstream's range when
    /// sent.
    pub top_p: Option<f64>,
    /// Sampling from the k likeliest tokens (Messages `top_k`, Gemini `topK`), where the upstream takes it.
    pub top_k: Option<u64>,
    /// Stop sequences (Chat `stop`, Messages `stop_sequences`, Gemini `stopSequences`); empty when none.
    pub stop: Vec<String>,
    /// The client's body asked for a stream (`stream`); false for Gemini clients, whose path says it.
    pub stream: bool,
    /// The requested shape of the text output; None: the upstream's default (plain text).
    pub output_format: Option<OutputFormat>,
    /// `low`, `medium`, `high`, ... as the client said it.
    pub reasoning_effort: Option<String>,
    /// The reasoning budget in tokens, where the client gave one (Messages `thinking.budget_tokens`, Gemini
    /// `thinkingBudget`); upstreams that take a budget use it (within the output limit), others the effort.
    pub reasoning_budget: Option<u64>,
    /// Whether the client asked to see the model's reasoning (Gemini `includeThoughts`); None: as its
    /// protocol shows it by default.
    pub reasoning_shown: Option<bool>,
    /// The client's end-user id (Chat and Responses `user`, Messages `metadata.user_id` cut to 64
    /// characters), passed on to the upstream; None when not given.
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
    /// The model ended its turn (Chat `stop`, Messages `end_turn`, Gemini `STOP` without calls).
    EndTurn,
    /// The output limit was reached (Chat `length`, Messages `max_tokens`, Responses `incomplete` for
    /// `max_output_tokens`, Gemini `MAX_TOKENS`).
    MaxTokens,
    /// The stop sequence that matched, when the upstream says which.
    StopSequence(Option<String>),
    /// The model called tools and waits for their results (Chat `tool_calls`, Messages `tool_use`).
    ToolUse,
    /// The vendor's filter withheld output (Chat `content_filter`, Messages `refusal`, Gemini `SAFETY` and
    /// its kin).
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
    /// All input tokens: uncached, cache reads and cache writes.
    pub input_tokens: u64,
    /// The part of `input_tokens` read from a cache.
    pub cached_input_tokens: u64,
    /// The part of `input_tokens` written to a cache.
    pub cache_write_tokens: u64,
    /// The part of `cache_write_tokens` written for an hour (Anthropic's `ephemeral_1h_input_tokens`).
    pub cache_write_1h_tokens: u64,
    /// All output tokens, reasoning included.
    pub output_tokens: u64,
    /// The part of `output_tokens` that was reasoning.
    pub reasoning_tokens: u64,
}

/// The input of a usage in its billed kinds, which add up to its `input_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InputSplit {
    /// Input neither read from nor written to a cache.
    pub uncached: u64,
    /// Input read from a cache.
    pub cache_reads: u64,
    /// Written for five minutes, or for a lifetime the upstream did not state.
    pub cache_writes_5m: u64,
    /// Written for an hour.
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
    /// The answer's id; the gateway replaces the upstream's with its own (`Codec::new_response_id`) before a
    /// client sees it.
    pub id: String,
    /// The model name the answer gives; the gateway replaces the upstream's with the public name the client
    /// asked for.
    pub model: String,
    /// Text, tool calls and reasoning, in output order.
    pub content: Vec<Part>,
    /// Why generation stopped.
    pub stop: StopReason,
    /// Token usage, normalised (see `Usage`); estimated where the upstream reported none.
    pub usage: Usage,
    /// Unix time in seconds: the upstream's `created` where it gives one, else the gateway's clock (0 until
    /// it is set).
    pub created: u64,
    /// The upstream's answer held what the canonical form leaves out (a refusal, redacted thinking,
    /// citations, audio or images): a replay would alter it, so it is never kept in the answer cache.
    #[serde(skip)]
    pub unkept: bool,
}

impl Response {
    /// The answer's text parts joined (no reasoning, no tool calls).
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
        /// The answer's id as the client sees it (the gateway's own).
        id: String,
        /// The public model name the client asked for.
        model: String,
        /// Unix time in seconds the stream started.
        created: u64,
        /// An estimate of input tokens when the upstream reports none yet.
        input_tokens: u64,
    },
    /// More of the answer's text.
    TextDelta(String),
    /// More of the reasoning the model shows.
    ReasoningDelta(String),
    /// The vendor's opaque signature of the reasoning (see `Part::Reasoning`).
    ReasoningSignature(String),
    /// A tool call begins.
    ToolCallStart {
        /// The call's position among the answer's tool calls, from 0.
        index: usize,
        /// The call's id.
        id: String,
        /// The name of the function called.
        name: String,
    },
    /// More of a call's arguments.
    ToolArgsDelta {
        /// The call it belongs to (its `ToolCallStart` index).
        index: usize,
        /// The next piece of the arguments' JSON text.
        delta: String,
    },
    /// The call's arguments are complete (where the upstream's stream says so: see `contiguous.rs`).
    ToolCallEnd {
        /// The call whose arguments are complete.
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
