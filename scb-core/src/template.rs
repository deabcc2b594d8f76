//! Texts with `{name}` placeholders, split once when a layer is built: the one parser
//! behind redirects' `Location`, header rules' values, rewrites' paths, the response
//! cache's keys (in scb-proxy) and the access log's formats, so that every template in a
//! config reads alike.
//!
//! `{{` and `}}` are a literal `{` and `}`, as in Rust's `format!`: the way to write a
//! brace of the text's own (a JSON access-log format's). A lone `}` is text too.
//!
//! ```
//! let pieces = scb_core::template::split(
//!     "{{\"path\":\"{path}\"}}",
//!     |text| text.to_string(),
//!     |name| Ok::<_, ()>(format!("<{name}>")),
//!     || (),
//! )
//! .unwrap();
//! assert_eq!(pieces, ["{\"path\":\"", "<path>", "\"}"]);
//! ```

/// Splits `template` into the literal texts between its placeholders (`text` makes a
/// piece of one) and its placeholders (`field` makes a piece of a name, or refuses it).
/// `{{` and `}}` are a literal brace in the text. A `{` without its `}` is `unclosed`'s
/// error. Empty texts are left out.
///
/// # Errors
///
/// What `field` returns for a name it refuses, or `unclosed`'s error.
pub fn split<P, E>(
    template: &str,
    text: impl Fn(Box<str>) -> P,
    field: impl Fn(&str) -> Result<P, E>,
    unclosed: impl Fn() -> E,
) -> Result<Vec<P>, E> {
    let mut pieces = Vec::new();
    // The text since the last placeholder, its escaped braces made single.
    let mut literal = String::new();
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        literal.push_str(&rest[..at]);
        let brace = &rest[at..];
        if brace.starts_with("{{") || brace.starts_with("}}") {
            literal.push_str(&brace[..1]);
            rest = &brace[2..];
            continue;
        }
        if let Some(after) = brace.strip_prefix('}') {
            literal.push('}');
            rest = after;
            continue;
        }
        let close = brace.find('}').ok_or_else(&unclosed)?;
        if !literal.is_empty() {
            pieces.push(text(std::mem::take(&mut literal).into()));
        }
        pieces.push(field(&brace[1..close])?);
        rest = &brace[close + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(text(literal.into()));
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    enum P {
        T(Box<str>),
        F(String),
    }

    fn parse(t: &str) -> Result<Vec<P>, &'static str> {
        split(
            t,
            P::T,
            |name| match name {
                "a" | "b" => Ok(P::F(name.to_owned())),
                _ => Err("unknown"),
            },
            || "unclosed",
        )
    }

    #[test]
    fn texts_and_fields_in_order() {
        assert_eq!(
            parse("x{a}{b}y").unwrap(),
            [
                P::T("x".into()),
                P::F("a".into()),
                P::F("b".into()),
                P::T("y".into())
            ]
        );
        assert_eq!(parse("").unwrap(), []);
        assert_eq!(parse("x{c}"), Err("unknown"));
        assert_eq!(parse("x{a"), Err("unclosed"));
    }

    #[test]
    fn doubled_braces_are_text_and_a_lone_closing_brace_is_text() {
        assert_eq!(
            parse("{{x{a}}}").unwrap(),
            [P::T("{x".into()), P::F("a".into()), P::T("}".into())]
        );
        assert_eq!(
            parse("{{\"k\":{{}}}}").unwrap(),
            [P::T("{\"k\":{}}".into())]
        );
        assert_eq!(parse("a}b{{").unwrap(), [P::T("a}b{".into())]);
        assert_eq!(
            parse("{a}}x").unwrap(),
            [P::F("a".into()), P::T("}x".into())]
        );
        assert_eq!(
            parse("{{{a}").unwrap(),
            [P::T("{".into()), P::F("a".into())]
        );
        assert_eq!(parse("{{a"), Ok(vec![P::T("{a".into())]));
        assert_eq!(parse("{ {a}"), Err("unknown"));
    }
}
