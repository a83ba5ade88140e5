//! Wire protocols: the canonical types, one codec per protocol, SSE framing and the error type.
//!
//! Each protocol is one directory (`chat/`, `responses/`, `messages/`, `gemini/`) and one `codec::Codec` value:
//! its data and interfaces convert between its wire JSON/SSE and the canonical types in `canon`, and answer
//! everything else the gateway must know about its wire. Nothing here does I/O: codecs take and return values and bytes.
//!
//! This file is the registry: the one place that names the protocols. Each line of `protocols!` declares a
//! protocol's directory, its variant of [`Protocol`] (the small id records, config and traces carry) and its
//! codec; everything else reaches a protocol through its id (`Protocol` dereferences to its codec) or by
//! going through [`ALL`].

pub(crate) mod account;
pub(crate) mod answer;
pub(crate) mod auth;
pub mod canon;
pub(crate) mod carried;
pub(crate) mod client;
pub(crate) mod codec;
pub(crate) mod collect;
pub mod completion;
pub(crate) mod contiguous;
pub(crate) mod edit;
pub(crate) mod egress;
pub(crate) mod embed;
mod error;
pub(crate) mod estimate;
pub(crate) mod fields;
pub mod fingerprint;
pub(crate) mod hosted;
pub(crate) mod limits;
pub(crate) mod observe;
pub(crate) mod openai;
pub(crate) mod relay;
pub(crate) mod request;
pub mod sse;

pub use codec::{Codec, StreamDecoder, StreamEncoder};
pub use egress::{EgressOptions, STRUCTURED_TOOL};
pub use error::{ApiError, Cause, ErrorKind, Origin};

/// Declares the protocols: for each, its directory, its variant and its codec (the `CODEC` value of that
/// directory), and builds [`Protocol`], [`ALL`] and [`Protocol::codec`] from the list.
macro_rules! protocols {
    ($($(#[$doc:meta])* $variant:ident => $dir:ident :: $codec:ident,)+) => {
        $(pub mod $dir;)+

        /// A wire protocol, by its id.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Protocol {
            $($(#[$doc])* $variant,)+
        }

        /// Every protocol, in the order they are listed (and tried, where a question goes to each).
        pub const ALL: &[Protocol] = &[$(Protocol::$variant,)+];

        impl Protocol {
            /// The protocol's codec.
            pub fn codec(self) -> &'static Codec {
                match self {
                    $(Protocol::$variant => &$dir::$codec,)+
                }
            }
        }
    };
}

protocols! {
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    Chat => chat::CODEC,
    /// OpenAI Responses, `POST /v1/responses`.
    Responses => responses::CODEC,
    /// Anthropic Messages, `POST /v1/messages` (and its token counting).
    Messages => messages::CODEC,
    /// The Gemini API, `POST /v1beta/models/{model}:generateContent` (streamed, and its token counting).
    Gemini => gemini::CODEC,
}

/// The protocol whose shapes answers take where nothing says otherwise (errors at unknown paths, the models
/// list of a client that sends no protocol's own header).
pub const FALLBACK: Protocol = Protocol::Chat;

/// The protocol of local model servers found by discovery (OpenAI-compatible servers).
pub const LOCAL: Protocol = Protocol::Chat;

/// A protocol is its codec: `protocol.name` is its codec's, `protocol.request.decode_request(body)` asks
/// the codec's interface.
impl std::ops::Deref for Protocol {
    type Target = Codec;

    fn deref(&self) -> &Codec {
        self.codec()
    }
}

impl Protocol {
    /// The protocol by its short name (`chat`).
    pub fn named(name: &str) -> Option<Protocol> {
        ALL.iter().copied().find(|p| p.name == name)
    }

    /// The protocol an upstream of `kind` (config's `kind`, such as `openai-chat`) speaks.
    pub fn of_upstream_kind(kind: &str) -> Option<Protocol> {
        ALL.iter().copied().find(|p| p.upstream_kind == kind)
    }

    /// The protocol whose endpoint is `path`.
    pub fn from_path(path: &str) -> Option<Protocol> {
        ALL.iter().copied().find(|p| p.path == path)
    }

    /// The protocol whose error shape suits an answer at `path` when nothing else is known (errors the HTTP
    /// layer gives before routing).
    pub fn for_errors_at(path: Option<&str>) -> Protocol {
        path.and_then(|p| ALL.iter().copied().find(|c| c.shapes_errors_at(p)))
            .unwrap_or(FALLBACK)
    }

    /// The protocol whose shapes suit an answer to `req` outside the model endpoints: the one whose SDK sent
    /// it (by the header only that SDK sends), else as [`Protocol::for_errors_at`] its path.
    pub fn for_request(req: &crate::http::HttpRequest) -> Protocol {
        ALL.iter()
            .copied()
            .find(|p| p.recognizes(req))
            .unwrap_or_else(|| Protocol::for_errors_at(Some(&req.path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each protocol is found again by its name, its path and its upstream kind, and no two share one.
    #[test]
    fn the_registry_is_one_to_one() {
        for &p in ALL {
            assert_eq!(Protocol::named(p.name), Some(p));
            assert_eq!(Protocol::from_path(p.path), Some(p));
            assert_eq!(Protocol::of_upstream_kind(p.upstream_kind), Some(p));
            assert!(!p.limit.fields.is_empty(), "{}", p.name);
            assert!(p.path.ends_with(p.sdk_path()), "{}", p.name);
        }
        let unique = |f: fn(Protocol) -> &'static str| {
            let all: std::collections::BTreeSet<_> = ALL.iter().map(|p| f(*p)).collect();
            all.len() == ALL.len()
        };
        assert!(unique(|p| p.name) && unique(|p| p.path) && unique(|p| p.upstream_kind));
        assert!(ALL.contains(&FALLBACK) && ALL.contains(&LOCAL));
    }
}
