//! Containment look-ups over buffers in logarithmic time, so that importing or recording
//! many buffers stays linear-logarithmic instead of searching every buffer per entry.

/// Address ranges `[start, end)`, each with the index of what it stands for.
pub(super) struct Spans {
    /// `(start, end, index)` by start, equal starts by index from high to low (so the last
    /// of equal starts is the lowest index).
    by_start: Vec<(u64, u64, usize)>,
    /// For each position, the position with the largest end among it and those before.
    reach: Vec<usize>,
}

impl Spans {
    /// Spans from `(start, end)` pairs; each one's index is its position in `ranges`.
    pub(super) fn new(ranges: impl IntoIterator<Item = (u64, u64)>) -> Spans {
        let mut by_start: Vec<(u64, u64, usize)> = ranges
            .into_iter()
            .enumerate()
            .map(|(i, (s, e))| (s, e, i))
            .collect();
        by_start.sort_by(|a, b| a.0.cmp(&b.0).then(b.2.cmp(&a.2)));
        let mut reach: Vec<usize> = Vec::with_capacity(by_start.len());
        for (k, span) in by_start.iter().enumerate() {
            let best = match reach.last() {
                Some(&j) if by_start[j].1 >= span.1 => j,
                _ => k,
            };
            reach.push(best);
        }
        Spans { by_start, reach }
    }

    /// The index of a span holding `[lo, hi)`: the one starting last at or before `lo`
    /// (the lowest index among equal starts) when it holds the range, else the one that
    /// reaches furthest among those starting at or before `lo`, if it does.
    pub(super) fn find(&self, lo: u64, hi: u64) -> Option<usize> {
        let k = self
            .by_start
            .partition_point(|s| s.0 <= lo)
            .checked_sub(1)?;
        [k, self.reach[k]]
            .into_iter()
            .map(|j| self.by_start[j])
            .find(|&(_, end, _)| hi <= end)
            .map(|(_, _, i)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::Spans;

    #[test]
    fn finds_the_innermost_or_the_widest_span() {
        let s = Spans::new([(0, 100), (10, 20), (10, 30), (50, 60), (200, 300)]);
        assert_eq!(s.find(12, 18), Some(1), "equal starts: the lowest index");
        assert_eq!(s.find(12, 25), Some(0), "only the wide span holds it");
        assert_eq!(s.find(55, 56), Some(3));
        assert_eq!(s.find(95, 101), None);
        assert_eq!(s.find(150, 151), None);
        assert_eq!(s.find(299, 300), Some(4));
        assert_eq!(Spans::new([]).find(0, 1), None);
    }
}
