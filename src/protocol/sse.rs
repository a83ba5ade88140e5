//! Server-sent events: an incremental reader for upstream streams and helpers that frame outgoing events.
//!
//! The reader keeps each event's raw bytes, so a same-protocol relay can forward them exactly as they came
//! (comments and unknown fields included) while still seeing the parsed `event` name and `data`.

use std::io::{self, BufRead};

/// One event block as read from a stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// Whether any `data:` line was present.
    pub has_data: bool,
    /// The block exactly as received, including its terminating blank line.
    pub raw: Vec<u8>,
    /// False when the stream ended before the blank line that closes the block.
    pub terminated: bool,
}

impl SseEvent {
    /// True for a block holding only comments (keepalives) or nothing.
    pub fn is_comment(&self) -> bool {
        self.event.is_none() && !self.has_data
    }

    /// The block's bytes as they are relayed: as received, closed with a blank line when the stream ended
    /// before one.
    pub fn framed(&self) -> std::borrow::Cow<'_, [u8]> {
        if self.terminated {
            return std::borrow::Cow::Borrowed(&self.raw);
        }
        let mut raw = self.raw.clone();
        raw.extend_from_slice(if raw.ends_with(b"\n") { b"\n" } else { b"\n\n" });
        std::borrow::Cow::Owned(raw)
    }
}

/// Reads SSE event blocks from a byte stream.
pub struct SseReader<R> {
    inner: R,
    max_event_bytes: usize,
    line: Vec<u8>,
}

impl<R: BufRead> SseReader<R> {
    /// A reader of `inner`, with a cap of 16 MiB on one event block (see `with_max_event_bytes`).
    pub fn new(inner: R) -> Self {
        SseReader {
            inner,
            max_event_bytes: 16 * 1024 * 1024,
            line: Vec::with_capacity(1024),
        }
    }

    /// Caps the size of one event block; a larger one is an error.
    pub fn with_max_event_bytes(mut self, max: usize) -> Self {
        self.max_event_bytes = max;
        self
    }

    /// The next event block, or `None` at a clean end of stream.
    pub fn next_event(&mut self) -> io::Result<Option<SseEvent>> {
        let mut ev = SseEvent::default();
        loop {
            self.line.clear();
            let n = self.read_line()?;
            if n == 0 {
                // End of stream: whatever was collected is an unterminated block.
                if ev.raw.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(ev));
            }
            ev.raw.extend_from_slice(&self.line);
            if ev.raw.len() > self.max_event_bytes {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("SSE event larger than {} bytes", self.max_event_bytes),
                ));
            }
            let mut content: &[u8] = &self.line;
            if content.ends_with(b"\n") {
                content = &content[..content.len() - 1];
            }
            if content.ends_with(b"\r") {
                content = &content[..content.len() - 1];
            }
            if content.is_empty() {
                if ev.raw.len() <= 2 && ev.event.is_none() && !ev.has_data {
                    // A stray blank line between blocks: skip it, keep reading.
                    ev.raw.clear();
                    continue;
                }
                ev.terminated = true;
                return Ok(Some(ev));
            }
            if content[0] == b':' {
                continue;
            }
            let (field, value) = match content.iter().position(|&b| b == b':') {
                Some(i) => {
                    let v = &content[i + 1..];
                    (&content[..i], v.strip_prefix(b" ").unwrap_or(v))
                }
                None => (content, &b""[..]),
            };
            let value = String::from_utf8_lossy(value);
            match field {
                b"data" => {
                    if ev.has_data {
                        ev.data.push('\n');
                    }
                    ev.data.push_str(&value);
                    ev.has_data = true;
                }
                b"event" => ev.event = Some(value.into_owned()),
                _ => {}
            }
        }
    }

    fn read_line(&mut self) -> io::Result<usize> {
        // read_until would grow without bound on a line without '\n'; check the cap as we go.
        let mut total = 0;
        loop {
            let available = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Ok(total);
            }
            let (used, done) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (available.len(), false),
            };
            self.line.extend_from_slice(&available[..used]);
            self.inner.consume(used);
            total += used;
            if done {
                return Ok(total);
            }
            if self.line.len() > self.max_event_bytes {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("SSE line longer than {} bytes", self.max_event_bytes),
                ));
            }
        }
    }
}

/// Appends one event to `out`: an optional `event:` line, the data (split on newlines), a blank line.
pub fn push_event(out: &mut Vec<u8>, event: Option<&str>, data: &str) {
    if let Some(name) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// The headers of every SSE response we send.
pub const SSE_HEADERS: [(&str, &str); 3] = [
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
];

/// The headers of a stream framed as a JSON array (`codec::Framing::JsonArray`).
pub const JSON_ARRAY_HEADERS: [(&str, &str); 3] = [
    ("content-type", "application/json; charset=UTF-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
];

/// A stream of SSE events written as one JSON array of their data, element by element as they come (what
/// Gemini's `streamGenerateContent` sends without `alt=sse`): `[{…}` first, then `\n,\r\n{…}` for each
/// further event, `\n]` at the end. Comments and events without data become nothing. Each chunk it is given
/// holds whole events.
#[derive(Debug, Default)]
pub struct JsonArray {
    started: bool,
}

impl crate::http::Reframe for JsonArray {
    fn chunk(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let mut reader = SseReader::new(chunk);
        while let Ok(Some(ev)) = reader.next_event() {
            if !ev.has_data || ev.data.trim().is_empty() {
                continue;
            }
            out.extend_from_slice(if self.started { b"\n,\r\n" } else { b"[" });
            self.started = true;
            out.extend_from_slice(ev.data.as_bytes());
        }
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.started { b"\n]" } else { b"[]" });
        self.started = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(input: &str) -> Vec<SseEvent> {
        let mut r = SseReader::new(input.as_bytes());
        let mut out = Vec::new();
        while let Some(ev) = r.next_event().unwrap() {
            out.push(ev);
        }
        out
    }

    #[test]
    fn parses_events_comments_and_crlf() {
        let evs = events(": keepalive\n\nevent: a\ndata: {\"x\":1}\n\ndata: l1\r\ndata: l2\r\n\r\ndata: [DONE]\n\n");
        assert_eq!(evs.len(), 4);
        assert!(evs[0].is_comment());
        assert_eq!(evs[1].event.as_deref(), Some("a"));
        assert_eq!(evs[1].data, "{\"x\":1}");
        assert_eq!(evs[1].raw, b"event: a\ndata: {\"x\":1}\n\n");
        assert_eq!(evs[2].data, "l1\nl2");
        assert_eq!(evs[3].data, "[DONE]");
        assert!(evs.iter().all(|e| e.terminated));
    }

    #[test]
    fn unterminated_tail_is_reported() {
        let evs = events("data: a\n\ndata: b");
        assert_eq!(evs.len(), 2);
        assert!(!evs[1].terminated);
        assert_eq!(evs[1].data, "b");
    }

    #[test]
    fn no_space_after_colon_and_empty_data() {
        let evs = events("data:x\n\ndata\n\n");
        assert_eq!(evs[0].data, "x");
        assert!(evs[1].has_data);
        assert_eq!(evs[1].data, "");
    }

    #[test]
    fn oversized_events_fail() {
        let big = format!("data: {}\n\n", "a".repeat(100));
        let mut r = SseReader::new(big.as_bytes()).with_max_event_bytes(50);
        assert!(r.next_event().is_err());
    }

    #[test]
    fn a_json_array_of_the_events_data() {
        use crate::http::Reframe;
        let mut r = JsonArray::default();
        let mut out = Vec::new();
        r.chunk(b"data: {\"a\":1}\n\n", &mut out);
        r.chunk(b": keepalive\n\n", &mut out);
        r.chunk(b"data: {\"b\":2}\n\ndata: {\"c\":3}\n\n", &mut out);
        r.end(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "[{\"a\":1}\n,\r\n{\"b\":2}\n,\r\n{\"c\":3}\n]");
        let v: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(v.len(), 3);
        let mut empty = Vec::new();
        JsonArray::default().end(&mut empty);
        assert_eq!(empty, b"[]");
    }

    #[test]
    fn push_event_frames_multiline_data() {
        let mut out = Vec::new();
        push_event(&mut out, Some("e"), "a\nb");
        assert_eq!(out, b"event: e\ndata: a\ndata: b\n\n");
    }
}
