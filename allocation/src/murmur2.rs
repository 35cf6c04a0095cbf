//! Kafka's murmur2 hash, bit-exact with the Java client.
//!
//! Java's default partitioner is the contract here: a record produced by any
//! Java (or murmur2-configured) client and an ask for the same key must land
//! in the same shard. So this follows `org.apache.kafka.common.utils.Utils.murmur2`
//! to the bit rather than the reference MurmurHash2, which differs from it in
//! how the tail bytes are mixed.

/// Kafka's seed; differs from the usual MurmurHash2 seed, so a generic crate
/// would give other partitions.
const SEED: u32 = 0x9747_b28c;
const M: u32 = 0x5bd1_e995;
const R: u32 = 24;

/// The murmur2 hash of `data`, as Java's `Utils.murmur2` returns it (a signed
/// `int`).
///
/// Java does all of this in wrapping 32-bit `int`s and shifts with `>>>`;
/// wrapping `u32` arithmetic with `>>` yields the same bits, reinterpreted as
/// `i32` at the end.
pub fn murmur2(data: &[u8]) -> i32 {
    // Java hashes `seed ^ length` with the length as an `int`; keys past
    // 2 GiB are not possible in Kafka, so the truncation never bites.
    let mut h: u32 = SEED ^ (data.len() as u32);

    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }

    // Java's fall-through `switch (length % 4)`: every case from the matched
    // one down runs, and the multiply happens once, after byte 0.
    let tail = blocks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if let Some(&first) = tail.first() {
        h ^= u32::from(first);
        h = h.wrapping_mul(M);
    }

    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's Java default partitioner picks for a keyed record:
/// `toPositive(murmur2(key)) % partitions`, where `toPositive` masks the sign
/// bit (it is not `abs`, so `i32::MIN` maps to 0, not to an overflow).
///
/// `partitions` must not be 0; the extractors check that at construction.
pub(crate) fn murmur2_partition(key: &[u8], partitions: u32) -> u32 {
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values produced by the Java client (`Utils.murmur2`), including keys
    /// of every tail length 0..=3.
    const JAVA_VECTORS: [(&str, i32); 6] = [
        ("21", -973_932_308),
        ("foobar", -790_332_482),
        ("a-little-bit-long-string", -985_981_536),
        ("a-little-bit-longer-string", -1_486_304_829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        ("abc", 479_470_107),
    ];

    #[test]
    fn matches_java_utils_murmur2() {
        for (key, expected) in JAVA_VECTORS {
            assert_eq!(murmur2(key.as_bytes()), expected, "key {key:?}");
        }
    }

    #[test]
    fn partition_matches_java_default_partitioner_with_128_partitions() {
        let expected = [108, 62, 32, 67, 77, 27];
        for ((key, _), partition) in JAVA_VECTORS.iter().zip(expected) {
            assert_eq!(
                murmur2_partition(key.as_bytes(), 128),
                partition,
                "key {key:?}"
            );
        }
    }

    /// Keys with bytes above 0x7f (Java sign-extends `byte`, then masks with
    /// `& 0xff`) and every tail length, hashed by a JVM running the same
    /// algorithm as `Utils.murmur2` over the UTF-8 bytes.
    #[test]
    fn matches_java_on_non_ascii_and_short_keys() {
        let vectors: [(&str, i32, u32); 5] = [
            ("", 275_646_681, 89),
            ("a", -1_563_381_124, 124),
            ("\u{fc}", 1_419_834_458, 90),
            ("entit\u{e9}-42", -1_970_746_878, 2),
            (
                "\u{65e5}\u{672c}\u{8a9e}\u{30ad}\u{30fc}",
                1_445_825_182,
                30,
            ),
        ];
        for (key, hash, partition) in vectors {
            assert_eq!(murmur2(key.as_bytes()), hash, "key {key:?}");
            assert_eq!(
                murmur2_partition(key.as_bytes(), 128),
                partition,
                "key {key:?}"
            );
        }
    }
}
