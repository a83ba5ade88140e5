//! What the two OpenAI protocols (Chat Completions and Responses) share: function tools, `tool_choice`,
//! structured-output formats, image URLs, sampling ranges and reasoning effort, decoded and encoded once for
//! the codecs in `chat/` and `responses/`. Where the same thing has two shapes (Chat nests a function under
//! `function` and a schema under `json_schema`; Responses keeps both flat) the [`OpenAiShape`] parameter says which.
//! Also their common wire: the error body, the models list, the hosted tool families.

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::canon::{ImageSource, OutputFormat, Request, Tool, ToolChoice};
use super::carried::Shape as Carried;
use super::codec::{KeyIn, Listed, ModelList};
use super::fields::{self, opt_bool, opt_str};
use super::ApiError;

/// How OpenAI clients send their key.
pub(crate) const KEY_HOW: &str = "`Authorization: Bearer <key>`";

/// Where OpenAI clients put their key (`x-api-key` is taken too, as some clients of OpenAI-compatible
/// servers send it).
pub(crate) const KEY_IN: KeyIn = KeyIn {
    header: "x-api-key",
    query: None,
    how: KEY_HOW,
};

/// The error body: `{"error": {"message", "type", "param", "code"}}`.
pub(crate) fn error_body(err: &ApiError, request_id: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"error": err.openai_object(request_id)})).unwrap_or_default()
}

/// The models list of both OpenAI protocols.
pub(crate) struct OpenAiList;

impl ModelList for OpenAiList {
    /// `{"object": "list", "data": [...]}`.
    fn models_list(&self, models: &[Listed], created: u64) -> Value {
        let data: Vec<Value> = models
            .iter()
            .map(|m| self.model_entry(m, created))
            .collect();
        json!({"object": "list", "data": data})
    }

    fn model_entry(&self, m: &Listed, created: u64) -> Value {
        json!({"id": m.id, "object": "model", "created": created, "owned_by": m.owned_by})
    }
}

/// The hosted family of an OpenAI tool definition (`web_search_preview*` → `web_search`,
/// `computer_use_preview` → `computer_use`), or None for a tool the client runs (functions, custom tools,
/// `local_shell`, a local `shell`, `apply_patch`, tool search).
pub(crate) fn tool_family(t: &Map<String, Value>) -> Option<Cow<'_, str>> {
    let ty = t.get("type").and_then(Value::as_str);
    let local_shell = t
        .get("environment")
        .and_then(|e| e.get("type"))
        .is_none_or(|e| e == "local");
    match ty.unwrap_or("function") {
        "function" | "custom" | "namespace" | "local_shell" | "apply_patch" | "tool_search" => None,
        "shell" if local_shell => None,
        w if w.starts_with("web_search") => Some(Cow::Borrowed("web_search")),
        "computer_use_preview" | "computer" => Some(Cow::Borrowed("computer_use")),
        other => Some(Cow::Borrowed(other)),
    }
}

/// A function's definition as `decode_function` carries it whole (the members of the object holding its
/// `name`).
pub(crate) const FUNCTION: &[(&str, Carried)] = &[
    ("name", Carried::Str),
    ("description", Carried::Str),
    ("parameters", Carried::Any),
    ("strict", Carried::Bool),
];

/// A JSON schema format's fields as `decode_schema` carries them.
pub(crate) const SCHEMA: &[(&str, Carried)] = &[
    ("name", Carried::Str),
    ("schema", Carried::Any),
    ("strict", Carried::Bool),
    ("description", Carried::Str),
];

/// The `tool_choice` words.
pub(crate) const CHOICE_WORDS: Carried = Carried::Word(&["auto", "none", "required"]);

/// The hosted tool of an OpenAI tool definition, if it is one (see [`tool_family`]).
pub(crate) fn families(t: &Map<String, Value>) -> super::hosted::Families<'_> {
    tool_family(t).map(|f| (f, None)).into_iter().collect()
}

/// Whether a Responses `tool_choice` forces a hosted tool of `family` (`{"type": "web_search_preview"}`).
pub(crate) fn forced(body: &Map<String, Value>, _tool: &Map<String, Value>, family: &str) -> bool {
    body.get("tool_choice")
        .and_then(Value::as_object)
        .and_then(tool_family)
        .is_some_and(|f| f == family)
}

/// How a function appears in a tool list or a `tool_choice`, and a JSON schema in an output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenAiShape {
    /// Chat Completions: `{"type": "function", "function": {"name": ...}}`,
    /// `{"type": "json_schema", "json_schema": {"name": ...}}`.
    Nested,
    /// Responses: `{"type": "function", "name": ...}`, `{"type": "json_schema", "name": ...}`.
    Flat,
}

/// A function tool's definition (the object holding `name`, `description`, `parameters`, `strict`).
pub(crate) fn decode_function(f: &Map<String, Value>, path: &str) -> Result<Tool, ApiError> {
    Ok(Tool {
        custom: false,
        name: fields::req_str(f, "name", path)?.to_string(),
        description: opt_str(f, "description", path)?.map(str::to_string),
        parameters: f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        strict: opt_bool(f, "strict", path)?,
    })
}

/// `tool_choice`: `"auto"`, `"none"`, `"required"`, a function (or custom tool) in `shape`, a Responses
/// hosted tool's type, or `allowed_tools`: only the tools it names are offered (`tools` is narrowed to them,
/// as Gemini's `allowedFunctionNames` is), to be called when its `mode` is `required`.
pub(crate) fn decode_tool_choice(
    v: &Value,
    shape: OpenAiShape,
    tools: &mut Vec<Tool>,
) -> Result<Option<ToolChoice>, ApiError> {
    let o = match v {
        Value::Null => return Ok(None),
        Value::String(s) => {
            return match s.as_str() {
                "auto" => Ok(Some(ToolChoice::Auto)),
                "none" => Ok(Some(ToolChoice::None)),
                "required" => Ok(Some(ToolChoice::Required)),
                _ => Err(fields::bad_value(
                    "tool_choice",
                    "\"auto\", \"none\", \"required\" or a tool",
                )),
            }
        }
        Value::Object(o) => o,
        other => {
            return Err(fields::wrong_type(
                "tool_choice",
                "a string or an object",
                other,
            ))
        }
    };
    let ty = opt_str(o, "type", "tool_choice")?;
    let named = |inner: &str| -> Result<ToolChoice, ApiError> {
        let path = format!("tool_choice.{inner}");
        let f = fields::object(o.get(inner).unwrap_or(&Value::Null), &path)?;
        Ok(ToolChoice::Function(
            fields::req_str(f, "name", &path)?.to_string(),
        ))
    };
    let choice = match (shape, ty) {
        (_, Some("allowed_tools")) => {
            let (a, path) = match shape {
                OpenAiShape::Nested => (
                    fields::object(
                        o.get("allowed_tools").unwrap_or(&Value::Null),
                        "tool_choice.allowed_tools",
                    )?,
                    "tool_choice.allowed_tools",
                ),
                OpenAiShape::Flat => (o, "tool_choice"),
            };
            allowed_tools(a, path, shape, tools)?
        }
        (OpenAiShape::Nested, Some("custom")) => named("custom")?,
        (OpenAiShape::Nested, _) => named("function")?,
        (OpenAiShape::Flat, Some("function" | "custom")) => {
            ToolChoice::Function(fields::req_str(o, "name", "tool_choice")?.to_string())
        }
        (OpenAiShape::Flat, Some(hosted)) => ToolChoice::Hosted(hosted.to_string()),
        (OpenAiShape::Flat, None) => {
            return Err(fields::bad_value("tool_choice.type", "a tool's type"))
        }
    };
    Ok(Some(choice))
}

/// An `allowed_tools` choice (`a`, at `path`): `tools` narrowed to the functions and custom tools it names
/// (the hosted tools it names are not among them), and its mode.
fn allowed_tools(
    a: &Map<String, Value>,
    path: &str,
    shape: OpenAiShape,
    tools: &mut Vec<Tool>,
) -> Result<ToolChoice, ApiError> {
    let choice = match opt_str(a, "mode", path)?.unwrap_or("auto") {
        "auto" => ToolChoice::Auto,
        "required" => ToolChoice::Required,
        _ => {
            return Err(fields::bad_value(
                &format!("{path}.mode"),
                "\"auto\" or \"required\"",
            ))
        }
    };
    let listed = fields::opt_array(a, "tools", path)?
        .ok_or_else(|| fields::missing(&fields::join(path, "tools")))?;
    let mut names = Vec::with_capacity(listed.len());
    for (i, t) in listed.iter().enumerate() {
        let tpath = format!("{path}.tools[{i}]");
        let t = fields::object(t, &tpath)?;
        let name = match (shape, opt_str(t, "type", &tpath)?) {
            (OpenAiShape::Nested, Some("function") | None) => {
                let f = fields::object(
                    t.get("function").unwrap_or(&Value::Null),
                    &format!("{tpath}.function"),
                )?;
                fields::req_str(f, "name", &format!("{tpath}.function"))?
            }
            (OpenAiShape::Flat, Some("function" | "custom") | None) => {
                fields::req_str(t, "name", &tpath)?
            }
            _ => continue,
        };
        names.push(name);
    }
    tools.retain(|t| names.contains(&t.name.as_str()));
    Ok(choice)
}

/// A function tool in `shape`. Chat leaves out what is unset; Responses always says `description` and
/// `strict`.
pub(crate) fn encode_function(t: &Tool, shape: OpenAiShape) -> Value {
    match shape {
        OpenAiShape::Nested => {
            let mut f = json!({"name": t.name, "parameters": t.parameters});
            if let Some(d) = &t.description {
                f["description"] = json!(d);
            }
            if let Some(s) = t.strict {
                f["strict"] = json!(s);
            }
            json!({"type": "function", "function": f})
        }
        OpenAiShape::Flat => {
            json!({"type": "function", "name": t.name, "description": t.description,
                              "parameters": t.parameters, "strict": t.strict.unwrap_or(false)})
        }
    }
}

/// A `tool_choice` in `shape`.
pub(crate) fn encode_tool_choice(choice: &ToolChoice, shape: OpenAiShape) -> Value {
    match (choice, shape) {
        (ToolChoice::Auto, _) => json!("auto"),
        (ToolChoice::None, _) => json!("none"),
        (ToolChoice::Required, _) => json!("required"),
        (ToolChoice::Function(n), OpenAiShape::Nested) => {
            json!({"type": "function", "function": {"name": n}})
        }
        (ToolChoice::Function(n), OpenAiShape::Flat) => json!({"type": "function", "name": n}),
        (ToolChoice::Hosted(t), OpenAiShape::Flat) => json!({"type": t}),
        (ToolChoice::Hosted(_), OpenAiShape::Nested) => json!("auto"),
    }
}

/// A tool call's id as a Chat upstream takes it: OpenAI refuses ids over 40 characters (gemini-cli makes
/// `name__id` ones), so a longer id becomes `call_` and 35 hex digits of its SHA-256, the same wherever it
/// appears (the call and its result still pair up).
pub(crate) fn chat_call_id(id: &str) -> Cow<'_, str> {
    if id.len() <= 40 {
        return Cow::Borrowed(id);
    }
    use sha2::{Digest, Sha256};
    let hex: String = Sha256::digest(id.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Cow::Owned(format!("call_{}", &hex[..35]))
}

/// The system prompt of an OpenAI upstream's request: the request's, joined, and the instruction JSON mode
/// needs where nothing the request says names JSON.
pub(crate) fn system_text(req: &Request) -> String {
    let mut system = req.system.join("\n\n");
    if let Some(line) = json_mode_instruction(req) {
        if !system.is_empty() {
            system.push_str("\n\n");
        }
        system.push_str(line);
    }
    system
}

/// The instruction an OpenAI upstream needs for JSON mode (`json_object`), which it refuses unless the
/// messages mention JSON: the request's format is JSON mode and nothing it says names it (a Gemini client's
/// `responseMimeType` needs no such words).
fn json_mode_instruction(req: &Request) -> Option<&'static str> {
    if req.output_format != Some(OutputFormat::JsonObject) {
        return None;
    }
    let names = |t: &str| t.to_ascii_lowercase().contains("json");
    let said =
        req.system.iter().any(|s| names(s)) || req.messages.iter().any(|m| names(&m.joined_text()));
    (!said).then_some("Respond with a single valid JSON object and nothing else.")
}

/// Puts a request's tools, `parallel_tool_calls` and `tool_choice` into an upstream body of `shape`.
pub(crate) fn encode_tools(req: &Request, shape: OpenAiShape, body: &mut Map<String, Value>) {
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| encode_function(t, shape))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(p) = req.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), json!(p));
        }
    }
    if let Some(choice) = &req.tool_choice {
        body.insert("tool_choice".into(), encode_tool_choice(choice, shape));
    }
}

/// A structured-output format: `response_format` in Chat, with a schema's fields nested under `json_schema`;
/// `text.format` in Responses, with them flat beside `type`. `path` names the object in errors.
pub(crate) fn decode_output_format(
    v: &Value,
    path: &str,
    shape: OpenAiShape,
) -> Result<OutputFormat, ApiError> {
    let o = fields::object(v, path)?;
    match fields::req_str(o, "type", path)? {
        "text" => Ok(OutputFormat::Text),
        "json_object" => Ok(OutputFormat::JsonObject),
        "json_schema" => match shape {
            OpenAiShape::Nested => {
                let spath = fields::join(path, "json_schema");
                let s = fields::object(o.get("json_schema").unwrap_or(&Value::Null), &spath)?;
                decode_schema(s, &spath)
            }
            OpenAiShape::Flat => decode_schema(o, path),
        },
        _ => Err(fields::bad_value(
            &fields::join(path, "type"),
            "text, json_object or json_schema",
        )),
    }
}

/// A JSON schema format's fields: `name` (default `output`), `schema`, `strict`, `description`.
fn decode_schema(s: &Map<String, Value>, path: &str) -> Result<OutputFormat, ApiError> {
    Ok(OutputFormat::JsonSchema {
        name: opt_str(s, "name", path)?.unwrap_or("output").to_string(),
        schema: s
            .get("schema")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"})),
        strict: opt_bool(s, "strict", path)?,
        description: opt_str(s, "description", path)?.map(str::to_string),
    })
}

/// A structured-output format for an upstream body in `shape` (the value of Chat's `response_format` or of
/// Responses' `text.format`); `None` for plain text, which is the default. Unset `strict` and
/// `description` are left out.
pub(crate) fn encode_output_format(format: &OutputFormat, shape: OpenAiShape) -> Option<Value> {
    match format {
        OutputFormat::Text => None,
        OutputFormat::JsonObject => Some(json!({"type": "json_object"})),
        OutputFormat::JsonSchema {
            name,
            schema,
            strict,
            description,
        } => {
            let mut m = Map::new();
            m.insert("name".into(), json!(name));
            m.insert("schema".into(), schema.clone());
            if let Some(s) = strict {
                m.insert("strict".into(), json!(s));
            }
            if let Some(d) = description {
                m.insert("description".into(), json!(d));
            }
            Some(match shape {
                OpenAiShape::Nested => json!({"type": "json_schema", "json_schema": m}),
                OpenAiShape::Flat => {
                    m.insert("type".into(), json!("json_schema"));
                    Value::Object(m)
                }
            })
        }
    }
}

/// Puts `temperature` and `top_p` into an upstream body, clamped to OpenAI's ranges (0 to 2, 0 to 1).
pub(crate) fn encode_sampling(req: &Request, body: &mut Map<String, Value>) {
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t.clamp(0.0, 2.0)));
    }
    if let Some(p) = req.top_p {
        body.insert("top_p".into(), json!(p.clamp(0.0, 1.0)));
    }
}

/// Splits a `data:` URI into media type and base64 data; anything else is a URL.
pub(crate) fn parse_image_url(url: &str) -> ImageSource {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((meta, data)) = rest.split_once(',') {
            if let Some(media_type) = meta.strip_suffix(";base64") {
                return ImageSource::Base64 {
                    media_type: media_type.to_string(),
                    data: data.to_string(),
                };
            }
        }
    }
    ImageSource::Url(url.to_string())
}

/// The URL form of an image (a data URI for inline images).
pub(crate) fn image_url_string(src: &ImageSource) -> String {
    match src {
        ImageSource::Url(u) => u.clone(),
        ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
    }
}

/// An OpenAI reasoning effort for a client's effort word (Anthropic's `max` has no OpenAI equivalent).
pub(crate) fn effort(effort: &str) -> &str {
    match effort {
        "max" => "high",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_and_choices_in_both_shapes() {
        let choice = json!({"type": "function", "function": {"name": "f"}});
        assert_eq!(
            decode_tool_choice(&choice, OpenAiShape::Nested, &mut vec![]).unwrap(),
            Some(ToolChoice::Function("f".into()))
        );
        let flat = json!({"type": "function", "name": "f"});
        assert_eq!(
            decode_tool_choice(&flat, OpenAiShape::Flat, &mut vec![]).unwrap(),
            Some(ToolChoice::Function("f".into()))
        );
        assert_eq!(
            decode_tool_choice(
                &json!({"type": "web_search"}),
                OpenAiShape::Flat,
                &mut vec![]
            )
            .unwrap(),
            Some(ToolChoice::Hosted("web_search".into()))
        );
        assert_eq!(
            decode_tool_choice(
                &json!({"type": "custom", "name": "apply_patch"}),
                OpenAiShape::Flat,
                &mut vec![]
            )
            .unwrap(),
            Some(ToolChoice::Function("apply_patch".into()))
        );
        let f = ToolChoice::Function("f".into());
        assert_eq!(encode_tool_choice(&f, OpenAiShape::Nested), choice);
        assert_eq!(encode_tool_choice(&f, OpenAiShape::Flat), flat);
        assert!(decode_tool_choice(&json!("sometimes"), OpenAiShape::Nested, &mut vec![]).is_err());
    }

    #[test]
    fn output_formats_in_both_shapes() {
        let nested = json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}});
        let flat = json!({"type": "json_schema", "name": "n", "schema": {"type": "object"}});
        let fmt = decode_output_format(&nested, "response_format", OpenAiShape::Nested).unwrap();
        assert_eq!(
            fmt,
            decode_output_format(&flat, "text.format", OpenAiShape::Flat).unwrap()
        );
        assert_eq!(
            encode_output_format(&fmt, OpenAiShape::Nested),
            Some(nested)
        );
        assert_eq!(encode_output_format(&fmt, OpenAiShape::Flat), Some(flat));
        assert_eq!(
            encode_output_format(&OutputFormat::Text, OpenAiShape::Flat),
            None
        );
        let e = decode_output_format(&json!({"type": "xml"}), "text.format", OpenAiShape::Flat)
            .unwrap_err();
        assert_eq!(e.param(), Some("text.format.type"));
        let e = decode_output_format(
            &json!({"type": "json_schema"}),
            "response_format",
            OpenAiShape::Nested,
        )
        .unwrap_err();
        assert_eq!(e.param(), Some("response_format.json_schema"));
    }

    #[test]
    fn image_urls_round_trip() {
        for url in ["https://x/y.png", "data:image/png;base64,AAAA"] {
            assert_eq!(image_url_string(&parse_image_url(url)), url);
        }
    }

    /// `allowed_tools` offers only the tools it names (in either shape), to be called when `required`.
    #[test]
    fn allowed_tools_narrow_the_tools_offered() {
        let tool = |n: &str| Tool {
            custom: false,
            name: n.into(),
            description: None,
            parameters: json!({"type": "object"}),
            strict: None,
        };
        let all = || vec![tool("a"), tool("b"), tool("c")];
        let mut tools = all();
        let flat = json!({"type": "allowed_tools", "mode": "required",
                          "tools": [{"type": "function", "name": "a"}, {"type": "web_search"}, {"type": "custom", "name": "c"}]});
        assert_eq!(
            decode_tool_choice(&flat, OpenAiShape::Flat, &mut tools).unwrap(),
            Some(ToolChoice::Required)
        );
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
        let mut tools = all();
        let nested = json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto",
                            "tools": [{"type": "function", "function": {"name": "b"}}]}});
        assert_eq!(
            decode_tool_choice(&nested, OpenAiShape::Nested, &mut tools).unwrap(),
            Some(ToolChoice::Auto)
        );
        assert_eq!(tools, vec![tool("b")]);
        let bad = json!({"type": "allowed_tools", "mode": "sometimes", "tools": []});
        let e = decode_tool_choice(&bad, OpenAiShape::Flat, &mut all()).unwrap_err();
        assert_eq!(e.param(), Some("tool_choice.mode"));
    }

    /// OpenAI refuses JSON mode unless the messages mention JSON: the instruction is added where nothing
    /// the request says does.
    #[test]
    fn json_mode_is_named_where_the_request_does_not_name_it() {
        let mut req = Request {
            system: vec!["Be brief.".into()],
            messages: vec![crate::protocol::canon::Message::text(
                crate::protocol::canon::Role::User,
                "List three colours.",
            )],
            output_format: Some(OutputFormat::JsonObject),
            ..Request::default()
        };
        assert_eq!(
            system_text(&req),
            "Be brief.\n\nRespond with a single valid JSON object and nothing else."
        );
        req.messages[0] = crate::protocol::canon::Message::text(
            crate::protocol::canon::Role::User,
            "List three colours as JSON.",
        );
        assert_eq!(system_text(&req), "Be brief.");
        req.output_format = None;
        req.system.clear();
        assert_eq!(system_text(&req), "");
    }

    #[test]
    fn long_call_ids_are_shortened_alike() {
        assert_eq!(chat_call_id("call_abc"), "call_abc");
        let long = "run_shell_command__call_0123456789abcdefghijklmn";
        let short = chat_call_id(long);
        assert_eq!(short.len(), 40);
        assert!(short.starts_with("call_"));
        assert_eq!(short, chat_call_id(long), "the same wherever it appears");
        assert_ne!(
            short,
            chat_call_id("read_file__call_0123456789abcdefghijklmnopq")
        );
    }
}
