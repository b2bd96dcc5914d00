//! The shared rules ([`idem_rules`]) as the runtime's setters apply them: a TTL out of range or a
//! malformed operation name is a programming error, refused where it is set, as the attribute
//! refuses it at compile time.

use std::time::Duration;

/// `ttl`, or a panic naming `setter` and the rule.
#[track_caller]
pub fn checked_ttl(setter: &str, ttl: Duration) -> Duration {
    match idem_rules::ttl::check(ttl) {
        Ok(ttl) => ttl,
        Err(error) => panic!("{setter}: {error}"),
    }
}

/// `name`, or a panic naming `setter` and the rule.
#[track_caller]
pub fn checked_name(setter: &str, name: &str) {
    if let Err(error) = idem_rules::name::validate(name) {
        panic!("{setter}: {error}");
    }
}
