//! Header fields sliced out of a frozen head, not copied.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

/// Where the fields of one head lie in its read buffer.
///
/// Recorded while the parser (httparse) still borrows the buffer; used once the head's
/// bytes are split off and frozen, so that every value is a slice of them (a reference
/// count) rather than a copy. Kept per connection and reused from head to head.
#[derive(Debug, Default)]
pub struct FieldOffsets {
    fields: Vec<FieldAt>,
}

#[derive(Clone, Copy, Debug)]
struct FieldAt {
    name: (usize, usize),
    value: (usize, usize),
}

/// Why [`FieldOffsets::to_map`] refused a head.
#[derive(Debug, PartialEq, Eq)]
pub enum FieldError<E> {
    /// A field name that is not a token.
    Name,
    /// A field value with bytes a value may not hold.
    Value,
    /// The caller's check refused the field.
    Refused(E),
}

impl FieldOffsets {
    /// Records where each `(name, value)` of `fields` lies in `buf`: every one of them must
    /// be a slice of `buf`, as httparse's are.
    pub fn record<'a>(&mut self, buf: &[u8], fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) {
        let base = buf.as_ptr() as usize;
        let at = |s: &[u8]| (s.as_ptr() as usize - base, s.len());
        self.fields.clear();
        self.fields.extend(fields.map(|(name, value)| FieldAt {
            name: at(name),
            value: at(value),
        }));
    }

    /// The fields as a header map, sliced out of `head`: the front of the buffer
    /// [`record`](Self::record) saw, frozen. `spare` is room for fields added later (no
    /// growing the map on the way); `see` looks at each field, in order, and says whether
    /// it goes in (`Ok(false)`: a field read for its meaning here, left out so that it need
    /// not be removed after, which costs a hash).
    pub fn to_map<E>(
        &self,
        head: &Bytes,
        spare: usize,
        mut see: impl FnMut(&HeaderName, &HeaderValue) -> Result<bool, E>,
    ) -> Result<HeaderMap, FieldError<E>> {
        let mut headers = HeaderMap::with_capacity(self.fields.len() + spare);
        for field in &self.fields {
            let (start, len) = field.name;
            let name =
                HeaderName::from_bytes(&head[start..start + len]).map_err(|_| FieldError::Name)?;
            let (start, len) = field.value;
            let value = HeaderValue::from_maybe_shared(head.slice(start..start + len))
                .map_err(|_| FieldError::Value)?;
            if see(&name, &value).map_err(FieldError::Refused)? {
                headers.append(name, value);
            }
        }
        Ok(headers)
    }
}

/// Whether `headers` have a field of any of `names`.
///
/// One pass over the map's names, comparing: a message has a handful of fields, and the
/// names asked about are usually absent, so this costs less than a lookup (a hash and a
/// probe, about 100 instructions under callgrind) for each name asked.
///
/// ```
/// use http::{HeaderMap, HeaderValue, header};
/// let mut headers = HeaderMap::new();
/// headers.insert(header::HOST, HeaderValue::from_static("example.com"));
/// assert!(scb_core::http1::has_any(&headers, &[header::RANGE, header::HOST]));
/// assert!(!scb_core::http1::has_any(&headers, &[header::RANGE]));
/// ```
pub fn has_any(headers: &HeaderMap, names: &[HeaderName]) -> bool {
    headers.keys().any(|name| names.contains(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets_of(buf: &[u8], fields: &[(&str, &str)]) -> FieldOffsets {
        let find = |s: &str| {
            let at = buf
                .windows(s.len())
                .position(|w| w == s.as_bytes())
                .unwrap();
            &buf[at..at + s.len()]
        };
        let mut offsets = FieldOffsets::default();
        offsets.record(buf, fields.iter().map(|(n, v)| (find(n), find(v))));
        offsets
    }

    #[test]
    fn values_are_slices_of_the_head_in_order() {
        let head = Bytes::from_static(b"X-A: 1\r\nSet-Cookie: a\r\nSet-Cookie: b\r\n\r\n");
        let offsets = offsets_of(
            &head,
            &[("X-A", "1"), ("Set-Cookie", "a"), ("Set-Cookie", "b")],
        );
        let mut seen = Vec::new();
        let map = offsets
            .to_map(&head, 4, |name, value| {
                seen.push(format!("{name}={}", value.to_str().unwrap()));
                Ok::<_, ()>(true)
            })
            .unwrap();
        assert_eq!(seen, ["x-a=1", "set-cookie=a", "set-cookie=b"]);
        assert_eq!(
            map.get_all("set-cookie").iter().collect::<Vec<_>>(),
            ["a", "b"]
        );
        let value = map["x-a"].as_bytes().as_ptr();
        assert!(head.as_ptr_range().contains(&value), "the value was copied");
        assert!(map.capacity() >= 3 + 4);
    }

    #[test]
    fn fields_the_reader_leaves_out_are_not_in_the_map() {
        let head = Bytes::from_static(b"A: 1\r\nB: 2\r\nA: 3\r\n");
        let offsets = offsets_of(&head, &[("A", "1"), ("B", "2"), ("A", "3")]);
        let mut seen = 0;
        let map = offsets
            .to_map(&head, 0, |name, _| {
                seen += 1;
                Ok::<_, ()>(name != "b")
            })
            .unwrap();
        assert_eq!(seen, 3, "every field is seen");
        assert!(!map.contains_key("b"));
        assert_eq!(map.get_all("a").iter().collect::<Vec<_>>(), ["1", "3"]);
    }

    #[test]
    fn bad_names_and_values_and_refused_fields_are_errors() {
        let head = Bytes::from_static(b"B@d: 1\r\nok: v\x7f\r\n");
        assert_eq!(
            offsets_of(&head, &[("B@d", "1")]).to_map(&head, 0, |_, _| Ok::<_, ()>(true)),
            Err(FieldError::Name)
        );
        assert_eq!(
            offsets_of(&head, &[("ok", "v\x7f")]).to_map(&head, 0, |_, _| Ok::<_, ()>(true)),
            Err(FieldError::Value)
        );
        let head = Bytes::from_static(b"a: 1\r\n");
        assert_eq!(
            offsets_of(&head, &[("a", "1")]).to_map(&head, 0, |_, _| Err("no")),
            Err(FieldError::Refused("no"))
        );
    }
}
