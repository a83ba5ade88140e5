//! A client's body on its way to an upstream of the same protocol: serialized with the attempt's edits
//! applied on the fly (a field renamed, written, filled or removed), so the client's body is never changed
//! and no attempt copies it. The output is the bytes the edited body would serialize to (keys in their sorted
//! order), without building it. Which edits a request gets is `request.rs`'s (and its codec's) to say.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// A value written into a body.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Put<'a> {
    Str(&'a str),
    /// A string written as its two parts joined (`models/` and a model's name).
    Joined(&'static str, &'a str),
    Num(u64),
    Bool(bool),
}

/// What happens to one field of the body's top level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Edit<'a> {
    /// Left out.
    Remove,
    /// Written, whatever was there.
    Set(Put<'a>),
    /// Written where the field is absent or null.
    Fill(Put<'a>),
    /// Written only where the field is present (null included).
    Replace(Put<'a>),
    /// An object with `key` set in it (a new object where the field is absent or no object).
    SetIn(&'static str, Put<'a>),
    /// Where the field is an object, `key` set in it; anything else left as it is.
    ReplaceIn(&'static str, Put<'a>),
    /// An array whose objects at these positions get `key` filled in (see [`Edit::Fill`]).
    FillIn(&'a [usize], &'static str, Put<'a>),
    /// An array with this string among its items: appended where the array lacks it, a new array of it
    /// where the field is absent or null; anything else left as it is.
    Join(&'static str),
}

/// Room for what the edits add to a body (a model's name, a limit, `stream_options`).
const SLACK: usize = 256;

/// The most edits one body takes (each protocol's few fields).
const MAX: usize = 16;

/// The edits of one body, by field (one each; the last one given wins). Kept on the stack.
#[derive(Debug, Clone)]
pub struct Edits<'a> {
    list: [(&'a str, Edit<'a>); MAX],
    len: usize,
}

impl Default for Edits<'_> {
    fn default() -> Self {
        Edits {
            list: [("", Edit::Remove); MAX],
            len: 0,
        }
    }
}

impl<'a> Edits<'a> {
    /// Sets the edit of `key` (replacing one given before).
    pub fn put(&mut self, key: &'a str, edit: Edit<'a>) {
        match self.list[..self.len].binary_search_by(|(k, _)| (*k).cmp(key)) {
            Ok(i) => self.list[i].1 = edit,
            Err(i) if self.len < MAX => {
                self.list.copy_within(i..self.len, i + 1);
                self.list[i] = (key, edit);
                self.len += 1;
            }
            Err(_) => debug_assert!(false, "more than {MAX} edits"),
        }
    }

    /// The edits, sorted by field.
    pub fn as_slice(&self) -> &[(&'a str, Edit<'a>)] {
        &self.list[..self.len]
    }

    /// `body` serialized with the edits applied.
    pub fn apply(&self, body: &Value) -> Result<Vec<u8>, serde_json::Error> {
        self.apply_sized(body, 0)
    }

    /// [`apply`](Self::apply) into a buffer made `size` bytes large at once (the size of the body as the
    /// client sent it: the edits change it by a few bytes), so it is written without regrowing.
    pub fn apply_sized(&self, body: &Value, size: usize) -> Result<Vec<u8>, serde_json::Error> {
        let mut out = Vec::with_capacity(size.saturating_add(SLACK).max(128));
        serde_json::to_writer(
            &mut out,
            &Edited {
                value: body,
                edits: self.as_slice(),
            },
        )?;
        Ok(out)
    }
}

impl Serialize for Put<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Put::Str(v) => s.serialize_str(v),
            Put::Joined(a, b) => s.collect_str(&format_args!("{a}{b}")),
            Put::Num(v) => s.serialize_u64(v),
            Put::Bool(v) => s.serialize_bool(v),
        }
    }
}

/// A value serialized with edits of its top level (an object; anything else as it is).
struct Edited<'e, 'a> {
    value: &'e Value,
    edits: &'e [(&'a str, Edit<'a>)],
}

impl Serialize for Edited<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(fields) = self.value else {
            return self.value.serialize(s);
        };
        let mut map = s.serialize_map(None)?;
        let mut edits = self.edits.iter().peekable();
        // Both are sorted by key: merged in one pass, so the output keeps the sorted order of a map.
        for (key, value) in fields {
            while let Some((k, e)) = edits.next_if(|(k, _)| *k < key.as_str()) {
                absent(&mut map, k, e)?;
            }
            match edits.next_if(|(k, _)| *k == key.as_str()) {
                Some((_, e)) => present(&mut map, key, value, e)?,
                None => map.serialize_entry(key, value)?,
            }
        }
        for (k, e) in edits {
            absent(&mut map, k, e)?;
        }
        map.end()
    }
}

/// Writes the field `key` whose value `value` gets `edit`.
fn present<M: SerializeMap>(
    map: &mut M,
    key: &str,
    value: &Value,
    edit: &Edit,
) -> Result<(), M::Error> {
    match *edit {
        Edit::Remove => Ok(()),
        Edit::Set(p) | Edit::Replace(p) => map.serialize_entry(key, &p),
        Edit::Fill(p) if value.is_null() => map.serialize_entry(key, &p),
        Edit::Fill(_) => map.serialize_entry(key, value),
        Edit::SetIn(inner, p) | Edit::ReplaceIn(inner, p) if value.is_object() => {
            let edits = [(inner, Edit::Set(p))];
            map.serialize_entry(
                key,
                &Edited {
                    value,
                    edits: &edits,
                },
            )
        }
        Edit::SetIn(inner, p) => map.serialize_entry(key, &One(inner, p)),
        Edit::ReplaceIn(..) => map.serialize_entry(key, value),
        Edit::FillIn(at, inner, p) => match value {
            Value::Array(items) => map.serialize_entry(
                key,
                &Items {
                    items,
                    at,
                    key: inner,
                    put: p,
                },
            ),
            _ => map.serialize_entry(key, value),
        },
        Edit::Join(item) if value.is_null() => map.serialize_entry(key, &[item]),
        Edit::Join(item) => match value {
            Value::Array(items) if !items.iter().any(|v| v == item) => {
                map.serialize_entry(key, &Joined { items, item })
            }
            _ => map.serialize_entry(key, value),
        },
    }
}

/// Writes the field `key`, absent from the body, where `edit` makes one.
fn absent<M: SerializeMap>(map: &mut M, key: &str, edit: &Edit) -> Result<(), M::Error> {
    match *edit {
        Edit::Set(p) | Edit::Fill(p) => map.serialize_entry(key, &p),
        Edit::SetIn(inner, p) => map.serialize_entry(key, &One(inner, p)),
        Edit::Join(item) => map.serialize_entry(key, &[item]),
        Edit::Remove | Edit::Replace(_) | Edit::ReplaceIn(..) | Edit::FillIn(..) => Ok(()),
    }
}

/// An object of one field.
struct One<'a>(&'static str, Put<'a>);

impl Serialize for One<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(self.0, &self.1)?;
        map.end()
    }
}

/// An array with one string appended.
struct Joined<'e> {
    items: &'e [Value],
    item: &'static str,
}

impl Serialize for Joined<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.items.len() + 1))?;
        for v in self.items {
            seq.serialize_element(v)?;
        }
        seq.serialize_element(self.item)?;
        seq.end()
    }
}

/// An array whose objects at `at` get `key` filled in.
struct Items<'e, 'a> {
    items: &'e [Value],
    at: &'a [usize],
    key: &'static str,
    put: Put<'a>,
}

impl Serialize for Items<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.items.len()))?;
        let fill = [(self.key, Edit::Fill(self.put))];
        for (i, item) in self.items.iter().enumerate() {
            if self.at.contains(&i) {
                seq.serialize_element(&Edited {
                    value: item,
                    edits: &fill,
                })?;
            } else {
                seq.serialize_element(item)?;
            }
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The edited bytes are exactly what the body, changed in place, would serialize to.
    fn same(body: Value, edits: &Edits, changed: Value) {
        let bytes = edits.apply(&body).unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            serde_json::to_string(&changed).unwrap()
        );
    }

    #[test]
    fn edits_are_applied_in_the_sorted_order_of_a_map() {
        let mut e = Edits::default();
        e.put("model", Edit::Set(Put::Str("private")));
        e.put("max_tokens", Edit::Remove);
        e.put("max_completion_tokens", Edit::Set(Put::Num(50)));
        e.put("store", Edit::Replace(Put::Bool(false)));
        e.put("zeta", Edit::Fill(Put::Num(3)));
        e.put("a", Edit::Fill(Put::Num(1)));
        same(
            json!({"model": "public", "max_tokens": 100, "messages": [{"role": "user"}], "zeta": null}),
            &e,
            json!({"a": 1, "model": "private", "max_completion_tokens": 50, "messages": [{"role": "user"}],
                   "zeta": 3}),
        );
        // The last edit of a field wins.
        e.put("model", Edit::Remove);
        same(
            json!({"model": "m", "store": true}),
            &e,
            json!({"a": 1, "max_completion_tokens": 50, "store": false, "zeta": 3}),
        );
    }

    #[test]
    fn a_string_joins_an_array_once() {
        let mut e = Edits::default();
        e.put("include", Edit::Join("reasoning.encrypted_content"));
        let joined = json!({"include": ["reasoning.encrypted_content"]});
        same(json!({}), &e, joined.clone());
        same(json!({"include": null}), &e, joined.clone());
        same(json!({"include": []}), &e, joined.clone());
        same(joined.clone(), &e, joined);
        same(
            json!({"include": ["message.output_text.logprobs"]}),
            &e,
            json!({"include": ["message.output_text.logprobs", "reasoning.encrypted_content"]}),
        );
        // Not an array: the upstream says what is wrong with it.
        same(json!({"include": "x"}), &e, json!({"include": "x"}));
    }

    #[test]
    fn nested_edits() {
        let mut e = Edits::default();
        e.put(
            "stream_options",
            Edit::SetIn("include_usage", Put::Bool(true)),
        );
        same(
            json!({"stream_options": {"x": 1}}),
            &e,
            json!({"stream_options": {"include_usage": true, "x": 1}}),
        );
        same(
            json!({"stream_options": 5}),
            &e,
            json!({"stream_options": {"include_usage": true}}),
        );
        same(
            json!({}),
            &e,
            json!({"stream_options": {"include_usage": true}}),
        );
        let at = [0, 2];
        let mut e = Edits::default();
        e.put("tools", Edit::FillIn(&at, "max_uses", Put::Num(4)));
        same(
            json!({"tools": [{"type": "a"}, {"type": "b"}, {"type": "c", "max_uses": 1}]}),
            &e,
            json!({"tools": [{"type": "a", "max_uses": 4}, {"type": "b"}, {"type": "c", "max_uses": 1}]}),
        );
        // Only where the object is: nothing made, nothing else touched.
        let mut e = Edits::default();
        e.put(
            "generateContentRequest",
            Edit::ReplaceIn("model", Put::Joined("models/", "real")),
        );
        same(
            json!({"generateContentRequest": {"model": "models/alias", "contents": []}}),
            &e,
            json!({"generateContentRequest": {"model": "models/real", "contents": []}}),
        );
        same(json!({"contents": []}), &e, json!({"contents": []}));
        same(
            json!({"generateContentRequest": null}),
            &e,
            json!({"generateContentRequest": null}),
        );
    }
}
