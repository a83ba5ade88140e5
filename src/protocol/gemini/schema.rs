//! Gemini's `Schema` (an OpenAPI 3.0 subset: upper-case `type` names, `nullable`, `propertyOrdering`) and
//! JSON Schema, both ways: a client's `parameters` / `responseSchema` become the JSON Schema the canonical
//! request carries; the canonical JSON Schema goes to a Gemini upstream as `parametersJsonSchema` /
//! `responseJsonSchema`, which take it as it is (less `$schema`).

use serde_json::{Map, Value};

/// A Gemini `Schema` as JSON Schema: type names in lower case, `nullable: true` as a `null` type beside the
/// other, `propertyOrdering` left off; everything else as it is, at every depth.
pub(super) fn to_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(o) => {
            let mut out = Map::new();
            let nullable = o.get("nullable").and_then(Value::as_bool) == Some(true);
            for (k, v) in o {
                match k.as_str() {
                    "nullable" | "propertyOrdering" => {}
                    "type" => {
                        let ty = v.as_str().map(str::to_ascii_lowercase);
                        let ty = ty.filter(|t| t != "type_unspecified");
                        match (ty, nullable) {
                            (Some(t), true) => {
                                out.insert(k.clone(), Value::from(vec![t, "null".to_string()]));
                            }
                            (Some(t), false) => {
                                out.insert(k.clone(), Value::String(t));
                            }
                            (None, _) => {}
                        }
                    }
                    "properties" | "$defs" | "definitions" => {
                        let props = v.as_object().map(|p| {
                            p.iter()
                                .map(|(name, s)| (name.clone(), to_json_schema(s)))
                                .collect::<Map<String, Value>>()
                        });
                        out.insert(k.clone(), props.map_or_else(|| v.clone(), Value::Object));
                    }
                    // Schemas beneath: converted too. Enum values, required names, examples: as they are.
                    "items" | "anyOf" | "oneOf" | "allOf" | "not" | "additionalProperties" => {
                        out.insert(k.clone(), to_json_schema(v));
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(to_json_schema).collect()),
        other => other.clone(),
    }
}

/// A JSON Schema as a Gemini upstream takes it in `parametersJsonSchema` / `responseJsonSchema`: as it is,
/// without `$schema` at its top.
pub(super) fn for_upstream(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Some(o) = s.as_object_mut() {
        o.remove("$schema");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gemini_schemas_become_json_schema() {
        let s = json!({"type": "OBJECT", "properties": {
            "city": {"type": "STRING", "description": "City", "nullable": true},
            "days": {"type": "ARRAY", "items": {"type": "INTEGER", "format": "int32"}},
            "unit": {"type": "STRING", "enum": ["C", "F"]}},
            "required": ["city"], "propertyOrdering": ["city", "days"]});
        assert_eq!(
            to_json_schema(&s),
            json!({"type": "object", "properties": {
                "city": {"type": ["string", "null"], "description": "City"},
                "days": {"type": "array", "items": {"type": "integer", "format": "int32"}},
                "unit": {"type": "string", "enum": ["C", "F"]}},
                "required": ["city"]})
        );
        // A JSON Schema given as one stays the same.
        let js = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(to_json_schema(&js), js);
        let up = for_upstream(&json!({"$schema": "x", "type": "object"}));
        assert_eq!(up, json!({"type": "object"}));
    }
}
