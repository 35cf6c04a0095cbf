use super::*;

#[test]
fn a_stuck_shard_gets_one_idle_tick_and_one_query_mail_at_a_time() {
    let signals = ShardSignals::default();
    assert!(signals.claim_idle_tick(), "the first tick is sent");
    for _ in 0..10 {
        assert!(!signals.claim_idle_tick(), "no second tick while one waits");
    }
    signals.idle_tick.store(false, Ordering::Release); // the shard took it
    assert!(signals.claim_idle_tick());

    let (first, mut first_answer) = oneshot::channel();
    assert!(signals.add_query(first), "the first query sends a mail");
    let mut later = Vec::new();
    for _ in 0..10 {
        let (tx, rx) = oneshot::channel();
        assert!(!signals.add_query(tx), "later queries wait with the first");
        later.push(rx);
    }
    signals.answer_queries(&[EntityId::from("a")]);
    assert_eq!(first_answer.try_recv().unwrap(), vec![EntityId::from("a")]);
    for mut rx in later {
        assert_eq!(rx.try_recv().unwrap(), vec![EntityId::from("a")]);
    }
    let (next, _) = oneshot::channel();
    assert!(
        signals.add_query(next),
        "answered: the next query sends a mail"
    );
}
