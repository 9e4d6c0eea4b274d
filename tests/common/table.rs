//! Reading pagewise's tables as a terminal shows them: display widths and right-aligned
//! columns.

/// Terminal display width: East Asian wide and fullwidth characters take two columns.
pub fn display_width(s: &str) -> usize {
    s.chars()
        .map(|c| {
            let u = c as u32;
            let wide = matches!(u,
                0x1100..=0x115F
                | 0x2E80..=0x303E
                | 0x3041..=0x33FF
                | 0x3400..=0x4DBF
                | 0x4E00..=0x9FFF
                | 0xA000..=0xA4CF
                | 0xAC00..=0xD7A3
                | 0xF900..=0xFAFF
                | 0xFE30..=0xFE4F
                | 0xFF00..=0xFF60
                | 0xFFE0..=0xFFE6
                | 0x20000..=0x3FFFD);
            if wide {
                2
            } else {
                1
            }
        })
        .sum()
}

/// The display column where `col` (a header word) ends in the table's header line.
pub fn header_end(header: &str, col: &str) -> usize {
    let i = header
        .find(col)
        .unwrap_or_else(|| panic!("no {col} in {header}"));
    display_width(&header[..i + col.len()])
}

/// The text of a right-aligned column in `row`, given where it ends (display columns) and its
/// header's width... returned as the `width` display columns ending there.
pub fn cell_ending_at(row: &str, end: usize, width: usize) -> String {
    let mut col = 0;
    let mut cells = Vec::new();
    for c in row.chars() {
        let w = display_width(&c.to_string());
        cells.push((col, col + w, c));
        col += w;
    }
    cells
        .iter()
        .filter(|(a, b, _)| *a >= end.saturating_sub(width) && *b <= end)
        .map(|(_, _, c)| *c)
        .collect()
}
