//! Seeded shuffling and the train/eval hold-out that upstream environments compute in `setup`.

/// Shuffles `items` in place with a Fisher–Yates pass driven by splitmix64 from `seed`, so a
/// seed always gives the same order on every machine and release.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..items.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

/// The eval hold-out size upstream uses, `max(min_size, n × ratio)`, capped so that at least
/// one training item remains.
pub fn eval_size(n: usize, min_size: usize, ratio: f64) -> usize {
    let by_ratio = (n as f64 * ratio.max(0.0)) as usize;
    min_size.max(by_ratio).min(n.saturating_sub(1))
}

/// Splits `items` into (train, eval), the eval part being the last `n_eval` items (after a
/// [`shuffle`], a seeded random hold-out).
pub fn split_eval<T>(mut items: Vec<T>, n_eval: usize) -> (Vec<T>, Vec<T>) {
    let eval = items.split_off(items.len().saturating_sub(n_eval));
    (items, eval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffles_are_seeded_and_hold_outs_bounded() {
        let mut a: Vec<u32> = (0..50).collect();
        let mut b = a.clone();
        shuffle(&mut a, 7);
        shuffle(&mut b, 7);
        assert_eq!(a, b);
        assert_ne!(a, (0..50).collect::<Vec<_>>());
        assert_eq!(eval_size(500, 20, 0.1), 50);
        assert_eq!(eval_size(100, 20, 0.1), 20);
        assert_eq!(eval_size(10, 20, 0.1), 9);
        assert_eq!(eval_size(0, 20, 0.1), 0);
        let (train, eval) = split_eval((0..10).collect::<Vec<_>>(), 3);
        assert_eq!((train.len(), eval), (7, vec![7, 8, 9]));
    }
}
