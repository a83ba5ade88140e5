//! The body of a chunked request (`Transfer-Encoding: chunked`), decoded incrementally: chunk sizes (with
//! extensions, refused when hostile), data, trailers. Pure, like `request.rs`: byte slices in, bytes out.

use super::request::HttpError;

/// Incremental decoder for a chunked request body.
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
    remaining: u64,
}

#[derive(Debug, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data,
    DataEnd,
    Trailers,
    Done,
}

impl ChunkedDecoder {
    /// Consumes bytes from `input`, appending decoded data to `out`.
    ///
    /// Returns how many input bytes were used and whether the body is complete. A line that is not complete
    /// yet is left unconsumed; the caller passes it again with more bytes.
    pub fn feed(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        max_body: u64,
    ) -> Result<(usize, bool), HttpError> {
        let mut pos = 0;
        loop {
            match self.state {
                ChunkState::Done => return Ok((pos, true)),
                ChunkState::Size => {
                    let Some(line_end) = find_crlf(&input[pos..]) else {
                        if input.len() - pos > 1024 {
                            return Err(HttpError::BadRequest("chunk size line too long".into()));
                        }
                        return Ok((pos, false));
                    };
                    let line = &input[pos..pos + line_end + 2];
                    let size = chunk_size(line)?;
                    pos += line_end + 2;
                    if size == 0 {
                        self.state = ChunkState::Trailers;
                    } else {
                        if (out.len() as u64).saturating_add(size) > max_body {
                            return Err(HttpError::BodyTooLarge(max_body));
                        }
                        self.remaining = size;
                        self.state = ChunkState::Data;
                    }
                }
                ChunkState::Data => {
                    let available = (input.len() - pos) as u64;
                    if available == 0 {
                        return Ok((pos, false));
                    }
                    let take = available.min(self.remaining) as usize;
                    out.extend_from_slice(&input[pos..pos + take]);
                    pos += take;
                    self.remaining -= take as u64;
                    if self.remaining == 0 {
                        self.state = ChunkState::DataEnd;
                    }
                }
                ChunkState::DataEnd => {
                    if input.len() - pos < 2 {
                        return Ok((pos, false));
                    }
                    if &input[pos..pos + 2] != b"\r\n" {
                        return Err(HttpError::BadRequest("chunk not followed by CRLF".into()));
                    }
                    pos += 2;
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(line_end) = find_crlf(&input[pos..]) else {
                        if input.len() - pos > 8192 {
                            return Err(HttpError::BadRequest("trailer too long".into()));
                        }
                        return Ok((pos, false));
                    };
                    let line = &input[pos..pos + line_end];
                    if line_end > 0 && !trailer_field(line) {
                        return Err(HttpError::BadRequest(format!(
                            "invalid trailer field {:?}",
                            String::from_utf8_lossy(line)
                        )));
                    }
                    pos += line_end + 2;
                    if line_end == 0 {
                        self.state = ChunkState::Done;
                    }
                }
            }
        }
    }
}

/// The size of a chunk from its size line (with its CRLF): hex digits only (RFC 9112), then optionally
/// whitespace and `;` extensions; read with `httparse`, after refusing what it would let through (an empty
/// size, whitespace before the digits, or whitespace with no extension after it).
pub(super) fn chunk_size(line: &[u8]) -> Result<u64, HttpError> {
    let bad = || {
        HttpError::BadRequest(format!(
            "invalid chunk size {:?}",
            String::from_utf8_lossy(&line[..line.len().saturating_sub(2)])
        ))
    };
    let body = &line[..line.len() - 2];
    // A CR or LF (or another control byte) inside the line: something in front of tollgate may have ended
    // the line there, and read the body differently.
    if body.iter().any(|&b| control(b)) {
        return Err(bad());
    }
    let (size, ext) = match body.iter().position(|&b| b == b';') {
        Some(i) => (&body[..i], true),
        None => (body, false),
    };
    let digits = size.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let rest = &size[digits..];
    if digits == 0 || (!ext && !rest.is_empty()) || rest.iter().any(|b| !matches!(b, b' ' | b'\t'))
    {
        return Err(bad());
    }
    match httparse::parse_chunk_size(line) {
        Ok(httparse::Status::Complete((_, n))) => Ok(n),
        _ => Err(bad()),
    }
}

/// A control byte other than HTAB (RFC 9110 allows none in a field or a chunk extension).
fn control(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

/// Whether a trailer line (without its CRLF) is a field: a token, a colon, a value without control bytes.
fn trailer_field(line: &[u8]) -> bool {
    let tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    match line.iter().position(|&b| b == b':') {
        Some(colon) if colon > 0 => {
            line[..colon].iter().all(tchar) && !line[colon + 1..].iter().any(|&b| control(b))
        }
        _ => false,
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}
