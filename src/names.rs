//! Enums spelled by one fixed name per variant (scopes, actions, states): parsing a name is
//! finding the variant that prints as it.

pub(crate) fn parse<T: Copy>(
    variants: &[T],
    name: fn(T) -> &'static str,
    s: &str,
    what: &str,
) -> Result<T, String> {
    variants
        .iter()
        .copied()
        .find(|v| name(*v) == s)
        .ok_or_else(|| {
            let known: Vec<&str> = variants.iter().map(|v| name(*v)).collect();
            format!("unknown {what} `{s}`; one of {}", known.join(", "))
        })
}
