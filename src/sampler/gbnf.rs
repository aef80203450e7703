//! GBNF (llama.cpp's grammar format) to llguidance's Lark syntax, so `--grammar` takes grammar
//! files written for llama.cpp. The two differ in small ways: `::=` for `:`, `root` for `start`,
//! bare character classes (`[a-z]`, Lark writes them as regexes `/[a-z]/`), `.` for any character,
//! and rules that run over several lines without a leading `|`. Strings, grouping, alternation,
//! `* + ?` and `{m,n}` mean the same in both.

/// Whether `text` is GBNF rather than Lark: some rule is defined with `::=`.
pub fn looks_like_gbnf(text: &str) -> bool {
    tokens(text).is_ok_and(|t| {
        t.windows(2)
            .any(|w| w[1] == Token::Defines && matches!(w[0], Token::Name(_)))
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Name(String),
    Defines,
    /// Emitted as is: a string literal, `( ) | * + ?`, a `{m,n}` repetition.
    Verbatim(String),
    /// A character class, without its brackets' escapes changed.
    Class(String),
    AnyChar,
}

/// Convert a GBNF grammar to Lark. Rule names are lowercased (Lark reserves upper case for
/// terminals) and `root` becomes `start`.
pub fn to_lark(text: &str) -> Result<String, String> {
    let toks = tokens(text)?;
    let mut out = String::new();
    let mut i = 0;
    while i < toks.len() {
        let (Some(Token::Name(name)), Some(Token::Defines)) = (toks.get(i), toks.get(i + 1)) else {
            return Err(format!("expected a rule (name ::= …), found {:?}", toks[i]));
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&rule_name(name));
        out.push(':');
        i += 2;
        while i < toks.len()
            && !(matches!(toks[i], Token::Name(_)) && toks.get(i + 1) == Some(&Token::Defines))
        {
            out.push(' ');
            match &toks[i] {
                Token::Name(n) => out.push_str(&rule_name(n)),
                Token::Verbatim(v) => out.push_str(v),
                Token::Class(c) => out.push_str(&class_regex(c)),
                Token::AnyChar => out.push_str("/(?s:.)/"),
                Token::Defines => return Err("unexpected ::=".into()),
            }
            i += 1;
        }
    }
    if out.is_empty() {
        return Err("the grammar has no rules".into());
    }
    out.push('\n');
    Ok(out)
}

/// A GBNF character class as a Lark regex terminal. In GBNF only `]`, `\\` and `-` are special
/// inside a class; in Rust's regex syntax `[` opens a nested class and `&&`, `~~` are set
/// operations, so those are escaped, and so is `/`, which would end the Lark regex.
fn class_regex(class: &str) -> String {
    let inner = &class[1..class.len() - 1];
    let mut out = String::from("/[");
    let mut chars = inner.chars().peekable();
    if chars.peek() == Some(&'^') {
        out.push('^');
        chars.next();
    }
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('/') => out.push_str("\\/"),
                Some(e) => {
                    out.push('\\');
                    out.push(e);
                }
                None => out.push_str("\\\\"),
            },
            '[' | '&' | '~' | '/' => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out.push_str("]/");
    out
}

fn rule_name(name: &str) -> String {
    if name == "root" {
        "start".to_string()
    } else {
        name.to_lowercase()
    }
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    // The end of a quoted or bracketed run starting at `i`, honouring backslash escapes.
    let closing = |i: usize, close: char| -> Result<usize, String> {
        let mut j = i + 1;
        while j < chars.len() {
            match chars[j] {
                '\\' => j += 2,
                c if c == close => return Ok(j),
                _ => j += 1,
            }
        }
        Err(format!(
            "unterminated {}",
            if close == '"' {
                "string"
            } else {
                "character class"
            }
        ))
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            _ if c.is_whitespace() => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ':' if chars[i..].starts_with(&[':', ':', '=']) => {
                out.push(Token::Defines);
                i += 3;
            }
            '"' => {
                let end = closing(i, '"')?;
                out.push(Token::Verbatim(chars[i..=end].iter().collect()));
                i = end + 1;
            }
            '[' => {
                let end = closing(i, ']')?;
                out.push(Token::Class(chars[i..=end].iter().collect()));
                i = end + 1;
            }
            '{' => {
                let end = chars[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .ok_or("unterminated {m,n} repetition")?;
                out.push(Token::Verbatim(chars[i..=i + end].iter().collect()));
                i += end + 1;
            }
            '(' | ')' | '|' | '*' | '+' | '?' => {
                out.push(Token::Verbatim(c.to_string()));
                i += 1;
            }
            '.' => {
                out.push(Token::AnyChar);
                i += 1;
            }
            _ if c.is_ascii_alphanumeric() || c == '_' || c == '-' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '-')
                {
                    i += 1;
                }
                out.push(Token::Name(chars[start..i].iter().collect()));
            }
            _ => return Err(format!("unexpected character {c:?}")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_llama_cpp_style_rules() {
        let gbnf = "# a list\nroot ::= \"[\" item (\", \" item)* \"]\"\nitem ::=\n  [a-z]{1,5} | Num\nNum ::= [0-9]+ .\n";
        assert!(looks_like_gbnf(gbnf));
        assert!(!looks_like_gbnf("start: \"a\" | b\nb: /[0-9]/"));
        assert_eq!(
            to_lark(gbnf).unwrap(),
            "start: \"[\" item ( \", \" item ) * \"]\"\nitem: /[a-z]/ {1,5} | num\nnum: /[0-9]/ + /(?s:.)/\n"
        );
        // Punctuation that Rust's regex classes treat specially is escaped.
        assert_eq!(
            to_lark("root ::= [!&/[\\]~^-]").unwrap(),
            "start: /[!\\&\\/\\[\\]\\~^-]/\n"
        );
        assert!(to_lark("root ::= \"open").is_err());
        assert!(to_lark("\"x\" ::= y").is_err());
    }
}
