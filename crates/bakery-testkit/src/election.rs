//! Leader election on a real store: one leader per term, terms increase,
//! observers see each change, a silent leader is replaced.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::VersionedStore;
use bakery_recipes::election::{Election, ElectionBuilder, Leader, LeaderWatch};
use bakery_recipes::fence::FencedValue;
use bakery_recipes::lock::LostReason;

use crate::faults::FaultStore;
use crate::support::{not_before, PATIENCE};
use crate::{unique_name, Case, Clients};

pub(crate) fn cases() -> Vec<Case> {
    crate::cases_of!("election":
        one_leader_at_a_time_and_terms_increase,
        observers_see_each_new_leader,
        silent_leader_is_replaced_with_a_new_term,
    )
}

fn candidate(store: &Arc<dyn VersionedStore>, name: &str, value: &str) -> ElectionBuilder {
    Election::builder(store.clone(), name)
        .value(value)
        .campaign_timeout(PATIENCE)
        .observe_interval(Duration::from_millis(50))
}

/// What `observer` sees next (`None`: nobody leads), within PATIENCE.
async fn next_seen(observer: &mut LeaderWatch, what: &str) -> Option<Leader> {
    tokio::time::timeout(PATIENCE, observer.next())
        .await
        .unwrap_or_else(|_| panic!("observer never saw {what}"))
        .expect("observe")
}

/// Four candidates campaign five times each: never two leaders at once,
/// each leader reads itself (value and term) as the leader, and terms grow
/// in the order leaderships began.
async fn one_leader_at_a_time_and_terms_increase(clients: Clients) {
    const CANDIDATES: usize = 4;
    const ROUNDS: usize = 5;
    let name = unique_name("elect");
    let leading = Arc::new(AtomicBool::new(false));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..CANDIDATES {
        let election = candidate(&clients.client().await, &name, &format!("node-{c}"))
            .build()
            .expect("valid");
        let (leading, terms) = (leading.clone(), terms.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let leadership = election.campaign().await.expect("campaign");
                assert!(!leading.swap(true, Ordering::SeqCst), "two leaders at once");
                terms.lock().expect("terms").push(leadership.term());
                let leader = election.leader().await.expect("leader").expect("led");
                assert_eq!(leader.term, leadership.term());
                assert_eq!(leader.value, Some(format!("node-{c}")));
                leading.store(false, Ordering::SeqCst);
                leadership.resign().await.expect("resign");
            }
        }));
    }
    for task in tasks {
        task.await.expect("candidate");
    }
    let terms = terms.lock().expect("terms").clone();
    assert_eq!(terms.len(), CANDIDATES * ROUNDS);
    assert!(
        terms.windows(2).all(|pair| pair[0] < pair[1]),
        "terms not increasing in leadership order: {terms:?}"
    );
}

/// An observer sees the first leader, then its successor with a larger
/// term, then nobody.
async fn observers_see_each_new_leader(clients: Clients) {
    let name = unique_name("observe");
    let a = candidate(&clients.client().await, &name, "a")
        .build()
        .expect("valid");
    let b = candidate(&clients.client().await, &name, "b")
        .build()
        .expect("valid");
    let mut observer = candidate(&clients.client().await, &name, "observer")
        .build()
        .expect("valid")
        .observe();
    assert_eq!(next_seen(&mut observer, "the start").await, None);
    let leading_a = a.campaign().await.expect("campaign a");
    let seen = next_seen(&mut observer, "a").await.expect("a leads");
    assert_eq!(
        (seen.value.as_deref(), seen.term),
        (Some("a"), leading_a.term())
    );

    let a_term = leading_a.term();
    let waiting_b = tokio::spawn(async move { b.campaign().await });
    leading_a.resign().await.expect("resign a");
    let leading_b = waiting_b.await.expect("join").expect("campaign b");
    let seen = next_seen(&mut observer, "b").await.expect("b leads");
    assert_eq!(
        (seen.value.as_deref(), seen.term),
        (Some("b"), leading_b.term())
    );
    assert!(leading_b.term() > a_term);

    leading_b.resign().await.expect("resign b");
    let seen = next_seen(&mut observer, "no leader").await;
    assert_eq!(seen, None);
}

/// A leader whose process stops (its store calls hang) is replaced by a
/// waiting candidate after a lease of silence, with the next term; when the
/// old leader resumes, `lost()` fires and its write fenced with the old term
/// is refused once the new leader has written.
async fn silent_leader_is_replaced_with_a_new_term(clients: Clients) {
    let store = clients.store();
    const LEASE: Duration = Duration::from_millis(300);
    let name = unique_name("silent");
    let frozen_store = Arc::new(FaultStore::new(clients.client().await));
    let frozen = Election::builder(frozen_store.clone() as Arc<dyn VersionedStore>, &name)
        .value("frozen")
        .lease(LEASE)
        .build()
        .expect("valid");
    let old = frozen.campaign().await.expect("campaign");
    frozen_store.pause();
    let next = not_before(
        LEASE,
        "a lease of silence",
        candidate(&clients.client().await, &name, "next")
            .build()
            .expect("valid")
            .campaign(),
    )
    .await
    .expect("take over");
    assert_eq!(next.term(), old.term() + 1);
    let fenced = FencedValue::new(store.clone(), &name).expect("valid");
    let written = fenced
        .write(next.term(), "new leader".into())
        .await
        .expect("write");
    assert!(written.is_accepted());
    frozen_store.resume();
    let reason = tokio::time::timeout(PATIENCE, old.lost())
        .await
        .expect("the old leader learns it lost");
    assert!(
        matches!(reason, LostReason::Evicted | LostReason::LeaseExpired),
        "{reason:?}"
    );
    let late = FencedValue::new(frozen_store.clone() as Arc<dyn VersionedStore>, &name)
        .expect("valid")
        .write(old.term(), "old leader".into())
        .await
        .expect("write");
    assert!(!late.is_accepted(), "the old term's write was accepted");
    next.resign().await.expect("resign");
    drop(old);
}
