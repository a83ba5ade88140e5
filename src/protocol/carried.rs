//! What of a request body the canonical form carries, declared per protocol as data: the answer cache keys
//! a request on its canonical form (so a Chat client and a Messages client asking the same thing share an
//! entry) and on every part of the body that canonical form does not carry, as sent (`fingerprint.rs`).
//!
//! A protocol names its top-level fields with a [`Shape`] each (`Codec::carried`). A field whose value fits
//! its shape is carried by the canonical form whole; one that does not fit (a member the shape does not
//! name at any depth, a value of another type or word, a list longer than the shape allows) goes into the
//! key as it came, and so does every field the protocol does not name. The shapes are deliberately narrow:
//! only what the protocol's decoder turns into canonical values, and turns into values that differ wherever
//! the body differs. A shape too narrow costs only shared entries; one too wide would let two requests that
//! reach the upstream differently share an answer, which the tests in `fingerprint.rs` look for by changing
//! every value of every sample body.

use serde_json::Value;

/// The shape of a JSON value the canonical form carries whole.
#[derive(Debug)]
pub enum Shape {
    /// Frames the answer only (the model name, the stream flag and its options, the end user's id,
    /// metadata): never part of the key.
    Frame,
    /// Any value, carried whole (a JSON Schema, a tool call's input).
    Any,
    Str,
    Num,
    Bool,
    /// A string, one of these words.
    Word(&'static [&'static str]),
    /// An array whose every element fits.
    List(&'static Shape),
    /// An array of at most one element that fits (content parts a decoder joins into one text).
    Single(&'static Shape),
    /// An object with no members but these (each may be absent or null), each fitting its shape.
    Obj(&'static [(&'static str, Shape)]),
    /// Fits one of these.
    Either(&'static [Shape]),
}

impl Shape {
    /// Whether `v` has this shape.
    pub fn fits(&self, v: &Value) -> bool {
        match (self, v) {
            (Shape::Frame | Shape::Any, _) => true,
            (Shape::Str, Value::String(_)) | (Shape::Num, Value::Number(_)) => true,
            (Shape::Bool, Value::Bool(_)) => true,
            (Shape::Word(words), Value::String(s)) => words.contains(&s.as_str()),
            (Shape::List(each), Value::Array(a)) => a.iter().all(|e| each.fits(e)),
            (Shape::Single(each), Value::Array(a)) => {
                a.len() <= 1 && a.iter().all(|e| each.fits(e))
            }
            (Shape::Obj(members), Value::Object(o)) => o.iter().all(|(k, v)| {
                members
                    .iter()
                    .find(|(name, _)| name == k)
                    .is_some_and(|(_, shape)| v.is_null() || shape.fits(v))
            }),
            (Shape::Either(any), v) => any.iter().any(|s| s.fits(v)),
            _ => false,
        }
    }
}

/// The top-level fields of `body` that go into the key as they came, in name order: those `carried` does
/// not name, and those whose value does not fit the shape it gives them. A body that is not an object is
/// keyed whole.
pub(crate) fn uncarried<'a>(
    carried: &[(&str, Shape)],
    body: &'a Value,
) -> Vec<(&'a str, &'a Value)> {
    let Value::Object(o) = body else {
        return vec![("", body)];
    };
    o.iter()
        .filter(|(k, v)| match carried.iter().find(|(name, _)| name == k) {
            Some((_, Shape::Frame)) => false,
            Some((_, shape)) => !shape.fits(v),
            None => true,
        })
        .map(|(k, v)| (k.as_str(), v))
        .collect()
}

/// The members of `carried`'s shapes at any depth, each once (by address): what a test's sample bodies
/// must hold for `seen` to show they exercise every member the shapes let through.
#[cfg(test)]
pub(crate) fn members(
    carried: &'static [(&'static str, Shape)],
) -> Vec<(*const Shape, &'static str)> {
    fn walk(s: &'static Shape, out: &mut Vec<(*const Shape, &'static str)>) {
        match s {
            Shape::List(e) | Shape::Single(e) => walk(e, out),
            Shape::Either(all) => all.iter().for_each(|e| walk(e, out)),
            Shape::Obj(m) => {
                for (name, shape) in m.iter() {
                    out.push((shape as *const Shape, name));
                    walk(shape, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (name, shape) in carried {
        out.push((shape as *const Shape, *name));
        walk(shape, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

/// Adds to `seen` the members of `carried`'s shapes that `body` holds (through the first alternative each
/// value fits).
#[cfg(test)]
pub(crate) fn seen(
    carried: &'static [(&'static str, Shape)],
    body: &Value,
    out: &mut Vec<*const Shape>,
) {
    fn walk(s: &'static Shape, v: &Value, out: &mut Vec<*const Shape>) {
        match (s, v) {
            (Shape::List(e) | Shape::Single(e), Value::Array(a)) => {
                a.iter().for_each(|x| walk(e, x, out))
            }
            (Shape::Either(all), v) => {
                if let Some(e) = all.iter().find(|e| e.fits(v)) {
                    walk(e, v, out);
                }
            }
            (Shape::Obj(m), Value::Object(o)) => {
                for (k, x) in o {
                    if let Some((_, shape)) = m.iter().find(|(name, _)| name == k) {
                        out.push(shape as *const Shape);
                        walk(shape, x, out);
                    }
                }
            }
            _ => {}
        }
    }
    for (k, v) in body.as_object().into_iter().flatten() {
        if let Some((_, shape)) = carried.iter().find(|(name, _)| name == k) {
            out.push(shape as *const Shape);
            walk(shape, v, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PART: Shape = Shape::Obj(&[("type", Shape::Word(&["text"])), ("text", Shape::Str)]);
    const TOP: &[(&str, Shape)] = &[
        ("model", Shape::Frame),
        ("parts", Shape::List(&PART)),
        ("one", Shape::Single(&PART)),
    ];

    #[test]
    fn what_does_not_fit_is_keyed_as_it_came() {
        let body = json!({"model": "m", "parts": [{"type": "text", "text": "a"}],
                          "one": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                          "seed": 7});
        let names: Vec<&str> = uncarried(TOP, &body).iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["one", "seed"]);
        let named = json!({"parts": [{"type": "text", "text": "a", "name": "x"}]});
        assert_eq!(uncarried(TOP, &named).len(), 1);
        let other_word = json!({"parts": [{"type": "image", "text": "a"}]});
        assert_eq!(uncarried(TOP, &other_word).len(), 1);
        let nulls = json!({"parts": [{"type": "text", "text": null}], "model": null});
        assert!(uncarried(TOP, &nulls).is_empty());
        assert_eq!(uncarried(TOP, &json!([1])).len(), 1);
    }
}
