//! Number formatting shared by the text renderers.

/// An integer with thousands separators: `8907556` -> `8,907,556`.
pub fn count(n: impl Into<u128>) -> String {
    let digits = n.into().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A number with `decimals` decimals, or `-` when absent.
pub fn fixed(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(count(0u64), "0");
        assert_eq!(count(999u64), "999");
        assert_eq!(count(1000u64), "1,000");
        assert_eq!(count(8_907_556u64), "8,907,556");
        assert_eq!(
            count(u128::from(u64::MAX) * 2),
            "36,893,488,147,419,103,230"
        );
    }

    #[test]
    fn fixed_decimals_and_missing() {
        assert_eq!(fixed(Some(1.23456), 2), "1.23");
        assert_eq!(fixed(None, 2), "-");
    }
}
