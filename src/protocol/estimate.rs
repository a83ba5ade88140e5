//! Usage estimates, in one place: what tollgate counts when an upstream reports no usage (or a stream breaks
//! before it does), and what admission reserves before any decoding.

use super::canon::{Part, Request, Response, Usage};

/// An estimate of how many tokens a BPE tokenizer would make of `text`: each run of letters or digits
/// costs one token per started 4 characters, every other visible character one token. Deterministic; used
/// where an upstream reports no usage (and by the mock model).
pub fn tokens(text: &str) -> u64 {
    let mut tokens = 0u64;
    let mut run = 0u64;
    for c in text.chars() {
        if c.is_alphanumeric() {
            run += 1;
        } else {
            tokens += run.div_ceil(4);
            run = 0;
            if !c.is_whitespace() {
                tokens += 1;
            }
        }
    }
    tokens + run.div_ceil(4)
}

/// The input of a request estimated from its raw body before any decoding: about four bytes of JSON per
/// token, generous for text (admission reserves with it).
pub fn input_from_body(body_len: usize) -> u64 {
    (body_len as u64 / 4).max(1)
}

/// The one rule for the usage of a stream, on every path (passthrough, translation, the mock): a stream
/// that completed with a usage report is billed as reported; one that broke, or completed without a
/// report, counts the reported part and tops it up with what was produced (output estimated from the
/// text, input from the request). Returns the usage and whether any of it is an estimate.
pub fn stream_usage(
    reported: Option<Usage>,
    completed: bool,
    produced: &str,
    input_estimate: u64,
) -> (Usage, bool) {
    match reported {
        Some(u) if completed && (u.input_tokens > 0 || u.output_tokens > 0) => (u, false),
        Some(mut u) if u.input_tokens > 0 || u.output_tokens > 0 => {
            let out = tokens(produced);
            let mut estimated = false;
            if out > u.output_tokens {
                u.output_tokens = out;
                estimated = true;
            }
            if u.input_tokens == 0 {
                u.input_tokens = input_estimate;
                estimated = true;
            }
            (u, estimated)
        }
        _ => (
            Usage {
                input_tokens: input_estimate,
                output_tokens: tokens(produced),
                ..Usage::default()
            },
            true,
        ),
    }
}

/// Fills in the usage of a complete answer whose upstream reported none, from its text (input from the
/// request's); returns whether it had to.
pub fn complete_usage(resp: &mut Response, input_estimate: u64) -> bool {
    if resp.usage.input_tokens > 0 || resp.usage.output_tokens > 0 {
        return false;
    }
    let mut produced = String::new();
    for p in &resp.content {
        match p {
            Part::Text(t) | Part::Reasoning { text: t, .. } => produced.push_str(t),
            Part::ToolCall {
                name, arguments, ..
            } => {
                produced.push_str(name);
                produced.push_str(arguments);
            }
            _ => {}
        }
    }
    resp.usage = Usage {
        input_tokens: input_estimate,
        output_tokens: tokens(&produced),
        ..Usage::default()
    };
    true
}

/// The input of a decoded request estimated from its text.
pub fn input_from_request(req: &Request) -> u64 {
    tokens(&req.all_text())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_estimates() {
        assert_eq!(tokens(""), 0);
        assert_eq!(tokens("Hello, world!"), 6);
        assert_eq!(tokens("a b c"), 3);
    }

    #[test]
    fn one_rule_for_stream_usage() {
        let reported = Usage {
            input_tokens: 10,
            output_tokens: 2,
            ..Usage::default()
        };
        let text = "many words were produced before the stream broke";
        assert_eq!(
            stream_usage(Some(reported), true, text, 99),
            (reported, false)
        );
        let (u, est) = stream_usage(Some(reported), false, text, 99);
        assert!(est && u.output_tokens > 2 && u.input_tokens == 10, "{u:?}");
        let (u, est) = stream_usage(None, true, text, 99);
        assert!(est && u.input_tokens == 99 && u.output_tokens == tokens(text));
    }
}
