//! What the two OpenAI protocols (Chat Completions and Responses) share: function tools, `tool_choice`,
//! structured-output schemas, image URLs and reasoning effort, decoded and encoded once. The one difference
//! in shape, Chat nesting a function under `function` where Responses keeps it flat, is the [`Shape`]
//! parameter.

use serde_json::{json, Map, Value};

use super::canon::{ImageSource, Request, Tool, ToolChoice};
use super::fields::{self, opt_bool, opt_str};
use super::ApiError;

/// How a function appears in a tool list or a `tool_choice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Chat Completions: `{"type": "function", "function": {"name": ...}}`.
    Nested,
    /// Responses: `{"type": "function", "name": ...}`.
    Flat,
}

/// A function tool's definition (the object holding `name`, `description`, `parameters`, `strict`).
pub fn decode_function(f: &Map<String, Value>, path: &str) -> Result<Tool, ApiError> {
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

/// `tool_choice`: `"auto"`, `"none"`, `"required"`, or a function in `shape`. A Responses choice of another
/// type (a hosted tool) means `auto`.
pub fn decode_tool_choice(v: &Value, shape: Shape) -> Result<Option<ToolChoice>, ApiError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => match s.as_str() {
            "auto" => Ok(Some(ToolChoice::Auto)),
            "none" => Ok(Some(ToolChoice::None)),
            "required" => Ok(Some(ToolChoice::Required)),
            _ => Err(fields::bad_value(
                "tool_choice",
                "\"auto\", \"none\", \"required\" or a function",
            )),
        },
        Value::Object(o) => match shape {
            Shape::Nested => {
                let f = fields::object(
                    o.get("function").unwrap_or(&Value::Null),
                    "tool_choice.function",
                )?;
                let name = fields::req_str(f, "name", "tool_choice.function")?;
                Ok(Some(ToolChoice::Function(name.to_string())))
            }
            Shape::Flat => match opt_str(o, "type", "tool_choice")? {
                Some("function") => {
                    let name = fields::req_str(o, "name", "tool_choice")?;
                    Ok(Some(ToolChoice::Function(name.to_string())))
                }
                _ => Ok(Some(ToolChoice::Auto)),
            },
        },
        other => Err(fields::wrong_type(
            "tool_choice",
            "a string or an object",
            other,
        )),
    }
}

/// A function tool in `shape`. Chat leaves out what is unset; Responses always says `description` and
/// `strict`.
pub fn encode_function(t: &Tool, shape: Shape) -> Value {
    match shape {
        Shape::Nested => {
            let mut f = json!({"name": t.name, "parameters": t.parameters});
            if let Some(d) = &t.description {
                f["description"] = json!(d);
            }
            if let Some(s) = t.strict {
                f["strict"] = json!(s);
            }
            json!({"type": "function", "function": f})
        }
        Shape::Flat => json!({"type": "function", "name": t.name, "description": t.description,
                              "parameters": t.parameters, "strict": t.strict.unwrap_or(false)}),
    }
}

/// A `tool_choice` in `shape`.
pub fn encode_tool_choice(choice: &ToolChoice, shape: Shape) -> Value {
    match (choice, shape) {
        (ToolChoice::Auto, _) => json!("auto"),
        (ToolChoice::None, _) => json!("none"),
        (ToolChoice::Required, _) => json!("required"),
        (ToolChoice::Function(n), Shape::Nested) => {
            json!({"type": "function", "function": {"name": n}})
        }
        (ToolChoice::Function(n), Shape::Flat) => json!({"type": "function", "name": n}),
    }
}

/// Puts a request's tools, `parallel_tool_calls` and `tool_choice` into an upstream body of `shape`.
pub fn encode_tools(req: &Request, shape: Shape, body: &mut Map<String, Value>) {
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

/// A JSON schema format's fields (`name`, `schema`, and `strict` / `description` when set): Chat puts them
/// under `response_format.json_schema`, Responses next to `type` in `text.format`.
pub fn schema_fields(
    name: &str,
    schema: &Value,
    strict: Option<bool>,
    description: Option<&str>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    m.insert("schema".into(), schema.clone());
    if let Some(s) = strict {
        m.insert("strict".into(), json!(s));
    }
    if let Some(d) = description {
        m.insert("description".into(), json!(d));
    }
    m
}

/// Splits a `data:` URI into media type and base64 data; anything else is a URL.
pub fn parse_image_url(url: &str) -> ImageSource {
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
pub fn image_url_string(src: &ImageSource) -> String {
    match src {
        ImageSource::Url(u) => u.clone(),
        ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
    }
}

/// An OpenAI reasoning effort for a client's effort word (Anthropic's `max` has no OpenAI equivalent).
pub fn effort(effort: &str) -> &str {
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
            decode_tool_choice(&choice, Shape::Nested).unwrap(),
            Some(ToolChoice::Function("f".into()))
        );
        let flat = json!({"type": "function", "name": "f"});
        assert_eq!(
            decode_tool_choice(&flat, Shape::Flat).unwrap(),
            Some(ToolChoice::Function("f".into()))
        );
        assert_eq!(
            decode_tool_choice(&json!({"type": "web_search"}), Shape::Flat).unwrap(),
            Some(ToolChoice::Auto)
        );
        let f = ToolChoice::Function("f".into());
        assert_eq!(encode_tool_choice(&f, Shape::Nested), choice);
        assert_eq!(encode_tool_choice(&f, Shape::Flat), flat);
        assert!(decode_tool_choice(&json!("sometimes"), Shape::Nested).is_err());
    }

    #[test]
    fn image_urls_round_trip() {
        for url in ["https://x/y.png", "data:image/png;base64,AAAA"] {
            assert_eq!(image_url_string(&parse_image_url(url)), url);
        }
    }
}
