//! Upstream credentials never leave, and answers are never altered: the two rules meet here.
//!
//! **What is a secret.** The credentials registered at start ([`register`]: the upstreams' keys;
//! [`register_own`]: the admin token and the store's password) are sorted once. A *public* value is no
//! secret and is never searched for anywhere: a known placeholder of local servers and their documentation
//! (llama.cpp's `sk-no-key-required`, `ollama`, `EMPTY`, `none`, `lm-studio`, ...). Every other credential,
//! whatever its length or shape, is scrubbed from error texts, records and log lines. A *real secret*, also
//! searched for in answers, is a key of at least [`ANSWER_MIN`] (16) characters that does not look written
//! by hand (only lowercase letters and separators, `your-api-key-here`: a generated key has digits or mixed
//! case; or one character repeated for half of it, `sk-xxxx…`), or an operator's secret of that length.
//!
//! **Error texts, records and log lines** ([`scrub`]): every registered credential is replaced by
//! `[redacted]` (one under 8 characters only as a whole word, so a short one does not cut words apart), and
//! so is every word that looks like a masked echo of one (`sk-proj-****…abcd`: a word that starts like the
//! key or ends with its last four characters), as upstreams write them in their errors; and so are the
//! identifiers of the operator's upstream accounts ([`account_ids`]).
//!
//! **Answers** (what the model wrote, plain or streamed, on every path) are never searched with those
//! heuristics: only an exact real secret is replaced, wherever it appears.
//! - A complete body (`gateway/respond.rs` `json`, which every plain answer passes) and each chunk a stream
//!   writes: [`redact`] replaces the credential's bytes (as written, or as a JSON string escapes it).
//! - A secret split across stream events: a [`Redactor`] per stream (`server/events.rs` for canonical
//!   streams: the built-in model and translation; `server/passthrough.rs` for relayed ones) is fed the text
//!   each event adds (text, reasoning, tool arguments) before the event goes out. It runs one
//!   Knuth–Morris–Pratt automaton per real secret over the concatenated text, so it knows at every byte how
//!   many of a secret's first bytes the text so far ends with. An event is held back only while that is at
//!   least the secret's [`hold_from`] (half its length, 8 to 24 bytes), so ordinary text is practically
//!   never held and at most that many bytes less one can have left before it is recognised; the events
//!   after it wait behind it, in order. Why not fewer: a hold is seen (an event arrives late, with the next
//!   one), so a client that has a model write guesses could learn from it, byte by byte, how much of a key
//!   it has guessed. A key's first bytes are often public (`sk-proj-`, `sk-ant-api03-`: up to 13), so a
//!   hold that began at the eighth byte would answer guesses from the first secret one. Past half the key,
//!   or 24 bytes, at least 11 bytes nobody knows must be guessed blind before any hold can tell anything,
//!   and at least half the key (and, for the longer ones, nearly all of it) has not left when the rest is
//!   replaced. On a full match, the secret's bytes in the held events and the current one are cut from their
//!   text and `[redacted]` is put where the first held part began ([`TextEdit`]); the events go out (rewritten)
//!   once no partial match is long enough to hold them, or when the stream ends (before its closing events).
//!   Events that repeat the whole text (a Responses `response.completed`, an `output_text.done`) carry the
//!   secret in one piece and are caught by [`redact`]; a canonical stream's final objects are built from the
//!   redacted deltas.
//!
//! Cost: with no real secret registered (local servers with placeholder keys), a `Redactor` holds nothing
//! and every event passes with one comparison; with some, each event's text is scanned once per secret, one
//! automaton step per byte, and nothing is allocated until a secret's first [`hold_from`] bytes actually
//! appear at an event's end. The set is read once per stream (an `Arc`), not per event.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, RwLock};

/// What replaces a credential.
pub const REDACTED: &str = "[redacted]";

/// The shortest credential that counts as a real secret, searched for in answers.
pub const ANSWER_MIN: usize = 16;

/// A stream event is held back while the text so far ends in at least this many of the first bytes of a
/// secret `len` bytes long: half of them, 8 at least and 24 at most (see the module documentation).
pub fn hold_from(len: usize) -> usize {
    (len / 2).clamp(8, 24)
}

/// Credentials shorter than this are replaced in error texts only where they stand as a whole word.
const WORD_MIN: usize = 8;

/// Placeholder credentials that local servers and their documentation use (compared ignoring case).
const PLACEHOLDERS: [&str; 18] = [
    "sk-no-key-required",
    "no-key-required",
    "ollama",
    "empty",
    "none",
    "null",
    "not-needed",
    "not-used",
    "no-key",
    "nokey",
    "dummy",
    "lm-studio",
    "lmstudio",
    "vllm",
    "token-abc123",
    "your-api-key",
    "your-api-key-here",
    "sk-placeholder",
];

static SCRUBBED: RwLock<Vec<Secret>> = RwLock::new(Vec::new());
static IN_ANSWERS: RwLock<Option<Arc<[Pattern]>>> = RwLock::new(None);

/// What is searched for in error texts and logs, per credential.
struct Secret {
    full: String,
    /// The first characters (a masked echo keeps them): 8 (empty for credentials under 12 characters).
    head: String,
    /// The last four characters (a masked echo keeps them).
    tail: String,
}

/// A real secret, as searched for in answers.
#[derive(Clone)]
struct Pattern {
    bytes: Box<[u8]>,
    /// Knuth–Morris–Pratt: `fail[i]` is the length of the longest proper prefix of `bytes[..=i]` that is
    /// also its suffix.
    fail: Box<[usize]>,
    /// The other ways a JSON encoder may write it inside a string (`\"`, `\\`, `\/`), when they differ.
    escaped: Vec<Box<[u8]>>,
    /// [`hold_from`] its length.
    hold_from: usize,
}

impl Pattern {
    fn new(secret: &str) -> Pattern {
        let bytes: Box<[u8]> = secret.as_bytes().into();
        let mut fail = vec![0; bytes.len()];
        let mut k = 0;
        for i in 1..bytes.len() {
            while k > 0 && bytes[i] != bytes[k] {
                k = fail[k - 1];
            }
            if bytes[i] == bytes[k] {
                k += 1;
            }
            fail[i] = k;
        }
        let mut escaped = Vec::new();
        let json = serde_json::to_string(secret).unwrap_or_default();
        let json = json.trim_matches('"');
        if json != secret {
            escaped.push(json.as_bytes().into());
        }
        if json.contains('/') {
            escaped.push(json.replace('/', "\\/").into_bytes().into());
        }
        Pattern {
            hold_from: hold_from(bytes.len()),
            bytes,
            fail: fail.into(),
            escaped,
        }
    }

    /// The automaton's next state: `state` bytes of the secret matched, then `b`.
    fn step(&self, mut state: usize, b: u8) -> usize {
        if state == self.bytes.len() {
            state = self.fail[state - 1];
        }
        while state > 0 && self.bytes[state] != b {
            state = self.fail[state - 1];
        }
        if self.bytes[state] == b {
            state += 1;
        }
        state
    }
}

/// How a registered credential is treated.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// Not a secret (a value local servers' documentation publishes): never searched for.
    Placeholder,
    /// Scrubbed from error texts and logs (with its masked echoes), not searched for in answers.
    Short,
    /// Also replaced in answers.
    Real,
}

fn kind(c: &str, chosen_by_operator: bool) -> Kind {
    let len = c.chars().count();
    let lower = c.to_ascii_lowercase();
    if len == 0 || (!chosen_by_operator && PLACEHOLDERS.contains(&lower.as_str())) {
        return Kind::Placeholder;
    }
    if len < ANSWER_MIN || (!chosen_by_operator && placeholder_shaped(c)) {
        Kind::Short
    } else {
        Kind::Real
    }
}

/// Whether an upstream key looks written by hand rather than generated: only lowercase letters and
/// separators, or one character making up half of its letters and digits (`sk-xxxxxxxx…`).
fn placeholder_shaped(c: &str) -> bool {
    let alnum: Vec<char> = c.chars().filter(|ch| ch.is_alphanumeric()).collect();
    let generated = c.chars().any(|ch| ch.is_ascii_digit() || ch.is_uppercase());
    if !generated {
        return true;
    }
    let most = alnum
        .iter()
        .map(|a| alnum.iter().filter(|b| *b == a).count())
        .max()
        .unwrap_or(0);
    most * 2 >= alnum.len()
}

/// Registers upstream credentials (adds to those registered before); public placeholders are left out.
pub fn register<'a>(credentials: impl IntoIterator<Item = &'a str>) {
    for c in credentials {
        add(c, kind(c, false));
    }
}

/// Registers secrets the operator chose (the admin token, the store's password): never placeholders, so
/// always scrubbed from error texts and logs; searched for in answers from [`ANSWER_MIN`] characters on.
pub fn register_own<'a>(secrets: impl IntoIterator<Item = &'a str>) {
    for c in secrets {
        add(c, kind(c, true));
    }
}

fn add(c: &str, kind: Kind) {
    if kind == Kind::Placeholder {
        return;
    }
    let mut set = crate::util::write_lock(&SCRUBBED);
    if set.iter().any(|s| s.full == c) {
        return;
    }
    let chars: Vec<char> = c.chars().collect();
    // A masked echo keeps a key's first characters, or its last four: 8 of them where the key has 12 or
    // more, fewer (but never more than it leaves hidden) where it is shorter.
    let (head, tail) = if chars.len() >= WORD_MIN {
        let head = chars.len().saturating_sub(4).min(8);
        (
            chars[..head].iter().collect(),
            chars[chars.len() - 4..].iter().collect(),
        )
    } else {
        (String::new(), String::new())
    };
    set.push(Secret {
        full: c.to_string(),
        head,
        tail,
    });
    if kind == Kind::Real {
        let mut answers = crate::util::write_lock(&IN_ANSWERS);
        let mut all = answers.as_deref().unwrap_or(&[]).to_vec();
        all.push(Pattern::new(c));
        *answers = Some(all.into());
    }
}

/// The real secrets searched for in answers, if any.
fn answer_patterns() -> Option<Arc<[Pattern]>> {
    crate::util::read_lock(&IN_ANSWERS).clone()
}

/// `text` with every registered credential, and every word that looks like a masked echo of one, replaced
/// by `[redacted]`: for error texts, records and log lines, never answers. Borrowed when there was nothing
/// to replace.
pub fn scrub(text: &str) -> Cow<'_, str> {
    let set = crate::util::read_lock(&SCRUBBED);
    if set.is_empty() {
        return Cow::Borrowed(text);
    }
    let suspicious = set.iter().any(|s| {
        text.contains(&s.full)
            || (!s.tail.is_empty() && (text.contains(&s.tail) || text.contains(&s.head)))
    });
    if !suspicious {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for s in set.iter() {
        if s.full.chars().count() >= WORD_MIN && out.contains(&s.full) {
            out = out.replace(&s.full, REDACTED);
        }
    }
    // Masked echoes: a word (between separators) that starts like a key or ends with its last characters;
    // and a short credential standing as a word.
    let is_sep = |c: char| c.is_whitespace() || "\"'`,;:()[]{}<>=".contains(c);
    let mut result = String::with_capacity(out.len());
    let mut word = String::new();
    let flush = |word: &mut String, result: &mut String| {
        let bare = word.trim_end_matches(['.', '!', '?']);
        let masked = set.iter().any(|s| {
            bare == s.full
                || (!s.tail.is_empty()
                    && bare.len() >= 8
                    && (bare.ends_with(&s.tail) || bare.starts_with(&s.head)))
        });
        if masked {
            result.push_str(REDACTED);
            result.push_str(&word[bare.len()..]);
        } else {
            result.push_str(word);
        }
        word.clear();
    };
    for c in out.chars() {
        if is_sep(c) {
            flush(&mut word, &mut result);
            result.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut result);
    Cow::Owned(result)
}

/// [`scrub`] into an owned string.
pub fn scrubbed(text: &str) -> String {
    scrub(text).into_owned()
}

/// `bytes` (an answer going to a client) with every real secret, as written or as a JSON string escapes
/// it, replaced by `[redacted]`; nothing else is touched. Borrowed when there was none.
pub fn redact(bytes: &[u8]) -> Cow<'_, [u8]> {
    match answer_patterns() {
        Some(p) => redact_with(&p, bytes),
        None => Cow::Borrowed(bytes),
    }
}

fn redact_with<'b>(patterns: &[Pattern], bytes: &'b [u8]) -> Cow<'b, [u8]> {
    let mut out = Cow::Borrowed(bytes);
    for p in patterns {
        for needle in std::iter::once(&p.bytes).chain(&p.escaped) {
            if let Some(at) = find(&out, needle) {
                out = Cow::Owned(replace_from(&out, needle, at));
            }
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut from = 0;
    while let Some(i) = hay.get(from..)?.iter().position(|&b| b == first) {
        let at = from + i;
        if hay[at..].starts_with(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// `hay` with every `needle` from `at` on (the first found there) replaced.
fn replace_from(hay: &[u8], needle: &[u8], mut at: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut done = 0;
    loop {
        out.extend_from_slice(&hay[done..at]);
        out.extend_from_slice(REDACTED.as_bytes());
        done = at + needle.len();
        match find(&hay[done..], needle) {
            Some(i) => at = done + i,
            None => break,
        }
    }
    out.extend_from_slice(&hay[done..]);
    out
}

/// A change to an event's text (byte offsets into the text the event added): `start..end` removed and, when
/// `mark`, `[redacted]` put in its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextEdit {
    /// Where the removed bytes begin, as an offset into the event's text.
    pub start: usize,
    /// Where the removed bytes end (exclusive).
    pub end: usize,
    /// Put `[redacted]` at `start`: set on the first edit of a secret, where its first held part began.
    pub mark: bool,
}

/// `fragment`, which begins `offset` bytes into its event's text, with the edits that fall in it applied;
/// `None` when none does. (An event whose text is one string passes offset 0.)
pub fn apply(fragment: &str, offset: usize, edits: &[TextEdit]) -> Option<String> {
    let end = offset + fragment.len();
    let mut out: Option<String> = None;
    let mut done = 0;
    for e in edits {
        let (s, t) = (e.start.max(offset), e.end.min(end));
        if s >= t {
            continue;
        }
        let o = out.get_or_insert_with(|| String::with_capacity(fragment.len()));
        o.push_str(&fragment[done..s - offset]);
        // The mark goes where the edit starts, in the fragment holding its first byte.
        if e.mark && e.start >= offset {
            o.push_str(REDACTED);
        }
        done = t - offset;
    }
    let mut o = out?;
    o.push_str(&fragment[done..]);
    Some(o)
}

/// Where one held event's text lies in the stream's text, and what is to change in it.
struct Held<E> {
    event: E,
    start: usize,
    len: usize,
    edits: Vec<TextEdit>,
}

/// Finds real secrets in a stream's text, split across events or not, and holds events back while one may
/// be arriving (see the module documentation). `E` is whatever the writer sends per event.
pub struct Redactor<E> {
    patterns: Option<Arc<[Pattern]>>,
    /// Per pattern: how many of its first bytes the text read so far ends with.
    states: Vec<usize>,
    /// Bytes of text read so far.
    read: usize,
    /// Events not yet sent, in order.
    queue: VecDeque<Held<E>>,
    /// A partial match of at least its secret's `hold_from` bytes is open: nothing may go out.
    holding: bool,
    /// The event last read, until it is handed over with [`Redactor::hold`].
    current: Held<()>,
}

impl<E> Default for Redactor<E> {
    fn default() -> Self {
        Self::with(answer_patterns())
    }
}

impl<E> Redactor<E> {
    /// A redactor for the real secrets registered now.
    pub fn new() -> Self {
        Self::default()
    }

    fn with(patterns: Option<Arc<[Pattern]>>) -> Self {
        let n = patterns.as_ref().map_or(0, |p| p.len());
        Redactor {
            patterns,
            states: vec![0; n],
            read: 0,
            queue: VecDeque::new(),
            holding: false,
            current: Held {
                event: (),
                start: 0,
                len: 0,
                edits: Vec::new(),
            },
        }
    }

    /// Reads the text the next event adds. `true`: that event goes out now, as it is. `false`: hand it over
    /// with [`Redactor::hold`], then send what [`Redactor::ready`] gives, in order.
    pub fn read(&mut self, text: &str) -> bool {
        let Some(patterns) = self.patterns.as_deref() else {
            return true;
        };
        self.current.start = self.read;
        self.current.len = text.len();
        for (i, &b) in text.as_bytes().iter().enumerate() {
            let mut found = None;
            for (p, state) in patterns.iter().zip(self.states.iter_mut()) {
                *state = p.step(*state, b);
                if *state == p.bytes.len() {
                    found = Some(p.bytes.len());
                    break;
                }
            }
            if let Some(len) = found {
                let end = self.read + i + 1;
                cut(&mut self.queue, &mut self.current, end - len, end);
                self.states.iter_mut().for_each(|s| *s = 0);
            }
        }
        self.read += text.len();
        self.holding = patterns
            .iter()
            .zip(&self.states)
            .any(|(p, &s)| s >= p.hold_from);
        !self.holding && self.queue.is_empty() && self.current.edits.is_empty()
    }

    /// Takes the event [`Redactor::read`] refused to pass.
    pub fn hold(&mut self, event: E) {
        self.queue.push_back(Held {
            event,
            start: self.current.start,
            len: self.current.len,
            edits: std::mem::take(&mut self.current.edits),
        });
    }

    /// The next event that may go out, with the changes to make to its text (none: as it is).
    pub fn ready(&mut self) -> Option<(E, Vec<TextEdit>)> {
        if self.holding {
            return None;
        }
        self.queue.pop_front().map(|h| (h.event, h.edits))
    }

    /// The stream ends (or is cut): everything held may go, as it is.
    pub fn release(&mut self) {
        self.holding = false;
        self.states.iter_mut().for_each(|s| *s = 0);
    }

    /// [`redact`] with this stream's secrets (no lock taken).
    pub fn redact<'b>(&self, bytes: &'b [u8]) -> Cow<'b, [u8]> {
        match &self.patterns {
            Some(p) => redact_with(p, bytes),
            None => Cow::Borrowed(bytes),
        }
    }
}

/// A secret was found at `start..end` of the stream's text: cut from the events still here (held, and the
/// one just read), `[redacted]` put in the first of them.
fn cut<E>(queue: &mut VecDeque<Held<E>>, current: &mut Held<()>, start: usize, end: usize) {
    let mut mark = true;
    let spans = queue
        .iter_mut()
        .map(|h| (h.start, h.len, &mut h.edits))
        .chain(std::iter::once((
            current.start,
            current.len,
            &mut current.edits,
        )));
    for (at, len, edits) in spans {
        let (s, e) = (start.max(at), end.min(at + len));
        if s < e {
            edits.push(TextEdit {
                start: s - at,
                end: e - at,
                mark,
            });
            mark = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123wxyz";

    #[test]
    fn credentials_and_their_masked_echoes_are_scrubbed() {
        register([KEY]);
        assert_eq!(scrub("nothing here"), "nothing here");
        assert!(matches!(scrub("nothing here"), Cow::Borrowed(_)));
        let text = format!("bad key {KEY}, sorry");
        assert_eq!(scrub(&text), "bad key [redacted], sorry");
        let masked =
            scrub("Incorrect API key provided: sk-proj-********************wxyz. You can find");
        assert_eq!(
            masked,
            "Incorrect API key provided: [redacted]. You can find"
        );
        let head = scrub("key \"sk-proj-AB...\" invalid");
        assert!(!head.contains("sk-proj-AB"), "{head}");
        // Short words that happen to end like the key are left alone.
        assert_eq!(scrub("wxyz"), "wxyz");
        // An answer is searched for the exact key only, never for what merely looks like it.
        let answer = format!("{{\"text\":\"ends in wxyz: sk-proj-**wxyz and {KEY}\"}}");
        assert_eq!(
            String::from_utf8_lossy(&redact(answer.as_bytes())),
            "{\"text\":\"ends in wxyz: sk-proj-**wxyz and [redacted]\"}"
        );
    }

    #[test]
    fn placeholders_are_no_secrets() {
        for p in [
            "sk-no-key-required",
            "ollama",
            "EMPTY",
            "none",
            "not-needed",
            "no-key",
            "dummy",
            "lm-studio",
            "your-api-key-here",
        ] {
            assert_eq!(kind(p, false), Kind::Placeholder, "{p}");
        }
        // Written by hand, or short: scrubbed from error texts and logs, never searched for in answers.
        for short in [
            "sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "sk-XXXXXXXXXXXXXXXXXXXXXXXXXXXX",
            "sk-ant-api03-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "upstream-secret",
            "short1A",
            "Abc123def4",
        ] {
            assert_eq!(kind(short, false), Kind::Short, "{short}");
        }
        for real in [KEY, "sk-upstream-secret-0123456789", "0f3a9c2b7e1d4a6f"] {
            assert_eq!(kind(real, false), Kind::Real, "{real}");
        }
        // The operator's own secrets are secrets whatever they look like; their length decides where.
        assert_eq!(kind("correcthorsebattery", true), Kind::Real);
        assert_eq!(kind("hunter2", true), Kind::Short);
        assert_eq!(kind("", true), Kind::Placeholder);
    }

    /// Third review, 11: an upstream that echoes a credential shorter than 16 characters in an error text
    /// (or a masked echo of it) is scrubbed again, whatever the credential's length or look; a short one
    /// only as a whole word, so words it is part of stay.
    #[test]
    fn short_credentials_are_scrubbed_from_error_texts() {
        register(["upstream-secret", "k3Y9"]);
        assert_eq!(
            scrub("headers seen: authorization=Bearer upstream-secret"),
            "headers seen: authorization=Bearer [redacted]"
        );
        assert_eq!(
            scrub("key 'upstr****cret' is invalid"),
            "key '[redacted]' is invalid"
        );
        assert_eq!(
            scrub("Bearer k3Y9 refused; k3Y9x is another"),
            "Bearer [redacted] refused; k3Y9x is another"
        );
        // Answers keep their rule: only exact real secrets.
        let said = b"the upstream-secret of k3Y9";
        assert_eq!(&redact(said)[..], &said[..]);
    }

    /// A redactor for `secrets` (whatever is registered globally by other tests).
    fn redactor(secrets: &[&str]) -> Redactor<usize> {
        let p: Vec<Pattern> = secrets.iter().map(|s| Pattern::new(s)).collect();
        Redactor::with(Some(p.into()))
    }

    /// Feeds `events` (their texts) through a redactor and returns what the client receives, event by event
    /// (in order), after the stream's end.
    fn stream(r: &mut Redactor<usize>, events: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        let mut send = |i: usize, edits: &[TextEdit]| {
            out.push(apply(events[i], 0, edits).unwrap_or_else(|| events[i].to_string()));
        };
        for (i, text) in events.iter().enumerate() {
            if r.read(text) {
                send(i, &[]);
                continue;
            }
            r.hold(i);
            while let Some((j, edits)) = r.ready() {
                send(j, &edits);
            }
        }
        r.release();
        while let Some((j, edits)) = r.ready() {
            send(j, &edits);
        }
        out
    }

    #[test]
    fn ordinary_text_passes_at_once() {
        let mut r = redactor(&[KEY]);
        for text in ["required", "inspired", "sk-", "wxyz", "sk-proj", "ollama"] {
            assert!(r.read(text), "{text} was held");
        }
        assert!(r.queue.is_empty());
        // No secret registered: nothing is ever held.
        let mut none: Redactor<usize> = Redactor::with(None);
        assert!(none.read(KEY));
    }

    #[test]
    fn a_secret_in_one_event_is_replaced() {
        let mut r = redactor(&[KEY]);
        let got = stream(&mut r, &["a ", &format!("key {KEY} here"), " end"]);
        assert_eq!(got, ["a ", "key [redacted] here", " end"]);
    }

    #[test]
    fn a_secret_split_across_events_never_arrives() {
        for cuts in [
            vec![20],
            vec![8],
            vec![1],
            vec![39],
            vec![3, 20],
            vec![10, 11, 30],
        ] {
            let mut parts = Vec::new();
            let text = format!("before {KEY} after");
            let mut from = 0;
            for c in &cuts {
                parts.push(text[from..7 + c].to_string());
                from = 7 + c;
            }
            parts.push(text[from..].to_string());
            let events: Vec<&str> = parts.iter().map(String::as_str).collect();
            let mut r = redactor(&[KEY]);
            let got = stream(&mut r, &events).concat();
            assert!(!got.contains(KEY), "{cuts:?}: {got}");
            assert!(got.starts_with("before ") && got.ends_with("[redacted] after"));
            // At most the first hold_from - 1 bytes left before the secret was recognised.
            let leaked = got.len() - "before [redacted] after".len();
            assert!(leaked < hold_from(KEY.len()), "{cuts:?}: {got}");
        }
    }

    #[test]
    fn held_events_go_out_in_order_when_the_match_breaks_or_the_stream_ends() {
        let mut r = redactor(&[KEY]);
        assert!(
            r.read("use sk-proj-ABCDEFGHIJKL"),
            "20 bytes of 42: not yet held"
        );
        assert!(!r.read("M"));
        r.hold(0);
        assert!(r.ready().is_none(), "held while it may be the key");
        assert!(!r.read(""), "a text-less event waits behind");
        r.hold(1);
        assert!(r.ready().is_none());
        assert!(!r.read("-not the key"));
        r.hold(2);
        let order: Vec<(usize, Vec<TextEdit>)> = std::iter::from_fn(|| r.ready()).collect();
        assert_eq!(order, [(0, vec![]), (1, vec![]), (2, vec![])]);
        assert!(r.read("next"));
        // The stream ends inside a partial match: the held text goes out as written.
        assert!(!r.read("sk-proj-ABCDEFGHIJKLMN"));
        r.hold(3);
        r.release();
        assert_eq!(r.ready(), Some((3, vec![])));
    }

    /// A hold is seen by the client (an event arrives late): a right guess of the key's next byte after its
    /// public start must look like a wrong one, until half the key is written.
    #[test]
    fn a_hold_says_nothing_until_half_the_key_is_written() {
        let hold = hold_from(KEY.len());
        for n in 9..hold {
            let (right, wrong) = (&KEY[..n], format!("{}#", &KEY[..n - 1]));
            for guess in [right, wrong.as_str()] {
                let mut r = redactor(&[KEY]);
                assert!(r.read("say "), "{guess}");
                assert!(r.read(guess), "{n}: {guess} is held");
            }
        }
        let mut r = redactor(&[KEY]);
        assert!(!r.read(&KEY[..hold]));
        assert_eq!((hold_from(16), hold_from(42), hold_from(108)), (8, 21, 24));
    }

    #[test]
    fn edits_span_fragments_of_one_event() {
        // An event whose text is two fragments ("ab" + KEY-prefix, KEY-rest + "cd").
        let (a, b) = ("ab", &KEY[..10]);
        let first = format!("{a}{b}");
        let second = format!("{}cd", &KEY[10..]);
        let text = format!("{first}{second}");
        let mut r = redactor(&[KEY]);
        assert!(!r.read(&text));
        r.hold(0);
        let (_, edits) = r.ready().unwrap();
        assert_eq!(apply(&first, 0, &edits).as_deref(), Some("ab[redacted]"));
        assert_eq!(apply(&second, first.len(), &edits).as_deref(), Some("cd"));
        assert_eq!(apply("untouched", 0, &[]), None);
    }

    #[test]
    fn escaped_forms_are_found_in_raw_bodies() {
        let key = "abc/DEF\"123/ghi/JKL";
        let p = [Pattern::new(key)];
        let json = serde_json::to_string(key).unwrap();
        let got = redact_with(&p, json.as_bytes());
        assert_eq!(&*got, b"\"[redacted]\"");
        let slashed = json.replace('/', "\\/");
        assert_eq!(&*redact_with(&p, slashed.as_bytes()), b"\"[redacted]\"");
    }

    #[test]
    fn overlapping_prefixes_are_followed() {
        // The automaton backs off to the longest border, so a repeated start does not hide the key.
        let key = "abababXY12cdefgh";
        let mut r = redactor(&[key]);
        let got = stream(&mut r, &["abababab", "abXY12cd", "efgh!"]).concat();
        // The key began 4 bytes before the first event ended (under its hold_from, 8: that event went out).
        assert_eq!(got, "abababab[redacted]!");
        assert!(!got.contains(key));
    }
}
