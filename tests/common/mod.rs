//! Helpers shared by the integration tests.

/// Describes where two texts first differ: the 1-based line number and both lines
/// (`None` where one text has ended). Returns `None` when they are equal.
pub fn first_difference(expected: &[u8], actual: &[u8]) -> Option<String> {
    if expected == actual {
        return None;
    }
    let (e, a) = (
        String::from_utf8_lossy(expected),
        String::from_utf8_lossy(actual),
    );
    let line = e
        .lines()
        .zip(a.lines())
        .position(|(x, y)| x != y)
        .unwrap_or(e.lines().count().min(a.lines().count()));
    Some(format!(
        "first difference at line {} (lengths {} vs {} bytes):\n  expected: {:?}\n  actual:   {:?}",
        line + 1,
        expected.len(),
        actual.len(),
        e.lines().nth(line),
        a.lines().nth(line)
    ))
}
