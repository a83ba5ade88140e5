//! A config file checked against the fields of `schema.rs` before it is read, so one run names every problem
//! with its line: a field no table has (with the field it most likely meant), a value of the wrong kind, a
//! table missing a field it needs. What does not fit is taken out (or, for a field a table needs, stands in
//! as an empty value, and validation's own complaints about it are not repeated), so the rest of the file
//! is still read and validated. The lines of every field and table are kept for validation's errors too.

use std::borrow::Cow;
use std::collections::HashMap;

use toml::de::{DeArray, DeTable, DeValue};
use toml::Spanned;

use super::schema::{Field, FieldKind};
use super::{err, ConfigError};

/// Line numbers (1-based) of byte offsets in a text.
pub(super) struct Lines {
    starts: Vec<usize>,
}

impl Lines {
    pub(super) fn new(text: &str) -> Lines {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { starts }
    }

    pub(super) fn of(&self, at: usize) -> usize {
        match self.starts.binary_search(&at) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }
}

/// What the check found.
#[derive(Default)]
pub(super) struct Checked {
    pub errors: Vec<ConfigError>,
    /// The line of each field and table seen, by path (`models[2].upstream`, `models[2]`).
    pub lines: HashMap<String, usize>,
    /// Paths that stand in with an empty value: validation's errors about them are not reported again.
    pub stand_ins: Vec<String>,
}

impl Checked {
    /// The line of `path`, or of the nearest table or field that holds it.
    pub(super) fn line_of(&self, path: &str) -> Option<usize> {
        let mut p = path;
        loop {
            if let Some(l) = self.lines.get(p) {
                return Some(*l);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }

    /// Whether validation's error about `path` is one already reported (it is, or is inside, a stand-in).
    pub(super) fn already_told(&self, path: &str) -> bool {
        self.stand_ins.iter().any(|s| {
            path == s
                || path
                    .strip_prefix(s.as_str())
                    .is_some_and(|r| r.starts_with(['.', '[']))
        })
    }
}

/// Checks `table` (the file's top level) against `fields`, taking out what does not fit.
pub(super) fn check(
    table: &mut Spanned<DeTable<'_>>,
    fields: &'static [Field],
    lines: &Lines,
) -> Checked {
    let mut out = Checked::default();
    let span = table.span();
    walk(table.get_mut(), span, fields, "", lines, &mut out);
    out
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn problem(out: &mut Checked, line: usize, path: String, message: String) {
    let mut e = err(path, message);
    e.line = Some(line);
    out.errors.push(e);
}

fn walk(
    table: &mut DeTable<'_>,
    span: std::ops::Range<usize>,
    fields: &'static [Field],
    path: &str,
    lines: &Lines,
    out: &mut Checked,
) {
    let mut unfit: Vec<String> = Vec::new();
    let mut meant: Vec<&'static str> = Vec::new();
    for (key, value) in table.iter_mut() {
        let name = key.get_ref().to_string();
        let here = join(path, &name);
        let line = lines.of(key.span().start);
        out.lines.insert(here.clone(), line);
        let Some(field) = fields.iter().find(|f| f.name == name) else {
            meant.extend(nearest(&name, fields));
            let hint = nearest(&name, fields)
                .map(|n| format!("; did you mean `{n}`?"))
                .unwrap_or_else(|| {
                    let names: Vec<&str> = fields.iter().map(|f| f.name).collect();
                    format!(" (the fields here: {})", names.join(", "))
                });
            problem(out, line, here, format!("unknown field `{name}`{hint}"));
            unfit.push(name);
            continue;
        };
        if !fits(field.kind, value, &here, lines, out) {
            let got = value.get_ref().type_str();
            problem(
                out,
                line,
                here.clone(),
                format!("expected {}, got {got}", field.kind.described()),
            );
            if field.required {
                *value = Spanned::new(value.span(), stand_in(field.kind));
                out.stand_ins.push(here);
            } else {
                unfit.push(name);
            }
        }
    }
    for name in &unfit {
        table.remove(name.as_str());
    }
    // What validation would say of the field a misspelling meant (that it is missing) is said already.
    for m in meant {
        if !table.contains_key(m) {
            out.stand_ins.push(join(path, m));
        }
    }
    for f in fields.iter().filter(|f| f.required) {
        if !table.contains_key(f.name) {
            let here = join(path, f.name);
            problem(
                out,
                lines.of(span.start),
                here.clone(),
                format!(
                    "missing: every entry here needs `{}` ({})",
                    f.name,
                    f.kind.described()
                ),
            );
            table.insert(
                Spanned::new(span.clone(), Cow::Owned(f.name.to_string())),
                Spanned::new(span.clone(), stand_in(f.kind)),
            );
            out.stand_ins.push(here);
        }
    }
}

/// Whether `value` is of `kind` (tables inside are checked, and what does not fit in them taken out).
fn fits(
    kind: FieldKind,
    value: &mut Spanned<DeValue<'_>>,
    path: &str,
    lines: &Lines,
    out: &mut Checked,
) -> bool {
    let span = value.span();
    let v = value.get_mut();
    match kind {
        FieldKind::Str => v.is_str(),
        FieldKind::Count => count(v),
        FieldKind::Int => v.is_integer(),
        FieldKind::Num => v.is_integer() || v.is_float(),
        FieldKind::Bool => v.is_bool(),
        FieldKind::StrList => v
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x.get_ref().is_str())),
        FieldKind::CountList => v
            .as_array()
            .is_some_and(|a| a.iter().all(|x| count(x.get_ref()))),
        FieldKind::StrOrList => {
            v.is_str()
                || v.as_array()
                    .is_some_and(|a| a.iter().all(|x| x.get_ref().is_str()))
        }
        FieldKind::NumMap => match v {
            DeValue::Table(t) => {
                for (k, _) in t.iter() {
                    out.lines
                        .insert(join(path, k.get_ref()), lines.of(k.span().start));
                }
                t.iter()
                    .all(|(_, x)| x.get_ref().is_integer() || x.get_ref().is_float())
            }
            _ => false,
        },
        FieldKind::Table(fields) => match v {
            DeValue::Table(t) => {
                walk(t, span, fields, path, lines, out);
                true
            }
            _ => false,
        },
        FieldKind::Tables(fields) => match v {
            DeValue::Array(items) if items.iter().all(|i| i.get_ref().is_table()) => {
                for (i, item) in items.iter_mut().enumerate() {
                    let here = format!("{path}[{i}]");
                    let item_span = item.span();
                    out.lines.insert(here.clone(), lines.of(item_span.start));
                    if let DeValue::Table(t) = item.get_mut() {
                        walk(t, item_span, fields, &here, lines, out);
                    }
                }
                true
            }
            _ => false,
        },
    }
}

/// A whole number of 0 or more.
fn count(v: &DeValue<'_>) -> bool {
    v.as_integer()
        .and_then(|i| i128::from_str_radix(i.as_str(), i.radix()).ok())
        .is_some_and(|n| n >= 0)
}

/// The empty value of a kind that stands in for a field a table needs.
fn stand_in(kind: FieldKind) -> DeValue<'static> {
    match kind {
        FieldKind::StrList | FieldKind::CountList | FieldKind::Tables(_) => {
            DeValue::Array(DeArray::new())
        }
        FieldKind::Table(_) | FieldKind::NumMap => DeValue::Table(DeTable::new()),
        FieldKind::Bool => DeValue::Boolean(false),
        FieldKind::Count | FieldKind::Int | FieldKind::Num => DeValue::Integer(Default::default()),
        FieldKind::Str | FieldKind::StrOrList => DeValue::String(Cow::Borrowed("")),
    }
}

/// The field of `fields` a misspelt `name` most likely meant: the closest by edits (a letter added, dropped,
/// changed, or two swapped), within a third of its length.
pub(super) fn nearest(name: &str, fields: &[Field]) -> Option<&'static str> {
    let limit = (name.chars().count() / 3).clamp(1, 3);
    fields
        .iter()
        .map(|f| (edits(name, f.name), f.name))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// Edits between two names (optimal string alignment: insertions, deletions, substitutions, adjacent
/// swaps), ignoring case and `-` for `_`.
fn edits(a: &str, b: &str) -> usize {
    let norm =
        |s: &str| -> Vec<char> { s.to_ascii_lowercase().replace('-', "_").chars().collect() };
    let (a, b) = (norm(a), norm(b));
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema;

    #[test]
    fn misspelt_fields_find_what_they_meant() {
        assert_eq!(nearest("base_ulr", schema::UPSTREAM), Some("base_url"));
        assert_eq!(
            nearest("upstream_modle", schema::MODEL),
            Some("upstream_model")
        );
        assert_eq!(nearest("input-price", schema::MODEL), Some("input_price"));
        assert_eq!(nearest("colour", schema::MODEL), None);
    }

    #[test]
    fn lines_of_offsets() {
        let l = Lines::new("a\nbb\n\nc");
        assert_eq!(
            (l.of(0), l.of(2), l.of(3), l.of(5), l.of(6)),
            (1, 2, 2, 3, 4)
        );
    }
}
