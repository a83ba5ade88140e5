//! Internal addresses: where the gateway's upstreams and its shared store are (host and port of each base
//! URL, of each address discovery probes, of the store's URL), registered as they become known, and
//! [`hide`], which takes them out of what reaches clients and anyone without the admin token: every error
//! text a client is sent (`protocol/error.rs`, the one place error bodies and in-stream error events are
//! written), `/readyz`, `/metrics` when it needs no token, the model list. The operator still sees them in
//! logs and, with the admin token, in the console's views.
//!
//! Each address becomes `[internal address N]`, numbered in the order they were registered, so two hidden
//! addresses stay apart (a metric label per upstream) without saying where either is.

use std::borrow::Cow;
use std::sync::RwLock;

/// Registered addresses (`host[:port]`, lower case), in registration order.
static ADDRESSES: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Registers the address of `url` (`scheme://[user@]host[:port]/...`, or a bare `host:port`).
pub fn register(url: &str) {
    let Some(authority) = authority(url) else {
        return;
    };
    let mut known = match ADDRESSES.write() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    if !known.contains(&authority) {
        known.push(authority);
    }
}

/// The `host[:port]` of a URL, lower case; `None` when it has none.
fn authority(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let auth = &rest[..end];
    let auth = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
    let auth = auth.trim();
    (!auth.is_empty() && !auth.contains(char::is_whitespace)).then(|| auth.to_ascii_lowercase())
}

/// `text` with every registered address (and the URL around it: scheme, user, path) replaced by
/// `[internal address N]`.
pub fn hide(text: &str) -> Cow<'_, str> {
    let known = match ADDRESSES.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    if known.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out: Option<String> = None;
    // Longer addresses first, so `host:8080` is not taken for `host` followed by a port.
    let mut order: Vec<(usize, &String)> = known.iter().enumerate().collect();
    order.sort_by_key(|(_, a)| std::cmp::Reverse(a.len()));
    for (n, address) in order {
        let current = out.as_deref().unwrap_or(text);
        if let Some(hidden) = hide_one(current, address, n + 1) {
            out = Some(hidden);
        }
    }
    match out {
        Some(s) => Cow::Owned(s),
        None => Cow::Borrowed(text),
    }
}

/// `text` with each occurrence of `address` replaced; `None` when there is none.
fn hide_one(text: &str, address: &str, n: usize) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = lower[from..].find(address) {
        let start = from + found;
        let mut end = start + address.len();
        from = end;
        if !bounded(bytes, start, end) {
            continue;
        }
        // A host without a port also hides the port it is written with.
        if !address.contains(':') && bytes.get(end) == Some(&b':') {
            let digits = bytes[end + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if digits > 0 {
                end += 1 + digits;
            }
        }
        let (start, end) = url_around(text, start, end);
        if start < copied {
            continue;
        }
        out.push_str(&text[copied..start]);
        out.push_str(&format!("[internal address {n}]"));
        copied = end;
        from = end;
    }
    (copied > 0).then(|| {
        out.push_str(&text[copied..]);
        out
    })
}

/// Whether `start..end` is a whole host name or address, not part of a longer one.
fn bounded(bytes: &[u8], start: usize, end: usize) -> bool {
    let name = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_');
    let before = start.checked_sub(1).map(|i| bytes[i]);
    if before.is_some_and(|b| name(b) || b == b'.') {
        return false;
    }
    match bytes.get(end) {
        Some(&b) if name(b) => false,
        // A longer name.
        Some(b'.') => !bytes.get(end + 1).is_some_and(u8::is_ascii_alphanumeric),
        _ => true,
    }
}

/// The span of the URL an address at `start..end` stands in: its `scheme://user@` before and its path,
/// query and fragment after (an address standing alone is its own span).
fn url_around(text: &str, start: usize, end: usize) -> (usize, usize) {
    let stop = |c: char| c.is_whitespace() || "\"'`<>()[]{},;|".contains(c);
    let token_start = text[..start].rfind(stop).map_or(0, |i| i + 1);
    let before = &text[token_start..start];
    let mut from = start;
    if let Some(k) = before.find("://") {
        let userinfo = &before[k + 3..];
        if userinfo.is_empty() || userinfo.ends_with('@') {
            let scheme_len = before[..k]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || "+-.".contains(*c))
                .count();
            from = token_start + k - scheme_len;
        }
    }
    let mut to = end;
    if from < start || text[end..].starts_with('/') {
        to = text[end..].find(stop).map_or(text.len(), |i| end + i);
        // Sentence punctuation after a URL is not part of it.
        while to > end && text[..to].ends_with(['.', ':', '!', '?']) {
            to -= 1;
        }
    }
    (from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_their_urls_are_hidden() {
        register("redis://127.0.0.1:46379/0");
        register("http://10.1.2.3:9201/v1");
        register("https://User:pw@Upstream.Example:8443/v1");
        let n = |a: &str| {
            let known = ADDRESSES.read().unwrap();
            known.iter().position(|k| k == a).unwrap() + 1
        };
        let (r, u, e) = (
            n("127.0.0.1:46379"),
            n("10.1.2.3:9201"),
            n("upstream.example:8443"),
        );
        assert_eq!(
            hide("The store (Redis at redis://127.0.0.1:46379) is not answering."),
            format!("The store (Redis at [internal address {r}]) is not answering.")
        );
        assert_eq!(
            hide("upstream `local@10.1.2.3:9201` unreachable: http://10.1.2.3:9201/v1/chat/completions."),
            format!("upstream `local@[internal address {u}]` unreachable: [internal address {u}].")
        );
        assert_eq!(
            hide("error sending to https://upstream.example:8443/v1?x=1 now"),
            format!("error sending to [internal address {e}] now")
        );
        // Case does not matter; longer ports, other hosts and other numbers stay.
        assert_eq!(
            hide("UPSTREAM.EXAMPLE:8443"),
            format!("[internal address {e}]")
        );
        for same in [
            "127.0.0.1:463790",
            "127.0.0.1:4637",
            "10.1.2.3:92010",
            "110.1.2.3:9201",
            "127.0.0.1 port 46379",
            "nothing here",
        ] {
            assert_eq!(hide(same), same);
        }
    }

    #[test]
    fn authorities() {
        assert_eq!(authority("http://a.b:1/v1").as_deref(), Some("a.b:1"));
        assert_eq!(authority("redis://u@H:2/0").as_deref(), Some("h:2"));
        assert_eq!(authority("h:3").as_deref(), Some("h:3"));
        assert_eq!(authority("http:///x"), None);
        assert_eq!(authority(""), None);
    }
}
