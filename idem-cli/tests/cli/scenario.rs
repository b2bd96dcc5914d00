//! One operator's session, the same on every store.

use http::StatusCode;
use idem_runtime::store::Store;
use serde_json::{Value, json};

use crate::support::{App, OPERATION, Ran, Target, record};

/// `idem <command> <record of key> [extra]`.
async fn on(target: &Target, code: i32, command: &str, key: &str, extra: &[&str]) -> Ran {
    let args = [&[command][..], &record(key), extra].concat();
    target.expect(code, &args).await
}

fn states(ls: &Value) -> Vec<&str> {
    ls["records"]
        .as_array()
        .expect("a list of records")
        .iter()
        .map(|r| r["state"].as_str().expect("a state"))
        .collect()
}

fn no_raw_keys(ran: &Ran) {
    for key in ["k-old", "k-done", "k-run"] {
        assert!(!ran.stdout.contains(key), "a raw key was printed: {ran:?}");
    }
}

pub(crate) async fn operators_see_explain_and_fix<S: Store + Clone>(store: S, target: Target) {
    let app = App::new(store.clone(), false);
    // Completed 25 hours ago with a 24-hour TTL: expired now.
    let yesterday = App::new(store, true);
    let (status, _) = yesterday.charge("k-old", json!({ "amount": 1 })).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, done) = app.charge("k-done", json!({ "amount": 500 })).await;
    assert_eq!(status, StatusCode::CREATED);
    // In flight: its handler is running.
    let slow = json!({ "amount": 7, "slow": true });
    let running = tokio::spawn({
        let (app, slow) = (app.clone(), slow.clone());
        async move { app.charge("k-run", slow).await }
    });
    app.gate().entered().await;

    // ls: the three records, oldest first, with what operators read; never a raw key.
    let ls = target.expect(0, &["ls", "--json"]).await;
    no_raw_keys(&ls);
    let listed = ls.json();
    assert_eq!(states(&listed), ["expired", "completed", "in-flight"]);
    for r in listed["records"].as_array().unwrap() {
        assert_eq!(
            (r["operation"].as_str(), r["scope"].as_str()),
            (Some(OPERATION), Some("org"))
        );
        assert_eq!(r["scope_value"], "acme");
        assert_eq!(
            r["key"].as_str().map(str::len),
            Some(16),
            "the hash prefix: {r}"
        );
    }
    let completed = &listed["records"][1];
    assert_eq!(completed["status"], 201);
    assert!(completed["completed_at"].is_string() && completed["lease_until"].is_null());
    let in_flight = &listed["records"][2];
    assert!(in_flight["lease_until"].is_string() && in_flight["status"].is_null());
    let table = target.expect(0, &["ls"]).await;
    no_raw_keys(&table);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "header, three records, a count: {table:?}");
    assert!(lines[0].starts_with("OPERATION") && lines[4] == "3 record(s)");
    let state_at = lines[0].find("STATE").expect("a STATE column");
    for (line, state) in lines[1..4]
        .iter()
        .zip(["expired", "completed", "in-flight"])
    {
        assert_eq!(
            &line[state_at..state_at + state.len()],
            state,
            "aligned: {table:?}"
        );
    }

    // Filters.
    let count = async |args: &[&str]| {
        let ran = target
            .expect(0, &[&["ls", "--json"][..], args].concat())
            .await;
        states(&ran.json()).len()
    };
    assert_eq!(count(&["--state", "in-flight"]).await, 1);
    assert_eq!(count(&["--state", "expired"]).await, 1);
    assert_eq!(count(&["--older-than", "1h"]).await, 1);
    assert_eq!(count(&["--scope", "org", "--scope-value", "acme"]).await, 3);
    assert_eq!(
        count(&["--scope", "org", "--scope-value", "globex"]).await,
        0
    );
    assert_eq!(count(&["--operation", "refunds.create"]).await, 0);
    assert_eq!(count(&["--limit", "2"]).await, 2);

    // stats.
    let stats = target.expect(0, &["stats", "--json"]).await.json();
    assert_eq!(
        stats["operations"][OPERATION],
        json!({ "in-flight": 1, "completed": 1, "expired": 1 })
    );
    assert!(
        stats["oldest_in_flight"]["created_at"].is_string(),
        "{stats}"
    );
    let table = target.expect(0, &["stats"]).await.stdout;
    assert!(table.contains("oldest in flight: created"), "{table}");

    // show: the stored response, found by the raw key.
    let shown = on(&target, 0, "show", "k-done", &["--json"]).await.json();
    assert_eq!(shown["state"], "completed");
    assert_eq!(shown["response"]["status"], 201);
    let preview = shown["response"]["body_preview"].as_str().expect("a body");
    assert_eq!(serde_json::from_str::<Value>(preview).unwrap(), done);
    let text = on(&target, 0, "show", "k-done", &[]).await.stdout;
    assert!(text.contains("response 201 Created"), "{text}");
    assert!(text.contains("content-type: application/json"), "{text}");
    assert!(text.contains("scope        org=acme"), "{text}");
    assert!(text.contains("every retry replays it"), "{text}");
    // The body cut at --body-bytes says so; a body that fits says nothing.
    let len = shown["response"]["body_bytes"].as_u64().expect("a length");
    let cut = (len - 1).to_string();
    let text = on(&target, 0, "show", "k-done", &["--body-bytes", &cut]).await;
    let note = format!("[{cut} of {len} bytes shown: --body-bytes]");
    assert!(text.stdout.contains(&note), "{text:?}");
    let whole = len.to_string();
    let text = on(&target, 0, "show", "k-done", &["--body-bytes", &whole]).await;
    assert!(!text.stdout.contains("bytes shown"), "{text:?}");
    let missing = on(&target, 4, "show", "k-missing", &[]).await;
    assert!(
        missing.stderr.contains("no record of charges.create"),
        "{missing:?}"
    );

    // forget: refused while the owner runs (exit 3), done on a completed record.
    let refused = on(&target, 3, "forget", "k-run", &[]).await;
    assert!(
        refused.stderr.contains("holds the lease until"),
        "{refused:?}"
    );
    assert!(refused.stderr.contains("--force"), "{refused:?}");
    // Said once: the command's own failure line does not follow the explanation.
    assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
    assert_eq!(missing.stderr.lines().count(), 1, "{missing:?}");
    let leased = on(&target, 3, "forget", "k-run", &["--json"]).await.json();
    assert_eq!(
        (&leased["forgotten"], &leased["reason"]),
        (&json!(false), &json!("leased"))
    );
    let forgot = on(&target, 0, "forget", "k-done", &[]).await;
    assert!(
        forgot.stdout.contains("its next request runs again"),
        "{forgot:?}"
    );
    on(&target, 4, "forget", "k-done", &[]).await;
    let runs = app.runs();
    let (status, again) = app.charge("k-done", json!({ "amount": 500 })).await;
    assert_eq!(
        (status, app.runs()),
        (StatusCode::CREATED, runs + 1),
        "runs again"
    );
    assert_ne!(again["id"], done["id"]);

    // forget --force while the owner runs; a retry claims afresh and runs.
    let forced = on(&target, 0, "forget", "k-run", &["--force"]).await;
    assert!(forced.stdout.contains("fenced out"), "{forced:?}");
    let retry = tokio::spawn({
        let app = app.clone();
        async move { app.charge("k-run", slow).await }
    });
    app.gate().entered().await;
    // The first owner finishes now: its client gets its answer, its completion is fenced out.
    app.gate().open();
    let (status, first) = running.await.expect("the first request");
    assert_eq!(status, StatusCode::CREATED);
    let shown = on(&target, 0, "show", "k-run", &["--json"]).await.json();
    assert_eq!(
        shown["state"], "in-flight",
        "the retry's record, untouched: {shown}"
    );
    app.gate().open();
    let (status, second) = retry.await.expect("the retry");
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(first["id"], second["id"]);
    let shown = on(&target, 0, "show", "k-run", &["--json"]).await.json();
    let stored: Value =
        serde_json::from_str(shown["response"]["body_preview"].as_str().unwrap()).unwrap();
    assert_eq!(stored, second, "the retry's result, not the fenced owner's");

    // purge: the count first, a dry run deletes nothing, a window outside deletes nothing.
    let plan = target
        .expect(0, &["purge", "--operation", OPERATION, "--dry-run"])
        .await;
    assert_eq!(
        plan.stdout,
        format!("would purge 2 completed record(s) of {OPERATION}\n")
    );
    let window = [
        "purge",
        "--operation",
        OPERATION,
        "--completed-between",
        "2001-01-01T00:00:00Z",
        "2001-01-02T00:00:00Z",
        "--json",
    ];
    let none = target.expect(0, &window).await.json();
    assert_eq!((&none["matched"], &none["purged"]), (&json!(0), &json!(0)));
    assert_eq!(none["dry_run"], false, "{none}");
    let dry = ["purge", "--operation", OPERATION, "--dry-run", "--json"];
    let dry = target.expect(0, &dry).await.json();
    assert_eq!(
        (&dry["matched"], &dry["purged"], &dry["dry_run"]),
        (&json!(2), &json!(0), &json!(true))
    );
    assert_eq!(
        states(&target.expect(0, &["ls", "--json"]).await.json()).len(),
        3
    );
    let purged = target.expect(0, &["purge", "--operation", OPERATION]).await;
    assert_eq!(
        purged.stdout,
        format!("purging 2 completed record(s) of {OPERATION}\npurged 2\n")
    );
    let left = target.expect(0, &["ls", "--json"]).await.json();
    assert_eq!(
        states(&left),
        ["expired"],
        "only the expired record is left"
    );
    let runs = app.runs();
    let (status, _) = app.charge("k-run", json!({ "amount": 7 })).await;
    assert_eq!(
        (status, app.runs()),
        (StatusCode::CREATED, runs + 1),
        "purged: runs again"
    );
}
