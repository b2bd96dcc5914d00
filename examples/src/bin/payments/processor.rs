//! A stand-in card processor with Stripe-style test sources and bank accounts, so every
//! idempotency outcome can be provoked from curl.

use std::time::Duration;

/// A payment source a client may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `tok_visa`: approved at once.
    Visa,
    /// `tok_chargeDeclined`: declined; the charge is recorded as `failed` (402).
    Declined,
    /// `tok_processorOutage`: the processor is down; nothing is recorded (503).
    Outage,
    /// `tok_slow`: approved after `SLOW_MS`; its refunds take as long.
    Slow,
}

impl Source {
    pub(crate) const TOKENS: [&'static str; 4] = [
        "tok_visa",
        "tok_chargeDeclined",
        "tok_processorOutage",
        "tok_slow",
    ];

    pub(crate) fn parse(token: &str) -> Option<Self> {
        match token {
            "tok_visa" => Some(Self::Visa),
            "tok_chargeDeclined" => Some(Self::Declined),
            "tok_processorOutage" => Some(Self::Outage),
            "tok_slow" => Some(Self::Slow),
            _ => None,
        }
    }

    pub(crate) fn token(self) -> &'static str {
        match self {
            Self::Visa => "tok_visa",
            Self::Declined => "tok_chargeDeclined",
            Self::Outage => "tok_processorOutage",
            Self::Slow => "tok_slow",
        }
    }
}

/// A bank account a payout may go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Destination {
    /// `ba_default` (or no `destination`): the bank accepts the transfer at once.
    Default,
    /// `ba_slow`: the bank takes `SLOW_MS` to accept the transfer.
    Slow,
}

impl Destination {
    pub(crate) const ACCOUNTS: [&'static str; 2] = ["ba_default", "ba_slow"];

    pub(crate) fn parse(account: &str) -> Option<Self> {
        match account {
            "ba_default" => Some(Self::Default),
            "ba_slow" => Some(Self::Slow),
            _ => None,
        }
    }
}

/// The processor's answer to a charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Authorization {
    Approved,
    Declined,
}

/// The processor could not be reached: nothing happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unavailable;

/// The simulated processor. `slow` is `SLOW_MS`.
#[derive(Debug, Clone)]
pub(crate) struct Processor {
    slow: Duration,
}

impl Processor {
    pub(crate) fn new(slow: Duration) -> Self {
        Self { slow }
    }

    /// Asks the processor to move money from `source`.
    pub(crate) async fn authorize(&self, source: Source) -> Result<Authorization, Unavailable> {
        match source {
            Source::Visa => Ok(Authorization::Approved),
            Source::Declined => Ok(Authorization::Declined),
            Source::Outage => Err(Unavailable),
            Source::Slow => {
                tokio::time::sleep(self.slow).await;
                Ok(Authorization::Approved)
            }
        }
    }

    /// Asks the processor to return money to the source a charge was made with (by token, as
    /// stored with the charge).
    pub(crate) async fn refund(&self, source_token: &str) {
        if Source::parse(source_token) == Some(Source::Slow) {
            tokio::time::sleep(self.slow).await;
        }
    }

    /// Asks the bank to move a payout to `destination`. `key` is the bank's idempotency key:
    /// the same on every retry of the request, so a retry after a crash transfers once.
    pub(crate) async fn pay_out(&self, destination: Destination, key: Option<&str>) {
        if let Some(key) = key {
            tracing::debug!(bank_idempotency_key = %key, "paying out");
        }
        if destination == Destination::Slow {
            tokio::time::sleep(self.slow).await;
        }
    }
}
