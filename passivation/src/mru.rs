//! Most recently used (Akka's `most-recently-used` replacement policy).

use super::lru::RecencyEnd;

/// Passivates the entity that received a message most recently, other than
/// the one being activated.
///
/// Good for cyclic access over more entities than fit, where LRU always
/// passivates exactly the entity needed next.
pub type MostRecentlyUsed<K> = RecencyEnd<K, true>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::area::{replay, ActiveArea};
    use crate::ReplacementPolicy;

    #[test]
    fn mru_passivates_most_recent_before_the_new_entity() {
        let mut mru = MostRecentlyUsed::new(3);
        assert_eq!(replay(&mut mru, &[1, 2, 3, 4]), vec![3]);
        assert_eq!(replay(&mut mru, &[1, 5]), vec![1]);
        assert_eq!(replay(&mut mru, &[2, 6]), vec![2]);
        assert_eq!(mru.select(), Some(&6));
        assert_eq!(mru.len(), 3);
        let mut out = Vec::new();
        mru.set_limit(1, &mut out);
        assert_eq!(out, vec![6, 5]);
        assert_eq!(mru.select(), Some(&4));
    }

    #[test]
    fn mru_with_zero_limit_keeps_the_new_entity() {
        let mut mru = MostRecentlyUsed::new(0);
        assert_eq!(replay(&mut mru, &[1, 2]), vec![1]);
        assert_eq!(mru.len(), 1);
    }
}
