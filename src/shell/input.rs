//! Splitting input into statements: `;` ends a statement unless it is
//! inside a quoted string, a quoted identifier or a comment.

/// Splits `text` into complete statements (without their `;`) and the
/// unfinished rest (empty or only whitespace and comments when nothing is
/// pending). Backslash meta-commands are whole lines of their own.
pub fn split(text: &str) -> (Vec<String>, String) {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    let mut at_line_start = true;
    while let Some(c) = chars.next() {
        if at_line_start && c == '\\' && current.trim().is_empty() {
            // A meta-command: the rest of the line.
            let mut line = String::from("\\");
            for c in chars.by_ref() {
                if c == '\n' {
                    break;
                }
                line.push(c);
            }
            statements.push(line.trim().to_string());
            current.clear();
            at_line_start = true;
            continue;
        }
        at_line_start = c == '\n';
        match c {
            ';' => {
                if !current.trim().is_empty() {
                    statements.push(current.trim().to_string());
                }
                current.clear();
            }
            '\'' | '"' => {
                current.push(c);
                // Until the closing quote; a doubled quote is an escaped one.
                loop {
                    match chars.next() {
                        None => return (statements, current),
                        Some(q) if q == c => {
                            current.push(q);
                            if chars.peek() == Some(&c) {
                                current.push(c);
                                chars.next();
                            } else {
                                break;
                            }
                        }
                        Some(other) => current.push(other),
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                // A line comment: dropped.
                for c in chars.by_ref() {
                    if c == '\n' {
                        current.push('\n');
                        at_line_start = true;
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut closed = false;
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if prev == '*' && c == '/' {
                        closed = true;
                        break;
                    }
                    prev = c;
                }
                if !closed {
                    current.push_str("/*");
                    return (statements, current);
                }
                current.push(' ');
            }
            c => current.push(c),
        }
    }
    (statements, current)
}

/// Whether `text` holds an unfinished statement (the shell keeps reading).
pub fn is_incomplete(text: &str) -> bool {
    !split(text).1.trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semicolons_inside_strings_and_comments_do_not_split() {
        let (done, rest) = split("SELECT 'a;b', \"x;y\" -- c;d\nFROM t; SELECT /* ; */ 2;");
        assert_eq!(done, vec!["SELECT 'a;b', \"x;y\" \nFROM t", "SELECT   2"]);
        assert_eq!(rest.trim(), "");
    }

    #[test]
    fn unfinished_statements_are_kept() {
        assert!(is_incomplete("SELECT 1"));
        assert!(is_incomplete("SELECT 'it''s;"));
        assert!(is_incomplete("SELECT /* ; "));
        assert!(!is_incomplete("SELECT 'it''s';"));
        assert!(!is_incomplete("  -- only a comment\n"));
        let (done, _) = split("SELECT 'it''s';");
        assert_eq!(done, vec!["SELECT 'it''s'"]);
    }

    #[test]
    fn meta_commands_are_lines() {
        let (done, rest) = split("\\d\n\\d balloon\nSELECT 1;\n");
        assert_eq!(done, vec!["\\d", "\\d balloon", "SELECT 1"]);
        assert_eq!(rest.trim(), "");
        assert!(!is_incomplete("\\timing"));
    }
}
