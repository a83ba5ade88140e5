//! Usage estimates, in one place: what tollgate counts when an upstream reports no usage (or a stream breaks
//! before it does), and what admission reserves before any decoding ([`input`]: text by size, and images,
//! documents and audio at their providers' token cost, in every protocol's part shapes).

use serde_json::{Map, Value};

use super::canon::{Part, Request, Response, Usage};

/// What one image may cost at most, in input tokens, when a model's config says nothing
/// (`image_tokens`): the largest documented per-image count among the upstream kinds tollgate speaks.
/// OpenAI's patch-based models count at most 1,536 patches of 32 px times a model multiplier of at most
/// 2.46 (gpt-4.1-nano): 3,779; its tile-based models at most 85 + 8 × 170 = 1,445; Anthropic scales
/// images beyond about 1.15 megapixels down to about 1,600 tokens. The images of a request count at this
/// bound whatever their size (a URL's size is unknown before the upstream fetches it). A model whose
/// upstream counts more per image (gpt-4o-mini: 2,833 + 5,667 per 512 px tile) is configured with its own.
pub(crate) const IMAGE_TOKENS: u64 = 3_800;

/// Pages a document may have at most: the documented page limit of a request with PDFs (Anthropic: 100
/// pages; OpenAI: 100 pages).
pub(crate) const DOCUMENT_PAGES: u64 = 100;

/// Text tokens one document page may cost (Anthropic: 1,500 to 3,000 per page); each page also goes to
/// the model as an image.
pub(crate) const PAGE_TEXT_TOKENS: u64 = 3_000;

/// Input tokens of a second of audio, at most (Gemini: 32; OpenAI about 10).
pub(crate) const AUDIO_TOKENS_PER_SECOND: u64 = 32;

/// The longest audio a request may hold, in seconds (Gemini: 9.5 hours in one prompt): a remote audio
/// file, whose length is unknown before the upstream fetches it, is reserved at this length.
pub(crate) const AUDIO_SECONDS: u64 = 34_200;

/// Input tokens of a second of video, at most (Gemini at its default media resolution: 258 a frame at one
/// frame a second, and 32 for the sound: about 300).
pub(crate) const VIDEO_TOKENS_PER_SECOND: u64 = 300;

/// The longest video a request may hold, in seconds (Gemini: an hour at the default media resolution, which
/// fills its 1M-token context window): every video, remote or inline, is reserved at this length.
pub(crate) const VIDEO_SECONDS: u64 = 3_600;

/// Bytes of encoded audio per input token, at most: audio input costs up to 32 tokens a second (Gemini;
/// OpenAI about 10), and the smallest encoding a client may send (8 kbit/s MP3) carries 1,000 bytes a
/// second: 31.25 bytes a token, rounded down so that the estimate errs high.
pub(crate) const AUDIO_BYTES_PER_TOKEN: u64 = 31;

/// An estimate of how many tokens a BPE tokenizer would make of `text`: each run of letters or digits
/// costs one token per started 4 characters, every other visible character one token. Deterministic; used
/// where an upstream reports no usage (and by the mock model).
pub(crate) fn tokens(text: &str) -> u64 {
    let mut tokens = 0u64;
    let mut run = 0u64;
    for c in text.chars() {
        if c.is_alphanumeric() {
            run += 1;
        } else {
            tokens = tokens.saturating_add(run.div_ceil(4));
            run = 0;
            if !c.is_whitespace() {
                tokens = tokens.saturating_add(1);
            }
        }
    }
    tokens.saturating_add(run.div_ceil(4))
}

/// The input of a request estimated from its body before any decoding (admission reserves with it, and a
/// request its upstream worked on without reporting usage is billed it): about four bytes of JSON per
/// token, generous for text, and every image, document, audio and video part at its providers' cost
/// instead of its inline bytes: an image at `image_tokens` (see [`IMAGE_TOKENS`]), a document (PDF or any
/// file, and text the upstream fetches) at [`DOCUMENT_PAGES`] pages of [`PAGE_TEXT_TOKENS`] plus an image
/// each, inline audio by its size (see [`AUDIO_BYTES_PER_TOKEN`]), remote audio at [`AUDIO_SECONDS`] and
/// video at [`VIDEO_SECONDS`] (a remote file of no stated type at the largest of these bounds). Parts are
/// found at any depth (tool results, function call outputs, documents made of content blocks). Saturating.
pub(crate) fn input(body: &Value, body_len: usize, image_tokens: u64) -> u64 {
    let mut media = Media {
        image: image_tokens,
        ..Media::default()
    };
    media.walk(body);
    let text = (body_len as u64).saturating_sub(media.inline_bytes) / 4;
    text.max(1).saturating_add(media.tokens)
}

/// The media parts of a body, as the input estimate counts them.
#[derive(Default)]
struct Media {
    /// Tokens of one image.
    image: u64,
    tokens: u64,
    /// Bytes of inline media data (base64, data URLs): counted at the media's cost, not as text.
    inline_bytes: u64,
}

#[derive(Clone, Copy)]
enum Kind {
    Image,
    Audio,
    Video,
    Document,
    /// A remote file whose type is not stated (a Gemini `fileData` without `mimeType`, a YouTube URL): the
    /// largest bound.
    Unknown,
}

/// The media kind of a content part, by its `type` in any protocol: Chat `image_url`, `input_audio`,
/// `file`; Responses `input_image`, `input_audio`, `input_file` (and `computer_screenshot` outputs);
/// Messages `image`, `document`; the `video_url` and `audio_url` parts OpenAI-compatible servers (vLLM)
/// fetch.
fn kind_of(part_type: &str) -> Option<Kind> {
    match part_type {
        "image_url" | "input_image" | "image" | "computer_screenshot" => Some(Kind::Image),
        "input_audio" | "audio_url" => Some(Kind::Audio),
        "video_url" | "input_video" => Some(Kind::Video),
        "file" | "input_file" | "document" => Some(Kind::Document),
        _ => None,
    }
}

/// The media kind of a Gemini `inlineData` / `fileData` part, by its MIME type; `remote`: the upstream
/// fetches it (`fileData`). None: inline text, which counts by its size (remote text is a document: its
/// size is unknown until it is fetched).
fn kind_of_mime(mime: &str, remote: bool) -> Option<Kind> {
    let mime = mime.trim().to_ascii_lowercase();
    if mime.starts_with("image/") {
        Some(Kind::Image)
    } else if mime.starts_with("audio/") {
        Some(Kind::Audio)
    } else if mime.starts_with("video/") {
        Some(Kind::Video)
    } else if mime.starts_with("text/") {
        remote.then_some(Kind::Document)
    } else if mime.is_empty() && remote {
        Some(Kind::Unknown)
    } else {
        // PDFs and any other file: at a document's bound.
        Some(Kind::Document)
    }
}

impl Media {
    fn walk(&mut self, v: &Value) {
        match v {
            Value::Array(items) => items.iter().for_each(|x| self.walk(x)),
            Value::Object(o) => match o.get("type").and_then(Value::as_str).and_then(kind_of) {
                Some(kind) => self.part(kind, o),
                None => match gemini_media(o) {
                    Some((kind, data)) => self.part(kind, data),
                    None => o.values().for_each(|x| self.walk(x)),
                },
            },
            _ => {}
        }
    }

    fn add(&mut self, tokens: u64) {
        self.tokens = self.tokens.saturating_add(tokens);
    }

    fn part(&mut self, kind: Kind, o: &Map<String, Value>) {
        if let (Kind::Document, Some(source)) = (&kind, o.get("source")) {
            match source.get("type").and_then(Value::as_str) {
                // A Messages document of plain text is text (counted by its size); one made of content
                // blocks costs what its blocks cost.
                Some("text") => return,
                Some("content") => {
                    if let Some(content) = source.get("content") {
                        self.walk(content);
                    }
                    return;
                }
                _ => {}
            }
        }
        let inline = inline_bytes(o);
        self.inline_bytes = self.inline_bytes.saturating_add(inline);
        let tokens = match kind {
            Kind::Image => self.image,
            // Base64: three bytes of audio in four characters.
            Kind::Audio if inline > 0 => (inline / 4 * 3)
                .div_ceil(AUDIO_BYTES_PER_TOKEN)
                .min(audio()),
            Kind::Audio => audio(),
            Kind::Video => video(),
            Kind::Document => self.document(),
            Kind::Unknown => self.document().max(audio()).max(video()),
        };
        self.add(tokens);
    }

    /// The documented bound of one document: every page as text and as an image.
    fn document(&self) -> u64 {
        DOCUMENT_PAGES.saturating_mul(PAGE_TEXT_TOKENS.saturating_add(self.image))
    }
}

/// The bound of one audio input: the longest a request may hold.
fn audio() -> u64 {
    AUDIO_SECONDS * AUDIO_TOKENS_PER_SECOND
}

/// The bound of one video input: the longest a request may hold.
fn video() -> u64 {
    VIDEO_SECONDS * VIDEO_TOKENS_PER_SECOND
}

/// A Gemini part's media (`inlineData` or `fileData`, by its `mimeType`) and the object holding its data.
fn gemini_media(o: &Map<String, Value>) -> Option<(Kind, &Map<String, Value>)> {
    let (data, remote) = match (o.get("inlineData"), o.get("fileData")) {
        (Some(inline), _) => (inline.as_object()?, false),
        (None, Some(file)) => (file.as_object()?, true),
        (None, None) => return None,
    };
    let mime = data.get("mimeType").and_then(Value::as_str).unwrap_or("");
    Some((kind_of_mime(mime, remote)?, data))
}

/// Bytes of inline media data in a part: base64 under `data` or `file_data`, and data URLs anywhere in it.
fn inline_bytes(o: &Map<String, Value>) -> u64 {
    let mut n = 0u64;
    for (k, v) in o {
        n = n.saturating_add(match v {
            Value::String(s) if k == "data" || k == "file_data" || s.starts_with("data:") => {
                s.len() as u64
            }
            Value::Object(inner) => inline_bytes(inner),
            _ => 0,
        });
    }
    n
}

/// The one rule for the usage of a stream, on every path (passthrough, translation, the mock): a stream
/// that completed with a usage report is billed as reported; one that broke, or completed without a
/// report, counts the reported part and tops it up with what was produced (output estimated from the
/// text, input from the request). Returns the usage and whether any of it is an estimate.
pub(crate) fn stream_usage(
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
pub(crate) fn complete_usage(resp: &mut Response, input_estimate: u64) -> bool {
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

/// The input of a decoded request estimated from its text, each image at `image_tokens` (see [`input`]).
pub(crate) fn input_from_request(req: &Request, image_tokens: u64) -> u64 {
    let mut images = 0u64;
    for m in &req.messages {
        for p in &m.content {
            images = images.saturating_add(images_in(p));
        }
    }
    tokens(&req.all_text()).saturating_add(images.saturating_mul(image_tokens))
}

fn images_in(p: &Part) -> u64 {
    match p {
        Part::Image(_) => 1,
        Part::ToolResult { content, .. } => content.iter().map(images_in).sum(),
        _ => 0,
    }
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

    fn est(body: serde_json::Value) -> u64 {
        input(&body, body.to_string().len(), 1000)
    }

    #[test]
    fn media_count_at_their_cost_in_every_protocols_shapes() {
        let url = "https://example.com/a.png";
        let data = format!("data:image/png;base64,{}", "A".repeat(40_000));
        let doc = DOCUMENT_PAGES * (PAGE_TEXT_TOKENS + 1000);
        // Chat: image_url (URL or data URL), input_audio, file.
        let chat = serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
            {"type": "image_url", "image_url": {"url": data}},
            {"type": "input_audio", "input_audio": {"data": "A".repeat(4_000), "format": "mp3"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,AAAA", "filename": "a.pdf"}}]}]});
        let e = est(chat);
        // 2 images, 3,000 bytes of audio (97 tokens: about 3 s at 32 tokens a second), one document; the
        // inline data is not text.
        assert!(e >= 2000 + 97 + doc && e < 2000 + 97 + doc + 200, "{e}");
        // Responses: input_image, input_file, input_audio, also inside a function call's output.
        let responses = serde_json::json!({"input": [
            {"role": "user", "content": [{"type": "input_image", "image_url": url},
                                         {"type": "input_file", "file_url": "https://example.com/a.pdf"}]},
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": url}]}]});
        assert!(est(responses) >= 2000 + doc);
        // Messages: image and document blocks, nested in a tool result; a text document is text, and a
        // document of content blocks costs its blocks.
        let messages = serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": url}},
            {"type": "tool_result", "tool_use_id": "t", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AAAA"}}]},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "word ".repeat(400)}},
            {"type": "document", "source": {"type": "content", "content": [
                {"type": "image", "source": {"type": "url", "url": url}}]}}]}]});
        let e = est(messages);
        assert!(e >= 3000 + doc + 500 && e < 3000 + doc + 1000, "{e}");
        // Fifty URL images in a small body cost fifty images, not the body's size.
        let many: Vec<_> = (0..50)
            .map(|i| serde_json::json!({"type": "image_url", "image_url": {"url": format!("{url}?{i}")}}))
            .collect();
        let body = serde_json::json!({"messages": [{"role": "user", "content": many}]});
        assert!(body.to_string().len() < 4000);
        assert!(input(&body, body.to_string().len(), IMAGE_TOKENS) >= 50 * IMAGE_TOKENS);
        // Saturating.
        assert_eq!(input(&body, usize::MAX, u64::MAX), u64::MAX);
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
