//! The one codec boundary: everything that crosses nodes is encoded here.
//!
//! Local delivery passes typed values; a message becomes bytes only when it
//! leaves the node, so a transport moves bytes and knows no entity type.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let b = encode(&("abc", 42u64)).unwrap();
        let v: (String, u64) = decode(&b).unwrap();
        assert_eq!(v, ("abc".to_string(), 42));
        assert!(decode::<(String, u64)>(&[0xff, 0xff, 0xff]).is_err());
    }
}
