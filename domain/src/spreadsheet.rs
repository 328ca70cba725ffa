//! CSV cells made safe to open in a spreadsheet (OWASP's CSV injection rule): a cell that
//! begins with `=`, `+`, `-`, `@`, a tab or a carriage return would be read as a formula, so
//! `=HYPERLINK(…)` in a dataset, a model's answer or an email address would run on the
//! reader's machine. Such a cell is written with a leading `'`, which spreadsheets show as
//! text and do not display. Plain numbers (`-5`, `+2.5`) are left as they are: they are not
//! formulas, and arithmetic targets must stay numbers.

use std::borrow::Cow;

/// The cell as written to a CSV file: unchanged, or with a leading `'` when a spreadsheet
/// would take it for a formula.
pub fn formula_safe(cell: &str) -> Cow<'_, str> {
    let starts_a_formula = cell
        .chars()
        .next()
        .is_some_and(|first| matches!(first, '=' | '+' | '-' | '@' | '\t' | '\r'));
    if starts_a_formula && !is_plain_number(cell) {
        Cow::Owned(format!("'{cell}"))
    } else {
        Cow::Borrowed(cell)
    }
}

/// A signed decimal such as `-5` or `+2.50`: digits, at most one point, nothing else.
fn is_plain_number(cell: &str) -> bool {
    let unsigned = cell.strip_prefix(['-', '+']).unwrap_or(cell);
    let mut parts = unsigned.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let fraction = parts.next();
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
    digits(whole) && fraction.is_none_or(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_become_text_and_numbers_stay_numbers() {
        for (cell, written) in [
            (
                "=HYPERLINK(\"http://x.test\",\"click\")",
                "'=HYPERLINK(\"http://x.test\",\"click\")",
            ),
            ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
            ("-2+3", "'-2+3"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\t=1", "'\t=1"),
            ("\r=1", "'\r=1"),
            ("-", "'-"),
            ("-5", "-5"),
            ("+2.50", "+2.50"),
            ("-.5", "'-.5"),
            ("Paris", "Paris"),
            ("a=b", "a=b"),
            ("", ""),
        ] {
            assert_eq!(formula_safe(cell), written, "{cell:?}");
        }
    }
}
