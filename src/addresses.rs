//! Internal addresses: where the gateway's upstreams and its shared store are (host and port of each base
//! URL, of each address discovery probes, of the store's URL), registered as they become known, and
//! [`hide`], which takes them out of what reaches clients and anyone without the admin token: every error
//! text a client is sent (`protocol/error.rs`, the one place error bodies and in-stream error events are
//! written), `/readyz`, `/metrics` when it needs no token, the model list. The operator still sees them in
//! logs and, with the admin token, in the console's views.
//!
//! Each address becomes `[internal address N]`, numbered in the order they were registered, so two hidden
//! addresses stay apart (a metric label per upstream) without saying where either is.
//!
//! The identifiers of the operator's upstream accounts that vendors write into their error texts go the same
//! way ([`accounts`], part of [`hide`]): OpenAI organization and project ids (`org-…`, `proj_…`), Google
//! project numbers and ids (`projects/987654321`, `project_number:987654321`), AWS account ids (twelve
//! digits, in an ARN or alone) and Azure resource names (`RESOURCE.openai.azure.com`, `subscriptions/…`,
//! `resourceGroups/…`); each becomes `[redacted]`, the rest of the vendor's message stays.

use std::borrow::Cow;
use std::sync::RwLock;

/// Registered addresses (`host[:port]`, lower case), in registration order.
static ADDRESSES: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Registers the address of `url` (`scheme://[user@]host[:port]/...`, or a bare `host:port`).
pub(crate) fn register(url: &str) {
    let Some(authority) = authority(url) else {
        return;
    };
    let mut known = crate::util::write_lock(&ADDRESSES);
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
pub(crate) fn hide(text: &str) -> Cow<'_, str> {
    match hide_addresses(text) {
        Cow::Borrowed(t) => accounts(t),
        Cow::Owned(t) => Cow::Owned(accounts(&t).into_owned()),
    }
}

/// What replaces an account identifier.
const REDACTED: &str = "[redacted]";

/// Azure host names whose first label is the operator's resource.
const AZURE_HOSTS: [&str; 4] = [
    ".openai.azure.com",
    ".cognitiveservices.azure.com",
    ".services.ai.azure.com",
    ".azure-api.net",
];

/// Path segments after which the next one names the operator's account (compared ignoring case).
const ACCOUNT_SEGMENTS: [&str; 4] = [
    "projects",
    "subscriptions",
    "resourcegroups",
    "organizations",
];

/// Prefixes of identifiers that name an account (`project_number:123`).
const ACCOUNT_PREFIXES: [&str; 3] = ["project_number:", "project_number=", "project:"];

/// `text` with the identifiers of the operator's upstream accounts replaced (see the module documentation).
pub(crate) fn accounts(text: &str) -> Cow<'_, str> {
    let sep = |c: char| c.is_whitespace() || "\"'`,;()[]{}<>|".contains(c);
    let mut out = String::new();
    let mut copied = 0;
    let mut start = None;
    for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
        match (sep(c), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                start = None;
                if let Some(w) = account_word(&text[s..i]) {
                    out.push_str(&text[copied..s]);
                    out.push_str(&w);
                    copied = i;
                }
            }
            _ => {}
        }
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// One word (no spaces or quotes in it) with its account identifiers replaced; None: it has none.
fn account_word(word: &str) -> Option<String> {
    let lower = word.to_ascii_lowercase();
    let mut out = word.to_string();
    let mut changed = false;
    // `RESOURCE.openai.azure.com`: the labels before the suffix.
    for host in AZURE_HOSTS {
        if let Some(at) = lower.find(host) {
            let from = lower[..at].rfind(['/', '@', ':']).map_or(0, |i| i + 1);
            if from < at {
                out.replace_range(from..at, REDACTED);
                changed = true;
                break;
            }
        }
    }
    // `projects/123/...`, `subscriptions/<id>`, `resourceGroups/<name>`.
    let segments: Vec<&str> = out.split('/').collect();
    if segments.len() > 1 {
        let mut rebuilt: Vec<String> = Vec::with_capacity(segments.len());
        for (i, seg) in segments.iter().enumerate() {
            let after_account = i > 0
                && ACCOUNT_SEGMENTS.contains(&segments[i - 1].to_ascii_lowercase().as_str())
                && !seg.is_empty();
            if after_account {
                // Sentence punctuation after the id stays.
                let bare = seg.trim_end_matches(['.', ':', '!', '?']);
                rebuilt.push(format!("{REDACTED}{}", &seg[bare.len()..]));
                changed = true;
            } else {
                rebuilt.push(seg.to_string());
            }
        }
        out = rebuilt.join("/");
    }
    let lower = out.to_ascii_lowercase();
    for prefix in ACCOUNT_PREFIXES {
        if let Some(at) = lower.find(prefix) {
            let from = at + prefix.len();
            let len = out[from..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(out.len() - from);
            if len > 0 {
                out.replace_range(from..from + len, REDACTED);
                changed = true;
            }
        }
    }
    // `org-…` and `proj_…`: an identifier of at least eight letters and digits after its prefix.
    for prefix in ["org-", "proj_"] {
        let mut from = 0;
        while let Some(at) = out[from..].find(prefix).map(|i| from + i) {
            let boundary = at == 0 || !out.as_bytes()[at - 1].is_ascii_alphanumeric();
            let id = at + prefix.len();
            let len = out[id..]
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(out.len() - id);
            if boundary && len >= 8 {
                out.replace_range(id..id + len, REDACTED);
                changed = true;
            }
            from = id;
        }
    }
    // AWS account ids: a run of exactly twelve digits.
    let bytes = out.as_bytes().to_vec();
    let mut i = 0;
    let mut spans = Vec::new();
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let run = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
            let alone = (i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
                && bytes
                    .get(i + run)
                    .is_none_or(|b| !b.is_ascii_alphanumeric());
            if run == 12 && alone {
                spans.push(i);
            }
            i += run;
        } else {
            i += 1;
        }
    }
    for at in spans.into_iter().rev() {
        out.replace_range(at..at + 12, REDACTED);
        changed = true;
    }
    changed.then_some(out)
}

/// `text` with every registered address (and the URL around it) replaced.
fn hide_addresses(text: &str) -> Cow<'_, str> {
    let known = crate::util::read_lock(&ADDRESSES);
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

    /// Third review, 8: what names the operator's accounts in a vendor's error goes, the message stays.
    #[test]
    fn account_identifiers_are_replaced() {
        let cases = [
            (
                "Rate limit reached for gpt-4o in organization org-AbCdEf0123456789xYz on tokens per min (TPM).",
                "Rate limit reached for gpt-4o in organization org-[redacted] on tokens per min (TPM).",
            ),
            (
                "You exceeded your quota for project proj_9aZk2LmN4pQrS7tU (usage tier 1).",
                "You exceeded your quota for project proj_[redacted] (usage tier 1).",
            ),
            (
                "Quota exceeded for consumer 'project_number:987654321012' on service generativelanguage.",
                "Quota exceeded for consumer 'project_number:[redacted]' on service generativelanguage.",
            ),
            (
                "Permission denied on resource projects/987654321/locations/us-central1.",
                "Permission denied on resource projects/[redacted]/locations/us-central1.",
            ),
            (
                "User: arn:aws:iam::123456789012:user/gw is not authorized to perform: bedrock:InvokeModel",
                "User: arn:aws:iam::[redacted]:user/gw is not authorized to perform: bedrock:InvokeModel",
            ),
            (
                "Resource https://acme-prod-eastus.openai.azure.com/openai/deployments/gpt4 not found; see \
                 /subscriptions/0f1e2d3c-aaaa-bbbb-cccc-1234567890ab/resourceGroups/rg-ai/providers/x.",
                "Resource https://[redacted].openai.azure.com/openai/deployments/gpt4 not found; see \
                 /subscriptions/[redacted]/resourceGroups/[redacted]/providers/x.",
            ),
        ];
        for (said, shown) in cases {
            assert_eq!(accounts(said), shown);
        }
        for same in [
            "org-wide settings",
            "an org- prefix",
            "max_tokens is 4096, you asked for 1234567890123 tokens",
            "projects are not supported",
            "nothing here",
        ] {
            assert_eq!(accounts(same), same);
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
