//! Campaigns: many accounts, one payload (docs/DESIGN.md §3d).

pub mod fingerprint;
pub mod link_domains;
