//! Embeddings in canonical form: what a client asked to embed ([`EmbedRequest`]) and what an upstream gave
//! back ([`Embeddings`]), between the protocols that have an embeddings endpoint (OpenAI's
//! `POST /v1/embeddings`: `chat/embed.rs`; Gemini's `:embedContent` and `:batchEmbedContents`:
//! `gemini/embed.rs`). Each of them implements [`Embedder`](super::codec::Embedder): the client's request
//! read, the answer written in its shape, and the same for its upstreams.
//!
//! The vectors cross as numbers: an OpenAI client that asks for `base64` gets them as OpenAI encodes them
//! (little-endian `f32`, base64), whatever the upstream sent.

use base64::Engine as _;

use super::estimate;

/// One input to embed (serialized as OpenAI writes it: a string, or an array of token ids).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum EmbedInput {
    /// A text.
    Text(String),
    /// Token ids (OpenAI's `input` as integers): only an OpenAI-compatible upstream reads them.
    Tokens(Vec<u64>),
}

/// What a client asked to embed, in canonical form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmbedRequest {
    /// The inputs, in order: one vector comes back for each.
    pub inputs: Vec<EmbedInput>,
    /// The vectors' size asked for (OpenAI `dimensions`, Gemini `outputDimensionality`).
    pub dimensions: Option<u64>,
    /// The client wants the vectors base64-encoded (OpenAI `encoding_format: "base64"`).
    pub base64: bool,
    /// What the vectors are for (Gemini `taskType`, such as `RETRIEVAL_QUERY`).
    pub task_type: Option<String>,
    /// The title of each input embedded as a retrieval document (Gemini `title`), in the inputs' order;
    /// empty when none has one.
    pub titles: Vec<Option<String>>,
    /// The client's end user (OpenAI `user`).
    pub user: Option<String>,
    /// The client asked for one vector in its single shape (Gemini `:embedContent`), not a list.
    pub single: bool,
}

impl EmbedRequest {
    /// The input tokens estimated from the inputs' text (token ids count one each), for admission and for
    /// an upstream that reports none.
    pub(crate) fn input_estimate(&self) -> u64 {
        self.inputs
            .iter()
            .map(|i| match i {
                EmbedInput::Text(t) => estimate::tokens(t).max(1),
                EmbedInput::Tokens(ids) => ids.len() as u64,
            })
            .fold(0u64, u64::saturating_add)
    }

    /// The texts of the inputs, or None when one of them is token ids (which only OpenAI-compatible upstreams
    /// read).
    pub(crate) fn texts(&self) -> Option<Vec<&str>> {
        self.inputs
            .iter()
            .map(|i| match i {
                EmbedInput::Text(t) => Some(t.as_str()),
                EmbedInput::Tokens(_) => None,
            })
            .collect()
    }
}

/// The vectors an upstream gave back, in the order of the inputs, and the input tokens it reported (also
/// what the answer cache keeps of an embeddings answer).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Embeddings {
    /// One vector per input.
    pub vectors: Vec<Vec<f32>>,
    /// The input tokens the upstream reported (None: it reports none, as Gemini's embeddings).
    pub input_tokens: Option<u64>,
}

/// A vector as OpenAI's `base64` encoding carries it: its `f32` values, little-endian, base64.
pub(crate) fn to_base64(vector: &[f32]) -> String {
    let mut bytes = Vec::with_capacity(vector.len() * 4);
    for v in vector {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A vector from OpenAI's `base64` encoding; None when it is not base64 of whole `f32`s.
pub(crate) fn from_base64(text: &str) -> Option<Vec<f32>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_little_endian_f32_and_round_trips() {
        // 1.0f32 is 0x3f800000: little-endian 00 00 80 3f.
        assert_eq!(to_base64(&[1.0]), "AACAPw==");
        let v = vec![0.25, -1.5, 3.0e-7];
        assert_eq!(from_base64(&to_base64(&v)).unwrap(), v);
        assert_eq!(from_base64("AAA="), None, "two bytes are no f32");
        assert_eq!(from_base64("not base64!"), None);
    }

    #[test]
    fn the_estimate_counts_texts_and_token_ids() {
        let r = EmbedRequest {
            inputs: vec![
                EmbedInput::Text("hello world".into()),
                EmbedInput::Tokens(vec![1, 2, 3]),
            ],
            ..EmbedRequest::default()
        };
        assert_eq!(r.input_estimate(), estimate::tokens("hello world") + 3);
        assert_eq!(r.texts(), None);
    }
}
