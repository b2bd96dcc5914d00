//! When a claim's lease ends: the configured lease from now, or sooner when the request carries
//! the deadline of the invocation serving it, so a record never outlives the process that could
//! still be running its operation.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock::Timestamp;

/// The instant after which the process serving a request can no longer be running it: the end
/// of a serverless invocation (AWS Lambda's deadline), after which the process is frozen or
/// killed. A request extension, honoured by every face: the attribute and the layer read it from
/// the HTTP request's extensions, the gRPC face from the tonic request's, the programmatic API
/// from `Operation::deadline`. The `lambda` feature's
/// `idem_runtime::lambda` inserts it from the invocation's context.
///
/// With a deadline, a claim's lease ends at the earlier of the configured
/// the builder's `lease` and the deadline plus [`MARGIN`](Self::MARGIN), and the
/// owner's renewals never extend it past that: a record whose invocation timed out mid-run frees
/// when that invocation could no longer be running (a retry then takes it over and runs again),
/// rather than staying in flight for a lease nobody renews. A deadline that is already past, or
/// more than [`MAX_AHEAD`](Self::MAX_AHEAD) away, is ignored (logged at debug level) and the
/// configured lease applies: a clock that skews, or an emulator that sends a time in 1970, never
/// expires a claim at once.
///
/// ```
/// use idem_core::engine::InvocationDeadline;
/// use std::time::{Duration, SystemTime};
///
/// // A platform whose requests end within ten seconds of arriving: a middleware inserts this
/// // into each request's extensions (`request.extensions_mut().insert(deadline)`).
/// let deadline = InvocationDeadline::at(SystemTime::now() + Duration::from_secs(10));
/// # let _ = deadline;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InvocationDeadline(Timestamp);

impl InvocationDeadline {
    /// How long after the deadline a lease still lasts: room for the clocks of the platform,
    /// this process and the store's other clients to disagree.
    pub const MARGIN: Duration = Duration::from_secs(1);

    /// The farthest ahead a deadline is believed, plus [`MARGIN`](Self::MARGIN): AWS Lambda's
    /// longest invocation, 15 minutes.
    pub const MAX_AHEAD: Duration = Duration::from_secs(15 * 60);

    /// The deadline at `instant`.
    pub fn at(instant: SystemTime) -> Self {
        let millis = match instant.duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        };
        Self(Timestamp::from_millis(millis))
    }

    /// The deadline `millis` milliseconds after the Unix epoch (as Lambda's
    /// `Lambda-Runtime-Deadline-Ms` header gives it).
    pub const fn from_epoch_millis(millis: i64) -> Self {
        Self(Timestamp::from_millis(millis))
    }

    /// The deadline, as the engine's clocks count time.
    pub const fn timestamp(self) -> Timestamp {
        self.0
    }
}

/// How long a claim's lease lasts, for one attempt: the configured length from any instant,
/// never past the end its invocation's deadline sets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseTerms {
    length: Duration,
    /// The invocation's deadline, when it is believed (and so its lease's end, with the margin).
    deadline: Option<Timestamp>,
}

impl LeaseTerms {
    /// The terms of a claim made `now`: `length`, ended by `deadline` when it is within
    /// `(now, now + MAX_AHEAD + MARGIN]`.
    /// A deadline that is not believed is logged at debug level.
    pub(crate) fn new(
        length: Duration,
        now: Timestamp,
        deadline: Option<InvocationDeadline>,
    ) -> Self {
        let terms = Self::quiet(length, now, deadline);
        if let (Some(at), None) = (deadline, terms.deadline) {
            tracing::debug!(
                deadline_ms = at.timestamp().as_millis(),
                now_ms = now.as_millis(),
                lease_ms = length.as_millis(),
                "ignoring an invocation deadline that is past or too far ahead; the configured lease applies"
            );
        }
        terms
    }

    /// [`new`](Self::new), logging nothing.
    pub(crate) fn quiet(
        length: Duration,
        now: Timestamp,
        deadline: Option<InvocationDeadline>,
    ) -> Self {
        let farthest = now.after(InvocationDeadline::MAX_AHEAD + InvocationDeadline::MARGIN);
        let deadline = deadline
            .map(InvocationDeadline::timestamp)
            .filter(|&at| now < at && at <= farthest);
        Self { length, deadline }
    }

    /// The terms of the configured lease alone.
    #[cfg(test)]
    pub(crate) fn configured(length: Duration) -> Self {
        Self {
            length,
            deadline: None,
        }
    }

    /// The same terms for a claim made `now`: without the deadline if it has passed since (a
    /// claim never starts with a lease that already ended).
    pub(crate) fn as_of(self, now: Timestamp) -> Self {
        Self {
            deadline: self.deadline.filter(|&deadline| now < deadline),
            ..self
        }
    }

    /// The configured length.
    pub(crate) fn length(&self) -> Duration {
        self.length
    }

    /// When a lease taken or renewed `now` ends: `length` from now, or the deadline plus the
    /// margin if that comes first.
    pub(crate) fn until(&self, now: Timestamp) -> Timestamp {
        let full = now.after(self.length);
        match self.end() {
            Some(end) => full.min(end),
            None => full,
        }
    }

    /// When a renewal made `now` would end, or `None` when it would not reach past now (the
    /// invocation is over: nothing to renew).
    pub(crate) fn renewal(&self, now: Timestamp) -> Option<Timestamp> {
        let until = self.until(now);
        (until > now).then_some(until)
    }

    /// How long, from `now`, inline work for the request may take at most: `limit`, or less if
    /// the invocation ends sooner (its answer must leave before then).
    pub(crate) fn within(&self, now: Timestamp, limit: Duration) -> Duration {
        match self.deadline {
            Some(deadline) => limit.min(now.until(deadline)),
            None => limit,
        }
    }

    /// The lease's last possible end, with the margin, when a deadline is believed.
    fn end(&self) -> Option<Timestamp> {
        self.deadline
            .map(|deadline| deadline.after(InvocationDeadline::MARGIN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    const LEASE: Duration = Duration::from_secs(30);

    fn deadline_in(now: Timestamp, ahead: Duration) -> Option<InvocationDeadline> {
        Some(InvocationDeadline::from_epoch_millis(
            now.after(ahead).as_millis(),
        ))
    }

    #[test]
    fn without_a_deadline_the_configured_lease_applies() {
        let now = ManualClock::new().now();
        let terms = LeaseTerms::new(LEASE, now, None);
        assert_eq!(terms.until(now), now.after(LEASE));
        assert_eq!(
            terms.within(now, Duration::from_secs(5)),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn a_near_deadline_ends_the_lease_with_the_margin() {
        let now = ManualClock::new().now();
        let terms = LeaseTerms::new(LEASE, now, deadline_in(now, Duration::from_secs(3)));
        assert_eq!(terms.until(now), now.after(Duration::from_secs(4)));
        // Inline work stops at the deadline itself, so the answer leaves before it.
        assert_eq!(
            terms.within(now, Duration::from_secs(5)),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn a_far_deadline_leaves_the_configured_lease_and_caps_its_renewals() {
        let clock = ManualClock::new();
        let start = clock.now();
        let terms = LeaseTerms::new(LEASE, start, deadline_in(start, Duration::from_secs(100)));
        assert_eq!(terms.until(start), start.after(LEASE));
        clock.advance(Duration::from_secs(80));
        // Renewed 20 s before the deadline: the lease ends a margin after it, not 30 s on.
        let end = start.after(Duration::from_secs(101));
        assert_eq!(terms.renewal(clock.now()), Some(end));
        clock.advance(Duration::from_secs(21));
        assert_eq!(terms.renewal(clock.now()), None, "the invocation is over");
    }

    #[test]
    fn a_deadline_in_the_past_falls_back_to_the_configured_lease() {
        let now = ManualClock::new().now();
        // The local emulator's `Lambda-Runtime-Deadline-Ms: 600000`: ten minutes into 1970.
        let emulator = Some(InvocationDeadline::from_epoch_millis(600_000));
        let now_exactly = Some(InvocationDeadline::from_epoch_millis(now.as_millis()));
        for deadline in [emulator, now_exactly] {
            let terms = LeaseTerms::new(LEASE, now, deadline);
            assert_eq!(terms.until(now), now.after(LEASE), "{deadline:?}");
            assert_eq!(terms.renewal(now), Some(now.after(LEASE)));
            assert_eq!(
                terms.within(now, Duration::from_secs(5)),
                Duration::from_secs(5)
            );
        }
    }

    #[test]
    fn a_deadline_too_far_ahead_falls_back_to_the_configured_lease() {
        let now = ManualClock::new().now();
        let longest = InvocationDeadline::MAX_AHEAD + InvocationDeadline::MARGIN;
        let terms = LeaseTerms::new(
            LEASE,
            now,
            deadline_in(now, longest + Duration::from_millis(1)),
        );
        assert_eq!(
            terms.until(now.after(Duration::from_secs(900))),
            now.after(Duration::from_secs(930))
        );
        // Lambda's longest invocation is believed.
        let terms = LeaseTerms::new(LEASE, now, deadline_in(now, longest));
        let last = now.after(longest + InvocationDeadline::MARGIN);
        assert_eq!(terms.until(now.after(Duration::from_secs(900))), last);
    }

    #[test]
    fn a_deadline_a_moment_away_still_leases_for_the_margin() {
        let now = ManualClock::new().now();
        let terms = LeaseTerms::new(LEASE, now, deadline_in(now, Duration::from_millis(1)));
        assert_eq!(terms.until(now), now.after(Duration::from_millis(1001)));
        assert!(terms.until(now) > now);
    }

    /// A duplicate that waited past its invocation's deadline before claiming: its claim gets
    /// the configured lease, never one that ended already.
    #[test]
    fn a_claim_made_after_the_deadline_passed_gets_the_configured_lease() {
        let clock = ManualClock::new();
        let start = clock.now();
        let terms = LeaseTerms::new(LEASE, start, deadline_in(start, Duration::from_secs(2)));
        clock.advance(Duration::from_secs(5));
        let now = clock.now();
        assert_eq!(terms.as_of(now).until(now), now.after(LEASE));
        // Before the deadline, the terms are kept.
        assert_eq!(
            terms.as_of(start).until(start),
            start.after(Duration::from_secs(3))
        );
    }

    #[test]
    fn a_deadline_converts_from_system_time_to_epoch_millis() {
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(
            InvocationDeadline::at(at),
            InvocationDeadline::from_epoch_millis(1_700_000_000_123)
        );
    }
}
