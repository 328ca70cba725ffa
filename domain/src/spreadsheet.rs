//! CSV cells made safe to open in a spreadsheet (OWASP's CSV injection rule): a cell that
//! begins with `=`, `+`, `-`, `@`, a tab or a carriage return would be read as a formula, so
//! `=HYPERLINK(…)` in a dataset, a model's answer or an email address would run on the
//! reader's machine. Such a cell is written with a leading `'`, which spreadsheets show as
//! text and do not display. Plain numbers (`-5`, `+2.5`) are left as they are: they are not
//! formulas, and arithmetic targets must stay numbers.

/// Quotes, in place, every cell of a record that a spreadsheet would take for a formula (the
/// others are left untouched, with no copy made).
pub fn quote_formulas(record: &mut [String]) {
    for cell in record.iter_mut().filter(|cell| starts_a_formula(cell)) {
        cell.insert(0, '\'');
    }
}

fn starts_a_formula(cell: &str) -> bool {
    cell.chars()
        .next()
        .is_some_and(|first| matches!(first, '=' | '+' | '-' | '@' | '\t' | '\r'))
        && !is_plain_number(cell)
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
        let cases = [
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
        ];
        let mut record: Vec<String> = cases.iter().map(|(cell, _)| cell.to_string()).collect();
        quote_formulas(&mut record);
        for ((cell, written), quoted) in cases.iter().zip(&record) {
            assert_eq!(quoted, written, "{cell:?}");
        }
    }
}
