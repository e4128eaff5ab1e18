//! The login throttle. Every attempt is counted before its password is checked, atomically in
//! the limiter, so parallel attempts cannot slip past the count. It is decided from the name as
//! typed, before the name is looked up: a name that is no admin's is counted, answered and
//! audited exactly as an admin's is, so its answers do not say which names exist.
//!
//! Within a window, an attempt is refused past any of:
//! - 10 per (name, source), 3 while the name is under attack (over 100 attempts from all
//!   sources). The source is the client address (IPv6: its /64), or a known device: a browser
//!   that logged in as that name before and holds the cookie then signed for it;
//! - 30 per client address, whatever the names, so that a new name each time is bounded too;
//! - while the name is under attack, 10 per (name, network): an IPv6 /48 or an IPv4 /24, so
//!   that a large block's many /64s get no more than a small one.
//!
//! A known device is counted by itself alone: an attacker who shares its address or network,
//! or floods its name, does not lock it out.

use hmac::{Hmac, Mac};
use ipnet::IpNet;
use serde_json::json;
use sha2::Sha256;

use super::Dashboard;
use crate::audit::{self, Entry};
use crate::http::ClientAddr;
use crate::limiter::{
    Algorithm, Check, Decision, EdgeMode, LimitKey, Limiter, LimiterError, Quota,
};

/// Attempts per (name, source) in the window.
const PAIR_ATTEMPTS: u64 = 10;
/// Attempts per (name, source) while the name is under attack.
const PAIR_ATTEMPTS_UNDER_ATTACK: u64 = 3;
/// Attempts per name from all sources in the window, beyond which it is under attack.
const NAME_CEILING: u64 = 100;
/// Attempts per client address at any names.
const ADDRESS_ATTEMPTS: u64 = 30;
/// Attempts per (name, network) while the name is under attack.
const NETWORK_ATTEMPTS_UNDER_ATTACK: u64 = 10;
const WINDOW_SECS: u64 = 900;
/// Bytes of a tag kept in a key or a cookie: 128 bits, as hard to guess as a session token.
const TAG_BYTES: usize = 16;

fn quota(limit: u64) -> Quota {
    Quota::new(limit, WINDOW_SECS, Algorithm::HashCounters(EdgeMode::Harsh))
}

/// Names login counters and signs known-device cookies, under a key derived from the
/// service's secret: keys reveal no name and stay short however long the name typed, and no
/// one can make a device cookie.
#[derive(Clone)]
pub struct LoginKey(Hmac<Sha256>);

impl LoginKey {
    pub fn new(secret: &[u8]) -> LoginKey {
        // HMAC takes a key of any length.
        LoginKey(
            <Hmac<Sha256> as Mac>::new_from_slice(secret)
                .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length")),
        )
    }

    fn mac(&self, what: &str, name: &str, device: &str) -> Hmac<Sha256> {
        let mut mac = self.0.clone();
        // Lengths first: no two (name, device) pairs write the same bytes.
        for part in [what, name, device] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }

    fn name_tag(&self, name: &str) -> String {
        let tag = self.mac("name", name, "").finalize().into_bytes();
        hex::encode(&tag[..TAG_BYTES])
    }

    /// A new known-device cookie's value for `name`: a random device id and its tag.
    pub(super) fn device_cookie(&self, name: &str) -> String {
        let device = hex::encode(rand::random::<[u8; TAG_BYTES]>());
        let tag = self.mac("device", name, &device).finalize().into_bytes();
        format!("{device}.{}", hex::encode(&tag[..TAG_BYTES]))
    }

    /// The device id of a known-device cookie when it was made for `name`, compared in
    /// constant time.
    pub(super) fn device<'a>(&self, cookie: &'a str, name: &str) -> Option<&'a str> {
        let (device, tag) = cookie.split_once('.')?;
        let tag = hex::decode(tag).ok()?;
        (device.len() == 2 * TAG_BYTES && tag.len() == TAG_BYTES)
            .then(|| self.mac("device", name, device).verify_truncated_left(&tag))?
            .ok()
            .map(|()| device)
    }
}

/// The network an attack from `client` is also counted by: its /48 (IPv6) or /24 (IPv4).
fn network(client: &ClientAddr) -> IpNet {
    let prefix = match client.0 {
        IpNet::V4(_) => 24,
        IpNet::V6(_) => 48,
    };
    IpNet::new(client.0.addr(), prefix)
        .map(|net| net.trunc())
        .unwrap_or(client.0)
}

/// The throttle's answer to one attempt.
pub(super) enum Verdict {
    Allowed,
    Locked { retry_after_secs: u64 },
}

impl Verdict {
    /// The verdict of the (name, source) count: 10 attempts, 3 while the name is under attack.
    fn of_pair(source: &Decision, name: &Decision) -> Verdict {
        let allowed_here = if name.allowed {
            PAIR_ATTEMPTS
        } else {
            PAIR_ATTEMPTS_UNDER_ATTACK
        };
        if source.allowed && source.count <= allowed_here {
            Verdict::Allowed
        } else {
            Verdict::after(source)
        }
    }

    fn after(decision: &Decision) -> Verdict {
        let wait_ms = if decision.allowed {
            decision.reset_after_ms
        } else {
            decision.retry_after_ms
        };
        Verdict::Locked {
            retry_after_secs: wait_ms.div_ceil(1000),
        }
    }
}

/// The counters of one attempt.
pub(super) struct Attempts {
    /// Per (name, source).
    source: LimitKey,
    name: LimitKey,
    /// Per client address and per (name, network); none for a known device.
    address: Option<(LimitKey, LimitKey)>,
}

impl Attempts {
    /// The counters of an attempt at `name` from `client`, or from a known `device`.
    pub(super) fn new(
        dashboard: &Dashboard,
        name: &str,
        client: &ClientAddr,
        device: Option<&str>,
    ) -> Attempts {
        let key = |subject: String, limit: u64| {
            dashboard.keys.key(&subject, "admin-login", &quota(limit))
        };
        let tag = dashboard.login_key.name_tag(name);
        let source = match device {
            Some(device) => format!("admin-login-device:{tag}:{device}"),
            None => format!("admin-login:{tag}:{}", client.0),
        };
        Attempts {
            source: key(source, PAIR_ATTEMPTS),
            name: key(format!("admin-login-name:{tag}"), NAME_CEILING),
            address: device.is_none().then(|| {
                (
                    key(
                        format!("admin-login-address:{}", client.0),
                        ADDRESS_ATTEMPTS,
                    ),
                    key(
                        format!("admin-login-network:{tag}:{}", network(client)),
                        NETWORK_ATTEMPTS_UNDER_ATTACK,
                    ),
                )
            }),
        }
    }

    /// Counts this attempt and says whether its password may be checked. The address is
    /// counted first, and alone: an address past its count makes no keys for the names it
    /// tries.
    pub(super) async fn judge(&self, limiter: &Limiter) -> Result<Verdict, LimiterError> {
        if let Some((address, _)) = &self.address {
            let decision = limiter
                .check(address, &quota(ADDRESS_ATTEMPTS), 1, None)
                .await?;
            if !decision.allowed {
                return Ok(Verdict::after(&decision));
            }
        }
        // The ceiling keeps counting past its limit: an attack that goes on stays on record.
        let ceiling = quota(NAME_CEILING).counting_over_limit();
        let pair = quota(PAIR_ATTEMPTS);
        let decisions = limiter
            .check_batch(
                &[
                    Check::new(&self.source, &pair, 1),
                    Check::new(&self.name, &ceiling, 1),
                ],
                None,
            )
            .await?;
        let (Some(source), Some(name)) = (decisions.first(), decisions.get(1)) else {
            return Err(LimiterError::BadReply("a short batch reply".into()));
        };
        if let Verdict::Locked { retry_after_secs } = Verdict::of_pair(source, name) {
            return Ok(Verdict::Locked { retry_after_secs });
        }
        let under_attack = !name.allowed;
        if let (true, Some((_, network))) = (under_attack, &self.address) {
            let decision = limiter
                .check(network, &quota(NETWORK_ATTEMPTS_UNDER_ATTACK), 1, None)
                .await?;
            if !decision.allowed {
                return Ok(Verdict::after(&decision));
            }
        }
        Ok(Verdict::Allowed)
    }

    /// After the right password: this source's count for the name starts again.
    pub(super) async fn clear(&self, limiter: &Limiter) -> Result<(), LimiterError> {
        limiter
            .clear(&[(&self.source, &quota(PAIR_ATTEMPTS))])
            .await
    }
}

/// Records a refused attempt. Names are the caller's to choose and bound nothing, so a client
/// address gets one audit row per window, and its later refusals raise the row's count.
pub(super) async fn record_refusal(
    dashboard: &Dashboard,
    client: &ClientAddr,
) -> Result<(), sqlx::Error> {
    let refusals = quota(1).counting_over_limit();
    let key = dashboard.keys.key(
        &format!("admin-login-refused:{}", client.0),
        "admin-login",
        &refusals,
    );
    let first = match dashboard.limiter.check(&key, &refusals, 1, None).await {
        Ok(decision) => decision.count <= 1,
        Err(e) => {
            // The attempt is refused all the same; only its record is lost.
            tracing::warn!(error = %e, "a refused login was not counted for the audit log");
            return Ok(());
        }
    };
    let client = client.0.to_string();
    if !first {
        let raised = sqlx::query(
            "UPDATE audit_log
             SET detail = jsonb_set(detail, '{refused}',
                 to_jsonb(COALESCE((detail->>'refused')::bigint, 0) + 1))
             WHERE id = (SELECT id FROM audit_log
                 WHERE action = 'login_locked' AND detail->>'client' = $1
                   AND at > now() - make_interval(secs => $2)
                 ORDER BY at DESC, id DESC LIMIT 1)",
        )
        .bind(&client)
        .bind(WINDOW_SECS as f64)
        .execute(&dashboard.pool)
        .await?;
        if raised.rows_affected() > 0 {
            return Ok(());
        }
    }
    let entry = Entry {
        detail: json!({"client": client, "refused": 1}),
        ..Entry::new(audit::SYSTEM, "login_locked")
    };
    audit::write(&dashboard.pool, entry).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(allowed: bool, count: u64) -> Decision {
        Decision {
            allowed,
            count,
            limit: 0,
            remaining: 0,
            retry_after_ms: 60_000,
            reset_after_ms: 900_000,
        }
    }

    #[test]
    fn a_source_gets_ten_attempts_and_three_while_its_name_is_attacked() {
        let calm = decision(true, 50);
        let attacked = decision(false, 500);
        assert!(matches!(
            Verdict::of_pair(&decision(true, 10), &calm),
            Verdict::Allowed
        ));
        assert!(matches!(
            Verdict::of_pair(&decision(false, 10), &calm),
            Verdict::Locked {
                retry_after_secs: 60
            }
        ));
        assert!(matches!(
            Verdict::of_pair(&decision(true, 3), &attacked),
            Verdict::Allowed
        ));
        assert!(matches!(
            Verdict::of_pair(&decision(true, 4), &attacked),
            Verdict::Locked {
                retry_after_secs: 900
            }
        ));
    }

    #[test]
    fn a_device_cookie_is_good_for_its_own_name_only() {
        let key = LoginKey::new(b"a secret of the service, long enough");
        let cookie = key.device_cookie("alice");
        let device = key.device(&cookie, "alice").expect("alice's device");
        assert!(cookie.starts_with(device));
        assert_eq!(key.device(&cookie, "bob"), None);
        assert_eq!(
            LoginKey::new(b"another secret").device(&cookie, "alice"),
            None
        );
        let forged = format!("{}.{}", "0".repeat(32), "0".repeat(32));
        assert_eq!(key.device(&forged, "alice"), None);
        assert_eq!(key.device("junk", "alice"), None);
    }

    #[test]
    fn networks_are_the_48_and_the_24() {
        let net = |s: &str| network(&ClientAddr(s.parse().expect("net"))).to_string();
        assert_eq!(net("2001:db8:1:2::/64"), "2001:db8:1::/48");
        assert_eq!(net("198.51.100.7/32"), "198.51.100.0/24");
    }
}
