//! Atomic mode on PostgreSQL: a handler's writes through `Tx` and the stored response commit
//! together. Each proof counts rows in a real business table.

include!("atomic/suite.rs");

// One commit (the default): the claim rides in the handler's transaction.
atomic_suite!(postgres, postgres, sqlx::Postgres, Postgres, "one", true);
// Two commits: the claim commits before the handler runs.
atomic_suite!(
    postgres_two_commits,
    postgres,
    sqlx::Postgres,
    Postgres,
    "two",
    false
);
