//! Enums spelled by one fixed name per variant (scopes, actions, states) derive their names
//! with strum; what they share is the error for a name that no variant has.

pub(crate) fn unknown<T>(what: &str, name: &str) -> String
where
    T: strum::VariantArray + Copy + Into<&'static str>,
{
    let known: Vec<&'static str> = T::VARIANTS.iter().map(|v| (*v).into()).collect();
    format!("unknown {what} `{name}`; one of {}", known.join(", "))
}
