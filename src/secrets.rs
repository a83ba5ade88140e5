//! Upstream credentials never leave: whatever text reaches a client, a usage record, the console or a log
//! line is scrubbed of every configured upstream credential, and of the masked forms upstreams echo back
//! (`sk-proj-****…abcd`: a word that starts like the key or ends with its last four characters).
//!
//! The set of credentials is registered once when the gateway starts ([`register`]); scrubbing is a few
//! substring searches per text, done only on error texts and log lines, never on answers.

use std::borrow::Cow;
use std::sync::RwLock;

static SECRETS: RwLock<Vec<Secret>> = RwLock::new(Vec::new());

/// What is searched for, per credential.
struct Secret {
    full: String,
    /// The first characters (a masked echo keeps them): at least 8.
    head: String,
    /// The last four characters (a masked echo keeps them).
    tail: String,
}

/// What replaces a credential.
pub const REDACTED: &str = "[redacted]";

/// Registers the credentials to scrub (adds to those registered before). Credentials shorter than 8
/// characters are scrubbed whole only.
pub fn register<'a>(credentials: impl IntoIterator<Item = &'a str>) {
    let mut set = match SECRETS.write() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    for c in credentials {
        if c.is_empty() || set.iter().any(|s| s.full == c) {
            continue;
        }
        let chars: Vec<char> = c.chars().collect();
        let (head, tail) = if chars.len() >= 12 {
            (
                chars[..8].iter().collect(),
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
    }
}

/// Whether `bytes` may hold a credential or a masked echo of one (cheap; no allocation): only then does
/// relayed data need [`scrub`].
pub fn suspicious(bytes: &[u8]) -> bool {
    let set = match SECRETS.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let has = |needle: &str| {
        !needle.is_empty() && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
    };
    set.iter()
        .any(|s| has(&s.full) || has(&s.tail) || has(&s.head))
}

/// `text` with every registered credential, and every word that looks like a masked echo of one, replaced
/// by `[redacted]`. Borrowed when there was nothing to replace.
pub fn scrub(text: &str) -> Cow<'_, str> {
    let set = match SECRETS.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
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
        if out.contains(&s.full) {
            out = out.replace(&s.full, REDACTED);
        }
    }
    // Masked echoes: a word (between separators) that starts like a key or ends with its last characters.
    let is_sep = |c: char| c.is_whitespace() || "\"'`,;:()[]{}<>=".contains(c);
    let mut result = String::with_capacity(out.len());
    let mut word = String::new();
    let flush = |word: &mut String, result: &mut String| {
        let bare = word.trim_end_matches(['.', '!', '?']);
        let masked = set.iter().any(|s| {
            !s.tail.is_empty()
                && bare.len() >= 8
                && (bare.ends_with(&s.tail) || bare.starts_with(&s.head))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_their_masked_echoes_are_scrubbed() {
        register(["sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123wxyz"]);
        assert_eq!(scrub("nothing here"), "nothing here");
        assert!(matches!(scrub("nothing here"), Cow::Borrowed(_)));
        let full = scrub("bad key sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123wxyz, sorry");
        assert_eq!(full, "bad key [redacted], sorry");
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
    }
}
