//! Which responses release the record instead of being stored: every 5xx, and the client
//! errors an adapter treats as requests that never started.

use std::fmt;

use http::StatusCode;

/// Whether a response with `status` releases the record (and rolls back atomic-mode writes)
/// instead of being stored: every 5xx, and the 4xx statuses in `released`.
pub(crate) fn releases(status: StatusCode, released: ClientErrors) -> bool {
    status.is_server_error() || released.contains(status)
}

/// A set of 4xx statuses: one bit per status from 400 to 499.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ClientErrors(u128);

impl fmt::Debug for ClientErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.iter().map(|s| s.as_u16()))
            .finish()
    }
}

impl ClientErrors {
    /// The empty set.
    pub(crate) const NONE: Self = Self(0);

    /// Adds `status`; `false` (and nothing added) when it is not a 4xx.
    pub(crate) fn insert(&mut self, status: StatusCode) -> bool {
        let Some(bit) = Self::bit(status) else {
            return false;
        };
        self.0 |= bit;
        true
    }

    pub(crate) fn contains(self, status: StatusCode) -> bool {
        Self::bit(status).is_some_and(|bit| self.0 & bit != 0)
    }

    /// The statuses in the set, in order.
    fn iter(self) -> impl Iterator<Item = StatusCode> {
        (400..500u16)
            .filter_map(|code| StatusCode::from_u16(code).ok())
            .filter(move |status| self.contains(*status))
    }

    fn bit(status: StatusCode) -> Option<u128> {
        status
            .is_client_error()
            .then(|| 1u128 << (status.as_u16() - 400))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_holds_client_errors_only_and_prints_them_in_order() {
        let mut set = ClientErrors::NONE;
        assert!(set.insert(StatusCode::UNPROCESSABLE_ENTITY));
        assert!(set.insert(StatusCode::CONFLICT));
        assert!(!set.insert(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(!set.insert(StatusCode::OK));
        // What a `RouteSettings`' `Debug` shows of the statuses it releases.
        assert_eq!(format!("{set:?}"), "{409, 422}");
        assert!(releases(StatusCode::CONFLICT, set));
        assert!(!releases(StatusCode::NOT_FOUND, set));
        assert!(releases(StatusCode::BAD_GATEWAY, ClientErrors::NONE));
        assert!(!releases(StatusCode::CONFLICT, ClientErrors::NONE));
    }
}
