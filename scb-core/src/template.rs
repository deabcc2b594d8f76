//! Texts with `{name}` placeholders, split once when a layer is built: the one parser
//! behind redirects' `Location`, header rules' values, rewrites' paths and the response
//! cache's keys (in scb-proxy), so that every template in a config reads alike.

/// Splits `template` into the literal texts between its placeholders (`text` makes a
/// piece of one) and its placeholders (`field` makes a piece of a name, or refuses it).
/// A `{` without its `}` is `unclosed`'s error. Empty texts are left out.
pub fn split<P, E>(
    template: &str,
    text: impl Fn(Box<str>) -> P,
    field: impl Fn(&str) -> Result<P, E>,
    unclosed: impl Fn() -> E,
) -> Result<Vec<P>, E> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            pieces.push(text(rest[..open].into()));
        }
        let close = rest[open..].find('}').ok_or_else(&unclosed)? + open;
        pieces.push(field(&rest[open + 1..close])?);
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(text(rest.into()));
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
}
