//! The structural rules ARCHITECTURE.md states, checked on the source tree: no import circles among the
//! files of `src/`, the modules in the layers ARCHITECTURE.md declares (no use of a higher layer, no circle),
//! no wire field named in `src/server/` or `src/gateway/` (by the codecs' own fields), the protocols named
//! only in their registry, the pipeline a line of stages (no callback into it, no outcome written across
//! modules), no hand-passed argument bundles, functions a reader can hold in `src/server/`, `src/gateway/`
//! and `src/protocol/`, module comments and ARCHITECTURE.md that point at files that exist, a module table
//! that names every file of `src/`, a thread list that names every thread, every thread started through
//! `logging::thread`, and typed errors (no `Result<_, String>` outside the CLI, no decision by an error's
//! text).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A file's code without its test module (from `#[cfg(test)]` on) and without `//` comments.
fn code_of(p: &Path) -> String {
    let text = without_test_items(&std::fs::read_to_string(p).unwrap());
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` without its test items: each item after a `#[cfg(test)]` (a test module, inline or declared, a
/// test-only function or import) is left out, up to its `;` or the brace that closes it. Production code
/// after a test module is read like any other.
fn without_test_items(text: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(MARK) {
        out.push_str(&rest[..i]);
        let after = &rest[i + MARK.len()..];
        rest = &after[item_len(after)..];
    }
    out.push_str(rest);
    out
}

/// The length of the item at the start of `s`: to its `;` outside braces, or to the brace that closes its
/// first `{`. Strings (raw ones too), character literals and comments are skipped.
fn item_len(s: &str) -> usize {
    let b = s.as_bytes();
    let (mut i, mut depth) = (0usize, 0i32);
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'r' if matches!(b.get(i + 1), Some(b'#' | b'"')) && !ident_before(b, i) => {
                let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let start = i + 2 + hashes;
                i = find(b, start, &close).map_or(b.len(), |e| e + close.len());
                continue;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if b.get(i + 1) == Some(&b'\\') => {
                i = find(b, i + 3, b"'").map_or(b.len(), |e| e + 1);
                continue;
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 2,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

fn find(b: &[u8], from: usize, what: &[u8]) -> Option<usize> {
    b.get(from..)?
        .windows(what.len())
        .position(|w| w == what)
        .map(|p| p + from)
}

/// The module path of a file under `src/` (`server/mod.rs` → `["server"]`).
fn module_of(src: &Path, p: &Path) -> Vec<String> {
    let rel = p.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// `a::{b, c::{d}}` → `a::b`, `a::c::d`.
fn expand_use(body: &str) -> Vec<String> {
    let body: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = body.find('{') else {
        return vec![body];
    };
    let (prefix, inner) = (&body[..open], &body[open + 1..body.len() - 1]);
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0, String::new());
    for ch in inner.chars() {
        match ch {
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            '{' => {
                depth += 1;
                cur.push(ch);
            }
            '}' => {
                depth -= 1;
                cur.push(ch);
            }
            _ => cur.push(ch),
        }
    }
    if !cur.is_empty() {
        parts.push(cur);
    }
    parts
        .iter()
        .flat_map(|p| expand_use(p))
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

/// Paths starting with `crate::` or `super::` in a file's code (in `use` items and inline).
fn paths_in(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before_ok = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric();
        rest = &rest[i + 4..];
        if before_ok {
            if let Some(end) = rest.find(';') {
                out.extend(expand_use(&rest[..end]));
            }
        }
    }
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            let prev = code[..at].chars().last();
            let end = code[at..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| at + e);
            if !prev.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                out.push(code[at..end].to_string());
            }
            from = end.max(at + 1);
        }
    }
    out
}

/// The files of `src/` and which of them each one uses (by its `crate::` and `super::` paths).
fn file_edges() -> (Vec<PathBuf>, BTreeMap<PathBuf, BTreeSet<PathBuf>>) {
    let src = root().join("src");
    let files = rust_files(&src);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|p| (module_of(&src, p), p.clone()))
        .collect();
    let resolve = |path: &[String]| {
        (1..=path.len())
            .rev()
            .find_map(|n| modules.get(&path[..n]).cloned())
    };
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for p in &files {
        let me = module_of(&src, p);
        let is_mod = matches!(
            p.file_stem().and_then(|s| s.to_str()),
            Some("mod" | "lib" | "main")
        );
        for raw in paths_in(&code_of(p)) {
            let segs: Vec<&str> = raw
                .split("::")
                .filter(|s| !s.is_empty() && *s != "self")
                .collect();
            let target: Vec<String> = match segs.first() {
                Some(&"crate") => segs[1..].iter().map(|s| s.to_string()).collect(),
                Some(&"super") => {
                    // The first `super` of a file is its parent module; of a `mod.rs`, the parent's parent.
                    let mut base = if is_mod {
                        me.clone()
                    } else {
                        me[..me.len().saturating_sub(1)].to_vec()
                    };
                    let ups = segs.iter().take_while(|s| **s == "super").count();
                    for _ in 1..ups {
                        base.pop();
                    }
                    if is_mod {
                        base.pop();
                    }
                    base.extend(segs[ups..].iter().map(|s| s.to_string()));
                    base
                }
                _ => continue,
            };
            if let Some(q) = resolve(&target) {
                if &q != p {
                    edges.entry(p.clone()).or_default().insert(q);
                }
            }
        }
    }
    (files, edges)
}

#[test]
fn no_import_circles_among_source_files() {
    let (files, edges) = file_edges();
    let circles = strongly_connected(&files, &edges);
    let shown: Vec<String> = circles
        .iter()
        .map(|c| {
            c.iter()
                .map(|p| p.strip_prefix(root()).unwrap().display().to_string())
                .collect::<Vec<_>>()
                .join(" <-> ")
        })
        .collect();
    assert!(shown.is_empty(), "import circles: {shown:#?}");
}

/// Tarjan's algorithm: the groups of two or more files that reach each other.
fn strongly_connected(
    files: &[PathBuf],
    edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<PathBuf, usize>,
        low: BTreeMap<PathBuf, usize>,
        stack: Vec<PathBuf>,
        on: BTreeSet<PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit(s: &mut State, v: &PathBuf) {
        let n = s.index.len();
        s.index.insert(v.clone(), n);
        s.low.insert(v.clone(), n);
        s.stack.push(v.clone());
        s.on.insert(v.clone());
        let next: Vec<PathBuf> = s.edges.get(v).into_iter().flatten().cloned().collect();
        for w in &next {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for f in files {
        if !s.index.contains_key(f) {
            visit(&mut s, f);
        }
    }
    s.out
}

/// The checker finds a circle when there is one (so a pass above means something).
#[test]
fn the_circle_check_sees_a_circle() {
    let a = PathBuf::from("a.rs");
    let b = PathBuf::from("b.rs");
    let c = PathBuf::from("c.rs");
    let mut edges = BTreeMap::new();
    edges.insert(a.clone(), BTreeSet::from([b.clone()]));
    edges.insert(b.clone(), BTreeSet::from([a.clone(), c.clone()]));
    let found = strongly_connected(&[a.clone(), b.clone(), c], &edges);
    assert_eq!(found, vec![vec![a, b]]);
    let found = paths_in("use super::{x::Y, z};\nlet v = crate::m::f();");
    for p in ["super::x::Y", "super::z", "crate::m::f"] {
        assert!(found.iter().any(|f| f == p), "{p} in {found:?}");
    }
}

/// The string literals of `code` that look like a field or header name of more than one word
/// (`max_tokens`, `anthropic-version`).
fn field_names(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for piece in code.split('"').skip(1).step_by(2) {
        let words: Vec<&str> = piece.split(['_', '-']).collect();
        let plain = words.len() > 1
            && piece.starts_with(|c: char| c.is_ascii_lowercase())
            && words.iter().all(|w| {
                !w.is_empty()
                    && w.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            });
        if plain {
            out.insert(piece.to_string());
        }
    }
    out
}

/// The wire fields that belong to some protocols and not to all, by the codecs' own code: the names each
/// protocol's directory (and the OpenAI protocols' shared `openai.rs`) writes, less those every protocol has.
fn protocol_specific_fields() -> BTreeSet<String> {
    let protocol = root().join("src/protocol");
    let openai = field_names(&code_of(&protocol.join("openai.rs")));
    let mut per_protocol: Vec<BTreeSet<String>> = Vec::new();
    for entry in std::fs::read_dir(&protocol).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let mut names = BTreeSet::new();
        for f in rust_files(&dir) {
            let code = code_of(&f);
            names.extend(field_names(&code));
            if code.contains("openai::") {
                names.extend(openai.iter().cloned());
            }
        }
        per_protocol.push(names);
    }
    assert!(per_protocol.len() >= 3, "the protocols' directories");
    let all: BTreeSet<String> = per_protocol.iter().flatten().cloned().collect();
    all.into_iter()
        .filter(|n| !per_protocol.iter().all(|p| p.contains(n)))
        .collect()
}

/// The files of the request path: the pipeline (`src/server/`) and what it shares with the console
/// (`src/gateway/`).
fn serving_files() -> Vec<PathBuf> {
    let mut files = rust_files(&root().join("src/server"));
    files.extend(rust_files(&root().join("src/gateway")));
    files
}

/// Protocol knowledge lives in `src/protocol/`: the request pipeline in `src/server/` (and what it shares
/// with the console, `src/gateway/`) names no field of a wire format that is some protocol's own (found in
/// the codecs' own code, not in a list here) and indexes no JSON by field name. The request log line and the metrics are the gateway's own formats (their names
/// may be a protocol's too).
#[test]
fn the_server_names_no_wire_field() {
    let wire = protocol_specific_fields();
    for known in [
        "max_tokens",
        "stream_options",
        "anthropic-version",
        "sequence_number",
        "owned_by",
    ] {
        assert!(
            wire.contains(known),
            "{known} is some protocols' field: {wire:?}"
        );
    }
    let own_formats = [
        root().join("src/server/report.rs"),
        root().join("src/gateway/metrics"),
    ];
    let mut found = Vec::new();
    for p in serving_files() {
        let code = code_of(&p);
        if !own_formats.iter().any(|f| p.starts_with(f)) {
            for name in field_names(&code).intersection(&wire) {
                found.push(format!("{}: \"{name}\"", p.display()));
            }
        }
        for access in [
            ".get(\"",
            ".get_mut(\"",
            "pointer(\"",
            ".insert(\"",
            ".remove(\"",
        ] {
            if code.contains(access) {
                found.push(format!("{}: {access}", p.display()));
            }
        }
        for (i, _) in code.match_indices("[\"") {
            let rest = &code[i + 2..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && rest[name.len()..].starts_with("\"]") {
                found.push(format!("{}: [\"{name}\"]", p.display()));
            }
        }
    }
    assert!(found.is_empty(), "wire fields in src/server: {found:#?}");
}

/// The protocols' variants as the registry lists them (the lines of `protocols!` in `src/protocol/mod.rs`).
fn registry_variants(registry: &str) -> Vec<String> {
    let body = registry
        .split("\nprotocols! {")
        .nth(1)
        .and_then(|b| b.split("\n}").next())
        .unwrap_or("");
    body.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("///") && !l.starts_with('#'))
        .filter_map(|l| l.split_once("=>").map(|(v, _)| v.trim().to_string()))
        .filter(|v| !v.is_empty())
        .collect()
}

/// Where `code` names one of `variants` of the protocol id, or lists them all in an enum of its own.
fn protocol_names(code: &str, variants: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for v in variants {
        let named = format!("Protocol::{v}");
        for (i, _) in code.match_indices(&named) {
            let next = code[i + named.len()..].chars().next();
            if !next.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                found.push(named.clone());
            }
        }
    }
    for glob in ["Protocol::{", "Protocol::*"] {
        if code.contains(glob) {
            found.push(glob.to_string());
        }
    }
    // A second list of the protocols: an enum of the same variants.
    for decl in code.split("enum ").skip(1) {
        let Some((head, body)) = decl.split_once('{') else {
            continue;
        };
        let body = body.split('}').next().unwrap_or("");
        let listed: BTreeSet<&str> = body
            .split(',')
            .map(|v| v.trim().split(['(', ' ', '{']).next().unwrap_or(""))
            .collect();
        if variants.iter().all(|v| listed.contains(v.as_str())) {
            found.push(format!("enum {} lists the protocols", head.trim()));
        }
    }
    found
}

/// A protocol is named in one place, the registry: everything else reaches it through its id, its codec or
/// the registry's list. Counts the places outside the registry that name a variant of `Protocol` (by the
/// registry's own list of them) or keep a list of the protocols of their own: none.
#[test]
fn protocols_are_named_only_in_the_registry() {
    let registry = root().join("src/protocol/mod.rs");
    let variants = registry_variants(&std::fs::read_to_string(&registry).unwrap());
    assert!(
        variants.len() >= 3,
        "the registry's protocols: {variants:?}"
    );
    let mut found = Vec::new();
    for p in rust_files(&root().join("src")) {
        if p == registry {
            continue;
        }
        for name in protocol_names(&code_of(&p), &variants) {
            found.push(format!(
                "{}: {name}",
                p.strip_prefix(root()).unwrap().display()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "protocols named outside the registry: {found:#?}"
    );
    // The check sees what it looks for.
    let first = format!("let p = Protocol::{};", variants[0]);
    assert_eq!(protocol_names(&first, &variants).len(), 1);
    let longer = format!("let p = Protocol::{}s;", variants[0]);
    assert!(protocol_names(&longer, &variants).is_empty());
    let list = format!("enum Proto {{ {}, }}", variants.join(", "));
    assert_eq!(protocol_names(&list, &variants).len(), 1);
}

/// The types a request's outcome is made of: `Outcome` and `Answer`, and the structs that hold one.
fn outcome_holders(files: &[PathBuf]) -> BTreeSet<String> {
    let mut holders: BTreeSet<String> = ["Outcome", "Answer"].map(String::from).into();
    for p in files {
        let code = code_of(p);
        for decl in code.split("struct ").skip(1) {
            let name: String = decl
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let body = decl
                .split_once('{')
                .map_or("", |(_, b)| b.split('}').next().unwrap_or(""));
            let holds = [": Answer,", ": Outcome,", ": Answer\n", ": Outcome\n"];
            if holds.iter().any(|f| body.contains(f)) {
                holders.insert(name);
            }
        }
    }
    holders
}

/// The signatures of the functions other modules may call (`pub`, `pub(crate)`, `pub(super)`).
fn public_signatures(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for start in ["pub fn ", "pub(crate) fn ", "pub(super) fn "] {
        for (i, _) in code.match_indices(start) {
            let rest = &code[i..];
            let end = rest.find(['{', ';']).unwrap_or(rest.len());
            out.push(&rest[..end]);
        }
    }
    out
}

/// Whether `text` takes a `&mut` of the type `h` (with or without a lifetime).
fn takes_mut(text: &str, h: &str) -> bool {
    text.match_indices("&").any(|(i, _)| {
        let rest = text[i + 1..].trim_start();
        let rest = match rest.strip_prefix('\'') {
            Some(r) => r
                .trim_start_matches(|c: char| c.is_alphanumeric() || c == '_')
                .trim_start(),
            None => rest,
        };
        let Some(rest) = rest.strip_prefix("mut ") else {
            return false;
        };
        let rest = rest.trim_start();
        rest.starts_with(h)
            && !rest[h.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
    })
}

/// Where `code` passes one of `holders` by `&mut` across a module boundary (a public function's parameter,
/// a struct's field), or passes a function back (a function pointer, a closure's trait). `own`: the file
/// that defines the outcome's types (their own methods take `&mut self`).
fn pipeline_breaches(code: &str, holders: &BTreeSet<String>, own: bool) -> Vec<String> {
    let mut found = Vec::new();
    for h in holders {
        if !own && public_signatures(code).iter().any(|s| takes_mut(s, h)) {
            found.push(format!("a public function takes &mut {h}"));
        }
        let mut fields = code.split("struct ").skip(1).map(|d| {
            d.split_once('{')
                .map_or("", |(_, b)| b.split('}').next().unwrap_or(""))
        });
        if fields.any(|body| takes_mut(body, h)) {
            found.push(format!("a struct holds &mut {h}"));
        }
    }
    for callback in ["fn(", "Fn(", "FnMut(", "FnOnce("] {
        let typed = code
            .match_indices(callback)
            .any(|(i, _)| !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_'));
        if typed {
            found.push(format!("a function is passed as {callback}..)"));
        }
    }
    found
}

/// Whether `code` names the type `t` (a whole word).
fn names_type(code: &str, t: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    code.match_indices(t)
        .any(|(i, _)| !word(code[..i].chars().last()) && !word(code[i + t.len()..].chars().next()))
}

/// The pipeline is a line of stages (prepare → admit → attempts → settle), each taking its inputs and
/// returning a value: no file of the request path (those that name `Attempt`, `Prepared`, `Answer` or
/// `Outcome`) passes a function or closure back into it (failover decides the order and whether to move on;
/// it never calls the answering step), and no `Outcome` or `Answer` (or a struct holding one) crosses a
/// module boundary by `&mut`: the step that builds one owns it and returns it.
#[test]
fn the_pipeline_is_a_line_of_stages() {
    let server: Vec<PathBuf> = serving_files();
    let holders = outcome_holders(&server);
    let own = root().join("src/server/outcome.rs");
    let mut found = Vec::new();
    for p in &server {
        let code = code_of(p);
        let on_path = ["Attempt", "Prepared", "Answer", "Outcome"]
            .iter()
            .any(|t| names_type(&code, t));
        if !on_path {
            continue;
        }
        for b in pipeline_breaches(&code, &holders, p == &own) {
            found.push(format!(
                "{}: {b}",
                p.strip_prefix(root()).unwrap().display()
            ));
        }
    }
    assert!(found.is_empty(), "the pipeline: {found:#?}");
    // The check sees what it looks for.
    assert!(holders.contains("Settled"), "{holders:?}");
    let serve = "pub type Serve = fn(&mut Attempt) -> Result<(), ApiError>;";
    assert_eq!(pipeline_breaches(serve, &holders, false).len(), 1);
    let keep = "pub fn dispatch(req: &mut InFlight, out: &mut Outcome) -> Result<(), ApiError> {";
    assert_eq!(pipeline_breaches(keep, &holders, false).len(), 1);
    let field = "pub struct Attempt<'a> { pub answer: &'a mut Answer, }";
    assert_eq!(pipeline_breaches(field, &holders, false).len(), 1);
    let fine = "pub fn serve(a: &mut Attempt) -> Answer { let x = &mut Answered; }";
    assert!(pipeline_breaches(fine, &holders, false).is_empty());
}

/// No function takes a bundle of arguments passed by hand (what `too_many_arguments` would flag).
#[test]
fn no_argument_bundles() {
    let allowed: Vec<String> = rust_files(&root().join("src"))
        .into_iter()
        .filter(|p| code_of(p).contains("too_many_arguments"))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        allowed.is_empty(),
        "too_many_arguments allowed in {allowed:?}"
    );
}

/// Functions of the request pipeline and the codecs fit on a screen or two (about 80 lines).
#[test]
fn functions_a_reader_can_hold() {
    let mut long = Vec::new();
    for dir in ["src/server", "src/gateway", "src/protocol"] {
        for p in rust_files(&root().join(dir)) {
            let code = code_of(&p);
            let lines: Vec<&str> = code.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                let t = l.trim_start();
                let is_fn = t.starts_with("fn ")
                    || t.starts_with("pub fn ")
                    || t.starts_with("pub(crate) fn ")
                    || t.starts_with("pub(super) fn ");
                // A declaration without a body (a trait's) ends at `;` before any `{`.
                let head_end = lines[i..]
                    .iter()
                    .map(|x| x.trim_end())
                    .find(|x| x.ends_with(';') || x.ends_with('{'));
                if !is_fn || head_end.is_none_or(|x| x.ends_with(';')) {
                    continue;
                }
                let indent = &l[..l.len() - t.len()];
                let close = format!("{indent}}}");
                let end = lines[i..].iter().position(|x| *x == close).unwrap_or(0);
                if end + 1 > 82 {
                    long.push(format!("{}:{} ({} lines)", p.display(), i + 1, end + 1));
                }
            }
        }
    }
    assert!(long.is_empty(), "functions over ~80 lines: {long:#?}");
}

/// Module comments that name a source file name one that exists.
#[test]
fn module_comments_point_at_files_that_exist() {
    let root = root();
    let mut missing = Vec::new();
    for p in rust_files(&root.join("src")) {
        let text = std::fs::read_to_string(&p).unwrap();
        for line in text.lines().filter(|l| l.starts_with("//!")) {
            for word in line.split('`').skip(1).step_by(2) {
                let named = word.trim_end_matches(['.', ',', ')']);
                let looks_like_file =
                    (named.ends_with(".rs") || named.ends_with(".md") || named.ends_with(".js"))
                        && !named.contains(' ')
                        && !named.contains('*');
                if !looks_like_file {
                    continue;
                }
                let candidates = [
                    root.join(named),
                    root.join("src").join(named),
                    p.parent().unwrap().join(named),
                ];
                if !candidates.iter().any(|c| c.exists()) {
                    missing.push(format!("{}: {named}", p.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "module comments name missing files: {missing:#?}"
    );
}

/// Every thread the gateway starts is started through `logging::thread`, so it logs where its server logs
/// (stderr, or the capture of a server run inside a test) and several servers in one process stay apart.
#[test]
fn threads_start_through_the_logging_context() {
    let root = root();
    let mut found = Vec::new();
    for p in rust_files(&root.join("src")) {
        let rel = p
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel == "src/logging.rs" {
            continue;
        }
        let code = code_of(&p);
        for (i, line) in code.lines().enumerate() {
            if line.contains("thread::spawn(") || line.contains(".spawn(move") {
                found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "threads started without logging::thread: {found:#?}"
    );
}

fn architecture_md() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap()
}

/// The words of `text` between backticks.
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The text of the section `## {title}` of `doc`, up to the next section.
fn section<'a>(doc: &'a str, title: &str) -> &'a str {
    doc.split(&format!("\n## {title}\n"))
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap_or("")
}

/// The rows of a Markdown table in `text` (header and rule left out), as their cells.
fn table_rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .skip(1)
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect()
}

/// The top-level modules of `src/` (`src/access/` is `access`, `src/audit.rs` is `audit`); the crate roots
/// (`lib.rs`, `main.rs`) are none.
fn top_level_modules() -> BTreeSet<String> {
    std::fs::read_dir(root().join("src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| match p.extension() {
            _ if p.is_dir() => Some(p.file_name()?.to_string_lossy().into_owned()),
            Some(e) if e == "rs" => Some(p.file_stem()?.to_string_lossy().into_owned()),
            _ => None,
        })
        .filter(|m| m != "lib" && m != "main")
        .collect()
}

/// The layers ARCHITECTURE.md declares, lowest first: the modules of each row of its `Layers` table.
fn declared_layers(doc: &str) -> Vec<Vec<String>> {
    table_rows(section(doc, "Layers"))
        .iter()
        .map(|cells| {
            cells.get(1).map_or_else(Vec::new, |c| {
                quoted(c).iter().map(|m| m.to_string()).collect()
            })
        })
        .collect()
}

/// The uses among `edges` (module → modules it uses) that go up: to a module of a higher layer.
fn upward_uses(
    layer_of: &BTreeMap<String, usize>,
    edges: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut found = Vec::new();
    for (a, used) in edges {
        for b in used {
            if let (Some(la), Some(lb)) = (layer_of.get(a), layer_of.get(b)) {
                if lb > la {
                    found.push(format!(
                        "{a} (layer {}) uses {b} (layer {})",
                        la + 1,
                        lb + 1
                    ));
                }
            }
        }
    }
    found
}

/// The modules of `src/` form layers (ARCHITECTURE.md, "Layers"): every top-level module is in exactly one,
/// uses (`use crate::x`, `crate::x::` and `super::` paths, as the circle check reads them) go only to its
/// own layer or those below, and no modules use each other around a circle.
#[test]
fn modules_use_only_their_layer_and_those_below() {
    let layers = declared_layers(&architecture_md());
    assert!(layers.len() >= 3, "the layers: {layers:?}");
    let mut layer_of = BTreeMap::new();
    for (i, layer) in layers.iter().enumerate() {
        for m in layer {
            assert!(
                layer_of.insert(m.clone(), i).is_none(),
                "{m} is in two layers"
            );
        }
    }
    let declared: BTreeSet<String> = layer_of.keys().cloned().collect();
    assert_eq!(
        declared,
        top_level_modules(),
        "the layers name every module of src/, and only those"
    );
    let src = root().join("src");
    let top = |p: &Path| module_of(&src, p).first().cloned();
    let (_, file_edges) = file_edges();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, used) in &file_edges {
        for b in used {
            if let (Some(ta), Some(tb)) = (top(a), top(b)) {
                if ta != tb {
                    edges.entry(ta).or_default().insert(tb);
                }
            }
        }
    }
    let up = upward_uses(&layer_of, &edges);
    assert!(up.is_empty(), "uses of a higher layer: {up:#?}");
    let nodes: Vec<PathBuf> = declared.iter().map(PathBuf::from).collect();
    let as_paths: BTreeMap<PathBuf, BTreeSet<PathBuf>> = edges
        .iter()
        .map(|(a, b)| (PathBuf::from(a), b.iter().map(PathBuf::from).collect()))
        .collect();
    let circles = strongly_connected(&nodes, &as_paths);
    assert!(circles.is_empty(), "modules in a circle: {circles:?}");
    // The check sees what it looks for.
    let lowest = &layers[0][0];
    let highest = &layers[layers.len() - 1][0];
    let wrong = BTreeMap::from([(lowest.clone(), BTreeSet::from([highest.clone()]))]);
    assert_eq!(upward_uses(&layer_of, &wrong).len(), 1);
    let table =
        "## Layers\n\n| Layer | Modules |\n|---|---|\n| 1 | `a`, `b` |\n| 2 | `c` |\n\n## Next";
    assert_eq!(
        declared_layers(&format!("x\n{table}")),
        vec![vec!["a", "b"], vec!["c"]]
    );
}

/// Every file below `dir` (any kind), sorted.
fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Whether `word` names a source or documentation file.
fn looks_like_file(word: &str) -> bool {
    let word = word.trim_end_matches(['.', ',', ')', ':']);
    !word.contains([' ', '*', '{'])
        && [".rs", ".md", ".js", ".css", ".html", ".lua"]
            .iter()
            .any(|e| word.ends_with(e))
}

/// ARCHITECTURE.md's module table names every file of `src/` in the row of its directory (by its name, or
/// its path below the row's directory), and names no file that does not exist there.
#[test]
fn the_module_table_lists_every_file_of_src() {
    let doc = architecture_md();
    let rows: Vec<(Vec<String>, Vec<String>)> = table_rows(section(&doc, "Modules"))
        .iter()
        .map(|cells| {
            let paths = quoted(cells[0]).iter().map(|p| p.to_string()).collect();
            let names = cells[1..]
                .iter()
                .flat_map(|c| quoted(c))
                .map(|w| w.trim_end_matches(['.', ',', ')', ':']).to_string())
                .collect();
            (paths, names)
        })
        .collect();
    assert!(rows.len() > 10, "the module table: {} rows", rows.len());
    let root = root();
    let mut missing = Vec::new();
    for f in all_files(&root.join("src")) {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let base = f.file_name().unwrap().to_string_lossy().into_owned();
        let row = rows
            .iter()
            .flat_map(|(paths, names)| paths.iter().map(move |p| (p, names)))
            .filter(|(p, _)| **p == rel || (p.ends_with('/') && rel.starts_with(p.as_str())))
            .max_by_key(|(p, _)| p.len());
        let listed = match row {
            None => false,
            Some((p, _)) if *p == rel => true,
            Some((p, names)) => {
                let below = &rel[p.len()..];
                names.iter().any(|n| n == below || *n == base)
            }
        };
        if !listed {
            missing.push(rel);
        }
    }
    assert!(
        missing.is_empty(),
        "files of src/ the module table does not name: {missing:#?}"
    );
    let mut stale = Vec::new();
    for (paths, names) in &rows {
        for n in names.iter().filter(|n| looks_like_file(n)) {
            let below_row = paths.iter().any(|p| {
                p.ends_with('/')
                    && all_files(&root.join(p))
                        .iter()
                        .any(|f| f.ends_with(n.as_str()))
            });
            if !below_row && !root.join(n).exists() && !root.join("src").join(n).exists() {
                stale.push(format!("{paths:?}: {n}"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the module table names files that do not exist: {stale:#?}"
    );
}

/// ARCHITECTURE.md names no file that does not exist (in backticks, or a source file in its diagram): each
/// is a path from the repository's root or `src/`, or the end of the path of some file of the repository.
#[test]
fn architecture_md_names_files_that_exist() {
    let doc = architecture_md();
    let root = root();
    let mut every: Vec<PathBuf> = Vec::new();
    for dir in [
        "src", "docs", "tests", "harness", "bench", "scripts", "fixtures",
    ] {
        if root.join(dir).is_dir() {
            every.extend(all_files(&root.join(dir)));
        }
    }
    let mut words: Vec<String> = quoted(&doc)
        .iter()
        .map(|w| w.trim_end_matches(['.', ',', ')', ':']).to_string())
        .collect();
    for block in doc.split("```").skip(1).step_by(2) {
        words.extend(
            block
                .split(|c: char| !(c.is_alphanumeric() || "_./".contains(c)))
                .map(|w| w.trim_end_matches('.').to_string()),
        );
    }
    let mut missing: Vec<String> = words
        .into_iter()
        .filter(|w| looks_like_file(w))
        .filter(|w| {
            !root.join(w).exists()
                && !root.join("src").join(w).exists()
                && !every.iter().any(|f| f.ends_with(w.as_str()))
        })
        .collect();
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names files that do not exist: {missing:?}"
    );
}

/// The names the gateway gives its threads in `src/`: the builder's `.name("…")` (with `format!`, the
/// text before the first `{`) and the first argument of the server's `spawn("…", …)`.
fn thread_names(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for start in [".name(\"", ".name(format!(\"", "spawn(\""] {
        for (i, _) in code.match_indices(start) {
            let rest = &code[i + start.len()..];
            let end = rest.find(['"', '{']).unwrap_or(0);
            if end > 0 {
                out.insert(rest[..end].to_string());
            }
        }
    }
    out
}

/// Whether `word` looks like a thread's name (`tollgate-accept`, `tollgate-worker-N`).
fn looks_like_thread_name(word: &str) -> bool {
    word.contains('-')
        && word.starts_with(|c: char| c.is_ascii_lowercase())
        && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// ARCHITECTURE.md's thread list names every thread the gateway starts, by the name it is given in `src/`
/// (a name made with `format!` by its fixed start), and no thread that is not started.
#[test]
fn the_thread_list_names_every_thread() {
    let doc = architecture_md();
    let list = doc
        .split("\n- **Threads**")
        .nth(1)
        .and_then(|s| s.split("\n- **").next())
        .unwrap_or("");
    let listed: Vec<&str> = quoted(list)
        .into_iter()
        .filter(|w| looks_like_thread_name(w))
        .collect();
    let mut names = BTreeSet::new();
    for p in rust_files(&root().join("src")) {
        names.extend(thread_names(&code_of(&p)));
    }
    assert!(names.len() >= 10, "the threads: {names:?}");
    let unlisted: Vec<&String> = names
        .iter()
        .filter(|n| {
            !listed
                .iter()
                .any(|w| w == n || (n.ends_with('-') && w.starts_with(n.as_str())))
        })
        .collect();
    assert!(
        unlisted.is_empty(),
        "threads the thread list does not name: {unlisted:?}"
    );
    let unknown: Vec<&&str> = listed
        .iter()
        .filter(|w| {
            !names
                .iter()
                .any(|n| *w == n || (n.ends_with('-') && w.starts_with(n.as_str())))
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "the thread list names threads that are not started: {unknown:?}"
    );
    // The check sees what it looks for.
    let code = "Builder::new().name(format!(\"tollgate-worker-{i}\")); spawn(\"tollgate-keys\", f); x.name()";
    assert_eq!(
        thread_names(code),
        BTreeSet::from(["tollgate-worker-".to_string(), "tollgate-keys".to_string()])
    );
}

/// The signatures of the functions in `code` (from `fn` to the body or the `;`), whitespace collapsed.
fn fn_signatures(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("fn ") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[i..];
        let end = rest.find(['{', ';']).unwrap_or(rest.len());
        out.push(rest[..end].split_whitespace().collect::<Vec<_>>().join(" "));
    }
    out
}

/// Whether a signature returns or takes a `Result` whose error is a bare `String`.
fn string_error(signature: &str) -> bool {
    signature.match_indices("Result<").any(|(i, _)| {
        let (mut depth, mut last_comma) = (0, None);
        for (j, c) in signature[i + 7..].char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' if depth > 0 => depth -= 1,
                '>' => {
                    return last_comma
                        .is_some_and(|k| signature[i + 7 + k + 1..i + 7 + j].trim() == "String")
                }
                ',' if depth == 0 => last_comma = Some(j),
                _ => {}
            }
        }
        false
    })
}

/// Where `code` decides by the text of an error: its wire code or its message compared with a literal,
/// matched against literal codes, or searched.
fn text_decisions(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for pattern in [
        ".code() ==",
        ".code() !=",
        "message().contains(",
        "message().starts_with(",
        "message().ends_with(",
        "message() ==",
        ".message.contains(",
        ".message.starts_with(",
        ".message.ends_with(",
        "operator_text().contains(",
        ".to_string().contains(",
        ".to_string().starts_with(",
    ] {
        if code.contains(pattern) {
            found.push(pattern.to_string());
        }
    }
    for (i, _) in code.match_indices("match ") {
        let Some(open) = code[i..].find('{') else {
            continue;
        };
        if !code[i..i + open].contains(".code()") {
            continue;
        }
        let body = &code[i + open..];
        let mut depth = 0;
        let end = body
            .char_indices()
            .find_map(|(j, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                (depth == 0).then_some(j)
            })
            .unwrap_or(body.len());
        if body[..end].contains("Some(\"") {
            found.push("a match of .code() against literal codes".to_string());
        }
    }
    found
}

/// The wire codes the gateway's own errors are answered with: those `Cause::code` names
/// (`src/protocol/error.rs`).
fn cause_codes() -> BTreeSet<String> {
    let error = code_of(&root().join("src/protocol/error.rs"));
    let body = error
        .split("pub fn code(self)")
        .nth(1)
        .and_then(|b| b.split("\n    }\n").next())
        .unwrap_or("");
    body.lines()
        .filter(|l| l.trim_start().starts_with("Cause::"))
        .filter_map(|l| l.split('"').nth(1))
        .map(str::to_string)
        .collect()
}

/// Errors are typed (ARCHITECTURE.md, "Errors"): no function outside the command line (`src/cli/`, which
/// prints its errors) has a `Result` whose error is a bare `String`; nothing decides by an error's text (its
/// message, or its wire code compared with a literal: the code matches `Cause`, `Origin`, `ErrorKind` or an
/// area's own error enum); and the gateway's own codes are set by naming their `Cause`, never as text.
#[test]
fn errors_are_typed() {
    let root = root();
    let codes = cause_codes();
    assert!(
        codes.contains("ledger_unavailable") && codes.len() > 20,
        "{codes:?}"
    );
    let mut found = Vec::new();
    for p in rust_files(&root.join("src")) {
        let rel = p.strip_prefix(&root).unwrap().display().to_string();
        // Test modules of their own (`#[cfg(test)] mod tests;`) are test code.
        if p.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let code = code_of(&p);
        if !rel.starts_with("src/cli/") {
            for s in fn_signatures(&code).iter().filter(|s| string_error(s)) {
                found.push(format!("{rel}: {s}"));
            }
        }
        for d in text_decisions(&code) {
            found.push(format!("{rel}: decides by text: {d}"));
        }
        for c in &codes {
            if code.contains(&format!("with_code(\"{c}\")")) {
                found.push(format!("{rel}: with_code(\"{c}\"): name its Cause"));
            }
        }
    }
    assert!(found.is_empty(), "untyped errors: {found:#?}");
    // The check sees what it looks for.
    assert!(string_error(
        "fn a(x: u8) -> Result<Vec<(u8, String)>, String>"
    ));
    assert!(string_error(
        "fn a(f: impl Fn() -> Result<(), String>) -> bool"
    ));
    assert!(!string_error("fn a() -> Result<String, ApiError>"));
    assert!(!string_error("fn a() -> Result<(String, u8), E>"));
    assert_eq!(
        text_decisions("if err.code() == Some(\"ledger_unavailable\") {}").len(),
        1
    );
    let matched =
        "match (e.status(), e.code()) { (_, Some(\"rate_limit_exceeded\")) => 1, _ => 2 }";
    assert_eq!(text_decisions(matched).len(), 1);
    assert!(
        text_decisions("match (e.status(), e.cause()) { (_, Cause::X) => 1, _ => 2 }").is_empty()
    );
}

/// Test items are left out by parsing them: the code after a test module is read, and a test module's
/// strings, raw strings and characters do not end it early.
#[test]
fn test_items_are_parsed_out_not_cut_at() {
    let text = r###"use a::b;
#[cfg(test)]
use c::d;
fn one() {}
#[cfg(test)]
mod tests {
    fn t() { let s = "}"; let r = r#"{"a": "}"}"#; let c = '}'; let q = '\''; } // }
}
fn two() {}
#[cfg(test)]
mod more;
fn three() {}
"###;
    let code = without_test_items(text);
    for kept in ["use a::b;", "fn one()", "fn two()", "fn three()"] {
        assert!(code.contains(kept), "{kept} lost: {code}");
    }
    for gone in ["c::d", "mod tests", "fn t()", "mod more"] {
        assert!(!code.contains(gone), "{gone} kept: {code}");
    }
    // The ledger's query has production code after its test module: it is read.
    let query = code_of(&root().join("src/ledger/query.rs"));
    assert!(query.contains("fn each_line_backwards_in("), "{query}");
}
