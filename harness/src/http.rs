//! Raw HTTP for tests: a request written by hand, a response read off the wire (head, chunks, the whole
//! body), SSE split into events. The head is parsed by [`crate::client::parse_head`], as the load client's.

use std::io::{BufRead, Write};
use std::net::TcpStream;

use serde_json::Value;

/// Writes a request with Content-Length.
pub fn send_request(
    s: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    close: bool,
) {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        req.push_str("Connection: close\r\n");
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    s.write_all(&bytes).unwrap();
}

/// A response as read off the wire.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// SSE events of the body: (event name, data).
    pub fn events(&self) -> Vec<(Option<String>, String)> {
        parse_sse(&self.text())
    }
}

/// Reads one response head (status line and headers; names in lower case), skipping `100 Continue`.
pub fn read_head(r: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    loop {
        let mut head = Vec::new();
        assert!(
            r.read_until(b'\n', &mut head).unwrap() > 0,
            "connection closed before a response"
        );
        // The header lines up to the blank line (or the end of the stream).
        loop {
            let from = head.len();
            if r.read_until(b'\n', &mut head).unwrap() == 0 {
                break;
            }
            if head[from..].iter().all(|b| b.is_ascii_whitespace()) {
                break;
            }
        }
        let mut headers = Vec::new();
        let parsed = crate::client::parse_head(&head, |name, value| {
            let value = String::from_utf8_lossy(value).trim().to_string();
            headers.push((name.to_ascii_lowercase(), value));
        });
        let status = match parsed {
            Ok(Some((_, status, _))) => status,
            // A head cut short or malformed: what can be read of it.
            _ => {
                headers = lenient_headers(&head);
                let text = String::from_utf8_lossy(&head);
                let first = text.lines().next().unwrap_or("");
                first
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0)
            }
        };
        if status != 100 {
            return (status, headers);
        }
    }
}

/// The `name: value` lines after the first line of `head` (names in lower case).
fn lenient_headers(head: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(head)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

/// Reads one whole response (Content-Length or chunked).
pub fn read_response(r: &mut impl BufRead) -> Response {
    let (status, headers) = read_head(r);
    let find = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        while let Some(chunk) = read_chunk(r) {
            body.extend_from_slice(&chunk);
        }
    } else if let Some(n) = find("content-length") {
        body.resize(n.parse().unwrap(), 0);
        r.read_exact(&mut body).unwrap();
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Response {
        status,
        headers,
        body,
    }
}

/// Reads one chunk of a chunked body; `None` at the last chunk.
pub fn read_chunk(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let size = usize::from_str_radix(line.trim(), 16).ok()?;
    let mut data = vec![0u8; size + 2];
    r.read_exact(&mut data).ok()?;
    data.truncate(size);
    if size == 0 {
        return None;
    }
    Some(data)
}

/// Splits SSE text into (event, data) pairs, skipping comments.
pub fn parse_sse(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut event = None;
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                event = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if event.is_some() || !data.is_empty() {
            out.push((event, data.join("\n")));
        }
    }
    out
}
