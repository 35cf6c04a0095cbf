//! The one codec boundary: everything that crosses nodes is encoded here.
//!
//! Local delivery passes typed values; a message becomes bytes only when it
//! leaves the node, so a transport moves bytes and knows no entity type.
//! Between nodes the encoding is always postcard; clients choose theirs with
//! a [`ContentType`], and a region converts at the edge (see
//! [`crate::region::ErasedRegion`]).

use bytes::Bytes;
use serde::{de::DeserializeOwned, Serialize};

/// A value that could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("codec error: {0}")]
pub struct CodecError(pub String);

/// Encodes a value for the wire.
///
/// # Errors
/// When the value's `Serialize` implementation fails.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, CodecError> {
    postcard::to_stdvec(value)
        .map(Bytes::from)
        .map_err(|e| CodecError(e.to_string()))
}

/// Decodes a value from the wire.
///
/// # Errors
/// When the bytes are not a valid encoding of `T`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    postcard::from_bytes(bytes).map_err(|e| CodecError(e.to_string()))
}

/// How a client encodes the messages it sends and the replies it reads.
///
/// Every entity type understands every content type: a message type only
/// needs serde, and each content type is a serde format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContentType {
    /// `application/json`: what people type and scripts produce.
    Json,
    /// `application/x-postcard`: compact, and what nodes speak to each other.
    Postcard,
}

impl ContentType {
    /// Every content type, in the order error messages list them.
    pub const ALL: [ContentType; 2] = [ContentType::Json, ContentType::Postcard];

    /// The media type, as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentType::Json => "application/json",
            ContentType::Postcard => "application/x-postcard",
        }
    }

    /// Encodes a value in this content type.
    ///
    /// # Errors
    /// When the value's `Serialize` implementation fails, or (JSON) when it
    /// has a map whose keys are not strings.
    pub fn encode<T: Serialize + ?Sized>(self, value: &T) -> Result<Bytes, CodecError> {
        match self {
            ContentType::Json => serde_json::to_vec(value)
                .map(Bytes::from)
                .map_err(|e| CodecError(e.to_string())),
            ContentType::Postcard => encode(value),
        }
    }

    /// Decodes a value in this content type.
    ///
    /// # Errors
    /// When the bytes are not a valid encoding of `T`; the message is the
    /// decoder's, so that a client can see where its input went wrong.
    pub fn decode<T: DeserializeOwned>(self, bytes: &[u8]) -> Result<T, CodecError> {
        match self {
            ContentType::Json => {
                serde_json::from_slice(bytes).map_err(|e| CodecError(e.to_string()))
            }
            ContentType::Postcard => decode(bytes),
        }
    }
}

impl std::fmt::Display for ContentType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A content type no codec handles.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported content type {given:?}; supported: application/json, application/x-postcard")]
pub struct UnknownContentType {
    /// What was asked for.
    pub given: String,
}

impl std::str::FromStr for ContentType {
    type Err = UnknownContentType;

    /// Parses a media type. Case and parameters (`; charset=utf-8`) are
    /// ignored, as HTTP does, because clients add them without thinking.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let essence = s.split(';').next().unwrap_or_default().trim();
        ContentType::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(essence))
            .ok_or_else(|| UnknownContentType {
                given: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_parse_leniently_and_name_the_unknown() {
        assert_eq!("application/json".parse(), Ok(ContentType::Json));
        assert_eq!(
            " Application/JSON; charset=utf-8".parse(),
            Ok(ContentType::Json)
        );
        assert_eq!("application/x-postcard".parse(), Ok(ContentType::Postcard));
        for bad in ["", "text/plain", "application/jsonx"] {
            let err = bad.parse::<ContentType>().unwrap_err();
            assert_eq!(err.given, bad);
            let text = err.to_string();
            assert!(text.contains("application/json"), "{text}");
            assert!(text.contains("application/x-postcard"), "{text}");
        }
    }

    #[test]
    fn every_content_type_round_trips() {
        for t in ContentType::ALL {
            let b = t.encode(&("abc", 42u64)).unwrap();
            let v: (String, u64) = t.decode(&b).unwrap();
            assert_eq!(v, ("abc".to_string(), 42), "{t}");
        }
        let e = ContentType::Json.decode::<u64>(b"\"x\"").unwrap_err();
        assert!(e.0.contains("invalid type"), "{e}");
    }

    #[test]
    fn round_trip_and_garbage() {
        let b = encode(&("abc", 42u64)).unwrap();
        let v: (String, u64) = decode(&b).unwrap();
        assert_eq!(v, ("abc".to_string(), 42));
        assert!(decode::<(String, u64)>(&[0xff, 0xff, 0xff]).is_err());
    }
}
