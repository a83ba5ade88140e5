//! Gemini API requests from clients (`generateContent`, `streamGenerateContent`, `countTokens`): validated
//! and decoded into the canonical request. The model and the stream are in the path, not the body.

use serde_json::{json, Map, Value};

use super::schema::to_json_schema;
use crate::protocol::canon::{
    ImageSource, Message, OutputFormat, Part, Request, Role, Tool, ToolChoice,
};
use crate::protocol::fields::{self, bad_value, join, opt_array, opt_bool, opt_f64, opt_str};
use crate::protocol::codec::RequestCodec;
use crate::protocol::ApiError;

use super::Gemini;

type Obj = Map<String, Value>;

/// The hosted tools of a Gemini `Tool` object (every key but `functionDeclarations`), as a translated
/// request reports them left out (and the paid-features rules name them): `googleSearch` → `google_search`.
pub(super) fn hosted_family(key: &str) -> Option<&'static str> {
    Some(match key {
        "googleSearch" | "googleSearchRetrieval" => "google_search",
        "codeExecution" => "code_execution",
        "urlContext" => "url_context",
        "googleMaps" => "google_maps",
        "computerUse" => "computer_use",
        "fileSearch" => "file_search",
        "enterpriseWebSearch" => "enterprise_web_search",
        _ => return None,
    })
}

impl RequestCodec for Gemini {
    /// Checks what every Gemini request must have before anything else: `contents` (an array, not empty) and, in
    /// `generationConfig`, at most one candidate (each would be another answer up to the output limit).
    fn validate(&self, body: &Value) -> Result<(), ApiError> {
        let o = fields::object(body, "body")?;
        match opt_array(o, "contents", "")? {
            Some(c) if !c.is_empty() => {}
            _ => {
                return Err(ApiError::invalid_param(
                    "contents",
                    "* GenerateContentRequest.contents: contents is not specified",
                ))
            }
        }
        if let Some(g) = o.get("generationConfig").filter(|g| !g.is_null()) {
            let g = fields::object(g, "generationConfig")?;
            let count = fields::opt_u64(g, "candidateCount", "generationConfig")?;
            if count.is_some_and(|n| n > 1) {
                return Err(ApiError::invalid_param(
                    "generationConfig.candidateCount",
                    "generationConfig.candidateCount: this gateway gives one candidate per request (send the \
                     request again for another).",
                ));
            }
        }
        Ok(())
    }

    /// Validates a generation request and decodes it into the canonical request.
    fn decode_request(&self, body: &Value) -> Result<Request, ApiError> {
        Gemini.validate(body)?;
        decode_body(body)
    }


    /// Log probabilities, and audio or images out (`generationConfig`, in its JSON names: `read_as_one`
    /// rewrote the proto ones).
    fn asks_beyond_canon(&self, body: &Value) -> bool {
        let Some(g) = body.get("generationConfig") else {
            return false;
        };
        let media = g
            .get("responseModalities")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|v| v != "TEXT"));
        g.get("responseLogprobs") == Some(&Value::Bool(true))
            || g.get("logprobs").is_some_and(|v| !v.is_null())
            || g.get("speechConfig").is_some_and(|v| !v.is_null())
            || media
    }
}

/// A `countTokens` body: `contents` (what the SDKs send), or a whole `generateContentRequest`.
pub(super) fn decode_count_request(body: &Value) -> Result<Request, ApiError> {
    let o = fields::object(body, "body")?;
    match o.get("generateContentRequest").filter(|v| !v.is_null()) {
        Some(inner) => decode_body(inner),
        None if o.get("contents").is_some() => decode_body(body),
        None => Err(ApiError::invalid_param(
            "contents",
            "countTokens takes `contents` or a `generateContentRequest`.",
        )),
    }
}

fn decode_body(body: &Value) -> Result<Request, ApiError> {
    let o = fields::object(body, "body")?;
    if o.get("cachedContent").is_some_and(|c| !c.is_null()) {
        return Err(ApiError::invalid_param(
            "cachedContent",
            "`cachedContent` names state kept in a Gemini account; it cannot be sent to this model's upstream.",
        ));
    }
    let mut req = Request::default();
    decode_system(o, &mut req)?;
    let mut calls = Calls::default();
    for (i, c) in opt_array(o, "contents", "")?.into_iter().flatten().enumerate() {
        let path = format!("contents[{i}]");
        req.messages.push(decode_content(c, &path, &mut calls)?);
    }
    decode_tools(o, &mut req)?;
    if let Some(g) = o.get("generationConfig").filter(|g| !g.is_null()) {
        decode_generation(fields::object(g, "generationConfig")?, &mut req)?;
    }
    Ok(req)
}

/// `systemInstruction`: a `Content` whose text parts are the system prompt (a plain string is taken too).
fn decode_system(o: &Obj, req: &mut Request) -> Result<(), ApiError> {
    match o.get("systemInstruction") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => req.system.push(s.clone()),
        Some(v) => {
            // Each part its own instruction (the SDKs make one of each string in a list).
            let so = fields::object(v, "systemInstruction")?;
            for (i, p) in opt_array(so, "parts", "systemInstruction")?.into_iter().flatten().enumerate() {
                let path = format!("systemInstruction.parts[{i}]");
                if let Some(t) = opt_str(fields::object(p, &path)?, "text", &path)? {
                    req.system.push(t.to_string());
                }
            }
        }
    }
    Ok(())
}

/// The function calls of the conversation so far, so a response without an `id` pairs with the earliest
/// unanswered call of its name (as Gemini pairs them), and calls without one get an id of their own.
#[derive(Default)]
struct Calls {
    /// (id, name, answered)
    made: Vec<(String, String, bool)>,
}

impl Calls {
    fn call(&mut self, id: Option<&str>, name: &str) -> String {
        let id = id
            .filter(|i| !i.is_empty())
            .map_or_else(|| format!("call_{}_{}", self.made.len(), name), str::to_string);
        self.made.push((id.clone(), name.to_string(), false));
        id
    }

    fn answer(&mut self, id: Option<&str>, name: &str) -> String {
        let found = match id.filter(|i| !i.is_empty()) {
            Some(id) => self.made.iter_mut().find(|(i, _, _)| i == id),
            None => self.made.iter_mut().find(|(_, n, done)| n == name && !done),
        };
        match found {
            Some(call) => {
                call.2 = true;
                call.0.clone()
            }
            None => id.map_or_else(|| format!("call_{name}"), str::to_string),
        }
    }
}

/// One `Content`: role `user` (or none) or `model`; a turn of function responses is the tool's.
fn decode_content(c: &Value, path: &str, calls: &mut Calls) -> Result<Message, ApiError> {
    let co = fields::object(c, path)?;
    let mut role = match opt_str(co, "role", path)?.unwrap_or("user") {
        "user" | "" => Role::User,
        "model" => Role::Assistant,
        "function" | "tool" => Role::Tool,
        other => {
            return Err(ApiError::invalid_param(
                &join(path, "role"),
                format!("Invalid value for `{path}.role`: {other:?}. Expected user or model."),
            ))
        }
    };
    let mut content = Vec::new();
    for (i, p) in opt_array(co, "parts", path)?.into_iter().flatten().enumerate() {
        let ppath = format!("{path}.parts[{i}]");
        if let Some(part) = decode_part(fields::object(p, &ppath)?, &ppath, role, calls)? {
            content.push(part);
        }
    }
    if role == Role::User && content.iter().all(|p| matches!(p, Part::ToolResult { .. })) && !content.is_empty() {
        role = Role::Tool;
    }
    Ok(Message { role, content })
}

fn decode_part(po: &Obj, path: &str, role: Role, calls: &mut Calls) -> Result<Option<Part>, ApiError> {
    if let Some(t) = opt_str(po, "text", path)? {
        if opt_bool(po, "thought", path)? == Some(true) {
            let signature = opt_str(po, "thoughtSignature", path)?.map(str::to_string);
            return Ok(Some(Part::Reasoning {
                text: t.to_string(),
                signature,
            }));
        }
        return Ok(Some(Part::Text(t.to_string())));
    }
    if let Some(d) = po.get("inlineData").filter(|v| !v.is_null()) {
        let dpath = join(path, "inlineData");
        let d = fields::object(d, &dpath)?;
        let mime = fields::req_str(d, "mimeType", &dpath)?;
        media_only_images(mime, &dpath)?;
        return Ok(Some(Part::Image(ImageSource::Base64 {
            media_type: mime.to_string(),
            data: fields::req_str(d, "data", &dpath)?.to_string(),
        })));
    }
    if let Some(d) = po.get("fileData").filter(|v| !v.is_null()) {
        let dpath = join(path, "fileData");
        let d = fields::object(d, &dpath)?;
        media_only_images(opt_str(d, "mimeType", &dpath)?.unwrap_or("image/*"), &dpath)?;
        let uri = fields::req_str(d, "fileUri", &dpath)?;
        return Ok(Some(Part::Image(ImageSource::Url(uri.to_string()))));
    }
    if let Some(f) = po.get("functionCall").filter(|v| !v.is_null()) {
        let fpath = join(path, "functionCall");
        let f = fields::object(f, &fpath)?;
        let name = fields::req_str(f, "name", &fpath)?;
        let id = calls.call(opt_str(f, "id", &fpath)?, name);
        let args = f.get("args").filter(|a| !a.is_null()).cloned().unwrap_or_else(|| json!({}));
        return Ok(Some(Part::ToolCall {
            id,
            name: name.to_string(),
            arguments: args.to_string(),
        }));
    }
    if let Some(f) = po.get("functionResponse").filter(|v| !v.is_null()) {
        let fpath = join(path, "functionResponse");
        let f = fields::object(f, &fpath)?;
        let name = fields::req_str(f, "name", &fpath)?;
        let call_id = calls.answer(opt_str(f, "id", &fpath)?, name);
        let response = f.get("response").cloned().unwrap_or(Value::Null);
        let (text, is_error) = response_text(&response);
        let mut content = vec![Part::Text(text)];
        // Media the function returned (gemini-cli's images, for Gemini 3 models) go with its result.
        for (i, p) in opt_array(f, "parts", &fpath)?.into_iter().flatten().enumerate() {
            let ppath = format!("{fpath}.parts[{i}]");
            let po = fields::object(p, &ppath)?;
            if let Some(image @ Part::Image(_)) = decode_part(po, &ppath, Role::User, calls)? {
                content.push(image);
            }
        }
        return Ok(Some(Part::ToolResult {
            call_id,
            content,
            is_error,
        }));
    }
    // Code the model ran with the hosted code execution tool, and its result: what a translated upstream
    // reads of them is their text, in the model's own turn.
    if role == Role::Assistant {
        if let Some(code) = po.get("executableCode").and_then(|c| c.get("code")).and_then(Value::as_str) {
            return Ok(Some(Part::Text(format!("```\n{code}\n```"))));
        }
        if let Some(out) = po.get("codeExecutionResult").and_then(|c| c.get("output")).and_then(Value::as_str) {
            return Ok(Some(Part::Text(out.to_string())));
        }
    }
    // A signature alone, video metadata and the like: nothing another upstream reads.
    Ok(None)
}

/// Media other than images cannot go to an upstream of another protocol (no canonical part holds them).
fn media_only_images(mime: &str, path: &str) -> Result<(), ApiError> {
    if mime.starts_with("image/") {
        return Ok(());
    }
    Err(ApiError::invalid_param(
        path,
        format!(
            "`{path}` holds `{mime}` data; only images go to this model's upstream (it speaks another protocol)."
        ),
    ))
}

/// The text of a function's `response` object, and whether it is an error: `{"error": …}` alone is one; a
/// single `output` (or `result`, `content`) that is a string is the text itself; anything else its JSON.
fn response_text(response: &Value) -> (String, bool) {
    let Some(o) = response.as_object() else {
        return (response.to_string(), false);
    };
    let is_error = o.contains_key("error") && !o.contains_key("output");
    if o.len() == 1 {
        for key in ["output", "result", "content", "error"] {
            if let Some(Value::String(s)) = o.get(key) {
                return (s.clone(), is_error);
            }
        }
    }
    (response.to_string(), is_error)
}

/// `tools` (function declarations; hosted tools left out and reported) and `toolConfig`.
fn decode_tools(o: &Obj, req: &mut Request) -> Result<(), ApiError> {
    for (i, t) in opt_array(o, "tools", "")?.into_iter().flatten().enumerate() {
        let path = format!("tools[{i}]");
        let to = fields::object(t, &path)?;
        for (key, v) in to {
            if key == "functionDeclarations" {
                let dpath = join(&path, key);
                for (j, d) in v.as_array().into_iter().flatten().enumerate() {
                    req.tools.push(declaration(d, &format!("{dpath}[{j}]"))?);
                }
            } else if !v.is_null() {
                let family = hosted_family(key).map_or_else(|| key.clone(), str::to_string);
                req.dropped_tools.push(family);
            }
        }
    }
    let config = o
        .get("toolConfig")
        .and_then(|c| c.get("functionCallingConfig"))
        .filter(|c| !c.is_null());
    let Some(c) = config else {
        return Ok(());
    };
    let c = fields::object(c, "toolConfig.functionCallingConfig")?;
    let path = "toolConfig.functionCallingConfig";
    let allowed: Vec<&str> = opt_array(c, "allowedFunctionNames", path)?
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !allowed.is_empty() {
        // Only the allowed functions may be called: the others are not offered.
        req.tools.retain(|t| allowed.contains(&t.name.as_str()));
    }
    req.tool_choice = match opt_str(c, "mode", path)?.unwrap_or("AUTO") {
        "AUTO" | "MODE_UNSPECIFIED" | "VALIDATED" => Some(ToolChoice::Auto),
        "NONE" => Some(ToolChoice::None),
        "ANY" if allowed.len() == 1 => Some(ToolChoice::Function(allowed[0].to_string())),
        "ANY" => Some(ToolChoice::Required),
        _ => return Err(bad_value(&join(path, "mode"), "AUTO, ANY, NONE or VALIDATED")),
    };
    Ok(())
}

/// One function declaration: its JSON Schema as given (`parametersJsonSchema`), or its Gemini `parameters`
/// schema converted.
fn declaration(d: &Value, path: &str) -> Result<Tool, ApiError> {
    let d = fields::object(d, path)?;
    let parameters = match (d.get("parametersJsonSchema"), d.get("parameters")) {
        (Some(s), _) if !s.is_null() => s.clone(),
        (_, Some(s)) if !s.is_null() => to_json_schema(s),
        _ => json!({"type": "object", "properties": {}}),
    };
    Ok(Tool {
        custom: false,
        name: fields::req_str(d, "name", path)?.to_string(),
        description: opt_str(d, "description", path)?.map(str::to_string),
        parameters,
        strict: None,
    })
}

/// `generationConfig`: sampling, stop sequences, structured output, thinking. (`maxOutputTokens` is read by
/// the gateway as the request's one output limit; `candidateCount` above 1 was refused.)
fn decode_generation(g: &Obj, req: &mut Request) -> Result<(), ApiError> {
    let path = "generationConfig";
    req.temperature = opt_f64(g, "temperature", path)?;
    req.top_p = opt_f64(g, "topP", path)?;
    req.top_k = opt_f64(g, "topK", path)?.map(|k| k.max(0.0).round() as u64);
    req.max_tokens = fields::opt_u64(g, "maxOutputTokens", path)?;
    if let Some(stops) = opt_array(g, "stopSequences", path)? {
        req.stop = stops.iter().filter_map(|s| s.as_str().map(str::to_string)).collect();
    }
    let schema = match (g.get("responseJsonSchema").or_else(|| g.get("_responseJsonSchema")), g.get("responseSchema")) {
        (Some(s), _) if !s.is_null() => Some(s.clone()),
        (_, Some(s)) if !s.is_null() => Some(to_json_schema(s)),
        _ => None,
    };
    let mime = opt_str(g, "responseMimeType", path)?;
    let json_mime = mime == Some("application/json");
    // Enum mode answers one of the values as plain text, which no JSON schema gives: another vendor's model
    // is told the values instead.
    if mime == Some("text/x.enum") {
        let values: Vec<&str> = schema
            .as_ref()
            .and_then(|s| s.get("enum"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !values.is_empty() {
            req.system.push(format!(
                "Answer with exactly one of these values, written as it is here and nothing else: {}.",
                values.join(", ")
            ));
            return decode_thinking_of(g, req);
        }
    }
    req.output_format = match schema {
        // Not strict: a Gemini schema leaves optional properties out of `required` and says nothing of
        // `additionalProperties`, which OpenAI's strict mode refuses.
        Some(schema) => Some(OutputFormat::JsonSchema {
            name: "response".into(),
            schema,
            strict: None,
            description: None,
        }),
        None if json_mime => Some(OutputFormat::JsonObject),
        None => None,
    };
    decode_thinking_of(g, req)
}

/// `generationConfig.thinkingConfig`, if given.
fn decode_thinking_of(g: &Obj, req: &mut Request) -> Result<(), ApiError> {
    if let Some(t) = g.get("thinkingConfig").filter(|t| !t.is_null()) {
        decode_thinking(fields::object(t, "generationConfig.thinkingConfig")?, req)?;
    }
    Ok(())
}

/// `thinkingConfig`: a budget (0 turns thinking off, -1 leaves it to the model) or a level, and whether the
/// thoughts are shown.
fn decode_thinking(t: &Obj, req: &mut Request) -> Result<(), ApiError> {
    let path = "generationConfig.thinkingConfig";
    req.reasoning_shown = opt_bool(t, "includeThoughts", path)?;
    if let Some(level) = opt_str(t, "thinkingLevel", path)? {
        let effort = level.to_ascii_lowercase();
        if effort != "thinking_level_unspecified" {
            req.reasoning_effort = Some(effort);
        }
    }
    match t.get("thinkingBudget") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_i64() {
            Some(0) => req.reasoning_effort = Some("none".into()),
            Some(b) if b > 0 => {
                let b = b as u64;
                req.reasoning_budget = Some(b);
                req.reasoning_effort = Some(effort_for_budget(b).into());
            }
            Some(_) => req.reasoning_effort = req.reasoning_effort.take().or(Some("medium".into())),
            None => return Err(bad_value(&join(path, "thinkingBudget"), "an integer")),
        },
    }
    Ok(())
}

/// The effort level a thinking budget stands for (as Anthropic thinking budgets are read).
fn effort_for_budget(budget: u64) -> &'static str {
    match budget {
        0..=1_023 => "minimal",
        1_024..=3_999 => "low",
        4_000..=15_999 => "medium",
        _ => "high",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_and_candidates_are_checked_first() {
        assert_eq!(Gemini.validate(&json!({})).unwrap_err().param(), Some("contents"));
        assert_eq!(Gemini.validate(&json!({"contents": []})).unwrap_err().param(), Some("contents"));
        let two = json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"candidateCount": 2}});
        let e = Gemini.validate(&two).unwrap_err();
        assert_eq!((e.status(), e.param()), (400, Some("generationConfig.candidateCount")));
        let one = json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"candidateCount": 1}});
        assert!(Gemini.validate(&one).is_ok());
    }

    #[test]
    fn a_conversation_with_tools_decodes() {
        let r = Gemini.decode_request(&json!({
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "contents": [
                {"role": "user", "parts": [{"text": "Weather in Paris?"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}]},
                {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "18C"}}}]},
                {"role": "model", "parts": [{"functionCall": {"id": "c9", "name": "get_weather", "args": {"city": "Rome"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"id": "c9", "name": "get_weather", "response": {"error": "down"}}}]}
            ],
            "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "Weather",
                "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}}]},
                {"googleSearch": {}}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
            "generationConfig": {"temperature": 0.2, "topK": 40, "maxOutputTokens": 100, "stopSequences": ["END"],
                "thinkingConfig": {"thinkingBudget": 2048, "includeThoughts": true}}
        }))
        .unwrap();
        assert_eq!(r.system, vec!["Be brief."]);
        assert_eq!(r.messages.len(), 5);
        assert!(matches!(r.messages[0].content[1], Part::Image(ImageSource::Base64 { .. })));
        let Part::ToolCall { id, arguments, .. } = &r.messages[1].content[0] else { panic!() };
        assert_eq!(arguments, "{\"city\":\"Paris\"}");
        assert_eq!(r.messages[2].role, Role::Tool);
        let Part::ToolResult { call_id, content, is_error } = &r.messages[2].content[0] else { panic!() };
        assert_eq!((call_id, is_error), (id, &false));
        assert_eq!(content, &vec![Part::Text("18C".into())]);
        assert!(matches!(&r.messages[4].content[0], Part::ToolResult { call_id, is_error: true, .. } if call_id == "c9"));
        assert_eq!(r.tools[0].parameters["properties"]["city"]["type"], "string");
        assert_eq!(r.dropped_tools, vec!["google_search"]);
        assert_eq!(r.tool_choice, Some(ToolChoice::Function("get_weather".into())));
        assert_eq!((r.top_k, r.max_tokens, r.reasoning_budget), (Some(40), Some(100), Some(2048)));
        assert_eq!(r.reasoning_effort.as_deref(), Some("low"));
        assert_eq!(r.reasoning_shown, Some(true));
        assert_eq!(r.stop, vec!["END"]);
    }

    #[test]
    fn structured_output_and_refusals() {
        let r = Gemini.decode_request(&json!({"contents": [{"parts": [{"text": "x"}]}],
            "generationConfig": {"responseMimeType": "application/json",
                "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "INTEGER"}}}}}))
        .unwrap();
        let Some(OutputFormat::JsonSchema { schema, strict, .. }) = r.output_format else { panic!() };
        assert_eq!(schema["properties"]["a"]["type"], "integer");
        // Not strict: OpenAI's strict mode would refuse a schema with optional properties.
        assert_eq!(strict, None);
        let two = Gemini.decode_request(&json!({"contents": [{"parts": [{"text": "x"}]}],
            "systemInstruction": {"parts": [{"text": "Be brief."}, {"text": "Answer in French."}]}}))
        .unwrap();
        assert_eq!(two.system, vec!["Be brief.", "Answer in French."]);
        // Enum mode: the values told, no JSON schema (whose answer would be a quoted string).
        let e = Gemini.decode_request(&json!({"contents": [{"parts": [{"text": "x"}]}],
            "generationConfig": {"responseMimeType": "text/x.enum",
                "responseSchema": {"type": "STRING", "enum": ["Percussion", "String"]}}}))
        .unwrap();
        assert_eq!(e.output_format, None);
        assert!(e.system[0].ends_with("nothing else: Percussion, String."), "{:?}", e.system);
        let e = Gemini.decode_request(&json!({"contents": [{"parts": [{"inlineData": {"mimeType": "audio/wav", "data": "AA"}}]}]}))
            .unwrap_err();
        assert_eq!(e.param(), Some("contents[0].parts[0].inlineData"));
        let off = Gemini.decode_request(&json!({"contents": [{"parts": [{"text": "x"}]}],
            "generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}})).unwrap();
        assert_eq!(off.reasoning_effort.as_deref(), Some("none"));
        let c = decode_count_request(&json!({"contents": [{"parts": [{"text": "count me"}]}]})).unwrap();
        assert_eq!(c.messages.len(), 1);
        assert!(decode_count_request(&json!({})).is_err());
    }

    /// Media a function returned in its `functionResponse.parts` (gemini-cli's, for Gemini 3 models) goes
    /// with its result; media no other protocol carries is refused naming where it is.
    #[test]
    fn media_in_a_function_response_goes_with_its_result() {
        let body = |mime: &str| {
            json!({"contents": [
                {"role": "user", "parts": [{"text": "look"}]},
                {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "read_file", "args": {}}}]},
                {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "read_file",
                    "response": {"output": "an image"}, "parts": [{"inlineData": {"mimeType": mime, "data": "AA"}}]}}]}]})
        };
        let r = Gemini.decode_request(&body("image/png")).unwrap();
        let Part::ToolResult { content, .. } = &r.messages[2].content[0] else { panic!("{:?}", r.messages[2]) };
        assert_eq!(content.len(), 2);
        assert!(matches!(content[1], Part::Image(_)));
        let e = Gemini.decode_request(&body("application/pdf")).unwrap_err();
        assert_eq!(e.param(), Some("contents[2].parts[0].functionResponse.parts[0].inlineData"));
    }
}
