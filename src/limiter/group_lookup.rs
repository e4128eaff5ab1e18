//! A text's near-duplicate group look-up as Redis runs it (`lua/group.lua`, the campaign
//! groups' store, `crate::campaigns::groups`): a call of its own, or folded into the rules'
//! call on a single server ([`FoldedGroup`]), where the limiter's script defines the same
//! function and runs it before the rules.

use super::LimiterError;

/// The look-up as a Lua function, `group(here, before, sig, fresh, expires, needed, bands)`,
/// answering the group's id (`lua/group.lua` says what each argument is).
macro_rules! group_function {
    () => {
        concat!(
            "local function group(here, before, sig, fresh, expires, needed, bands)\n",
            include_str!("lua/group.lua"),
            "end\n"
        )
    };
}

/// The look-up's function, which the limiter's script defines (redis_store.rs).
pub(super) const FUNCTION: &str = group_function!();

/// The group script: the look-up as a call of its own, its arguments in [`GroupLookup`]'s
/// order.
pub const SCRIPT: &str = concat!(
    group_function!(),
    "return group(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4] + 0, { unpack(ARGV, 5) })\n"
);

/// A text's group look-up as the group script's keys and arguments.
#[derive(Debug, Clone)]
pub struct GroupLookup {
    /// The store of this generation and of the last.
    pub stores: [String; 2],
    /// The script's arguments.
    pub args: Vec<Vec<u8>>,
    /// The id of the group the text starts if it matches none.
    pub fresh: [u8; 8],
}

/// A text's group looked up in the rules' own script call, before them: one round trip for
/// both (a single Redis server only; the campaign groups ask whether the store folds first).
pub struct FoldedGroup<'a> {
    pub lookup: &'a GroupLookup,
    /// The checks whose keys hold the group's id: they are written with the look-up's fresh
    /// id, which the script replaces when the text joins an older group. A call with a check
    /// listed here whose key lacks that id is refused before it is sent.
    pub checks: Vec<usize>,
}

/// A group's id as counts and campaigns name it: its 8 bytes as 16 hexadecimal digits (the
/// limiter's script writes a folded look-up's group into its keys the same way).
pub fn group_id(id: [u8; 8]) -> String {
    format!("{:016x}", u64::from_be_bytes(id))
}

/// A group's id from a script's answer: its 8 bytes.
pub fn group_id_of(reply: &[u8]) -> Result<String, LimiterError> {
    let id = <[u8; 8]>::try_from(reply)
        .map_err(|_| LimiterError::BadReply(format!("a group id of {reply:?}")))?;
    Ok(group_id(id))
}
