//! What a receiving node answers on a Link, fed arbitrary input: bytes as
//! prost decodes them, acks for batches never sent or out of order, credit
//! anywhere up to `u64::MAX`, and Welcomes of another incarnation or epoch
//! claiming any sequence number taken. The Link task is the only owner of
//! what this node sent and was not acked: a panic in it would leave every
//! such batch's region waiting for an outcome that never comes.

use super::super::prop_tests::{config, decoded, number, wire};
use super::{Failure, LinkTask, Local, Sent};
use crate::transport::grpc::GrpcSettings;
use colo_allocation::RegionId;
use colo_proto::v1 as pb;
use proptest::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// The first sequence number of the batches in flight: answers near it
/// reach the bookkeeping for real ones.
const FIRST: u64 = 1000;

/// Something the receiver sends: an answer on the open Link, or the
/// Welcome of the next connection.
#[derive(Debug, Clone)]
enum Step {
    Answer(Vec<u8>),
    Reconnect(pb::Welcome),
}

fn near_first() -> impl Strategy<Value = u64> {
    prop_oneof![number(), FIRST - 4..FIRST + 40]
}

fn answer() -> impl Strategy<Value = pb::LinkAnswer> {
    use pb::link_answer::Answer;
    let answer = prop_oneof![
        (near_first(), prop_oneof![0u32..8, any::<u32>()]).prop_map(
            |(first_sequence, accepted)| Answer::Ack(pb::BatchAck {
                first_sequence,
                accepted
            })
        ),
        number().prop_map(|released| Answer::Credit(pb::Credit { released })),
        welcome().prop_map(Answer::Welcome),
    ];
    proptest::option::of(answer).prop_map(|answer| pb::LinkAnswer { answer })
}

fn welcome() -> impl Strategy<Value = pb::Welcome> {
    let same_or_not = || prop_oneof![Just(1u64), Just(2u64), number()];
    (same_or_not(), number(), same_or_not(), near_first()).prop_map(
        |(incarnation, released, epoch, accepted_through)| pb::Welcome {
            incarnation,
            released,
            epoch,
            accepted_through,
        },
    )
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => wire(answer).prop_map(Step::Answer),
        1 => welcome().prop_map(Step::Reconnect),
    ]
}

/// Where each unacked batch's outcome goes, with the batch's size.
type Outcomes = VecDeque<(usize, oneshot::Receiver<Result<u32, Failure>>)>;

/// A Link task welcomed by incarnation 1 in epoch 1, with batches of these
/// sizes sent and not acked; and where each batch's outcome goes.
fn link_with_unacked(sizes: &[usize], released: u64) -> (LinkTask, Outcomes) {
    let (_requests, requests) = mpsc::unbounded_channel();
    let mut task = LinkTask {
        local: Local {
            node: RegionId::new("127.0.0.1:1"),
            incarnation: 7,
        },
        address: "127.0.0.1:2".into(),
        settings: GrpcSettings::default(),
        next_sequence: Arc::new(AtomicU64::new(FIRST)),
        requests,
        queued: VecDeque::new(),
        unacked: VecDeque::new(),
        replies: VecDeque::new(),
        finishing: Vec::new(),
        taken: 0,
        released: 0,
        receiver: Some((1, 1)),
        gone: Arc::new(AtomicBool::new(false)),
        left: Arc::default(),
    };
    let mut outcomes = VecDeque::new();
    let mut first = FIRST;
    for &size in sizes {
        let (done, outcome) = oneshot::channel();
        task.unacked.push_back(Sent {
            first,
            envelopes: vec![pb::Envelope::default(); size],
            done,
            at: Instant::now(),
        });
        outcomes.push_back((size, outcome));
        first += size as u64;
        task.taken += size as u64;
    }
    task.released = released.min(task.taken);
    (task, outcomes)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_answers_from_a_receiver_settle_each_batch_once_never_a_panic(
        sizes in prop::collection::vec(1usize..6, 0..6),
        released in 0u64..40,
        steps in prop::collection::vec(step(), 1..8),
    ) {
        use pb::link_answer::Answer;
        let (mut task, mut pending) = link_with_unacked(&sizes, released);
        for step in steps {
            match step {
                Step::Answer(bytes) => {
                    let Some(answer) = decoded::<pb::LinkAnswer>(&bytes) else { continue };
                    let released = task.released;
                    let kept = task.answered(answer);
                    match answer.answer {
                        Some(Answer::Ack(ack)) if kept => {
                            let (_, mut outcome) = pending.pop_front().expect("an ack settles a batch");
                            prop_assert_eq!(outcome.try_recv(), Ok(Ok(ack.accepted)));
                        }
                        // An ack for no batch, or for another: the Link is
                        // dropped and every batch is resent on the next.
                        Some(Answer::Ack(_)) => {}
                        Some(Answer::Credit(credit)) => {
                            prop_assert!(kept);
                            prop_assert_eq!(task.released, released.max(credit.released));
                        }
                        Some(Answer::Welcome(_)) | None => prop_assert!(kept),
                    }
                }
                Step::Reconnect(welcome) => {
                    let (receiver, taken) = (task.receiver, task.taken);
                    task.welcomed(welcome);
                    let restarted = receiver.is_some_and(|(i, _)| i != welcome.incarnation);
                    let fenced = receiver.is_some_and(|(_, e)| e != welcome.epoch);
                    if restarted {
                        for (_, mut outcome) in pending.drain(..) {
                            prop_assert_eq!(outcome.try_recv(), Ok(Err(Failure::Unconfirmed)));
                        }
                        prop_assert_eq!(task.taken, 0);
                    } else if fenced {
                        // Taken is what the Welcome says, never more than
                        // was sent; the rest leaves the receiver's window.
                        let mut returned = 0;
                        for (size, mut outcome) in pending.drain(..) {
                            let Ok(Ok(n)) = outcome.try_recv() else {
                                return Err(TestCaseError::fail("a batch not settled by a fence"));
                            };
                            prop_assert!(n as usize <= size, "{} of {} taken", n, size);
                            returned += (size - n as usize) as u64;
                        }
                        prop_assert_eq!(task.taken, taken.saturating_sub(returned));
                    }
                    prop_assert_eq!(task.receiver, Some((welcome.incarnation, welcome.epoch)));
                    prop_assert_eq!(task.released, welcome.released);
                }
            }
            prop_assert_eq!(task.unacked.len(), pending.len());
            for (_, outcome) in &mut pending {
                prop_assert!(outcome.try_recv().is_err(), "a batch still unacked was settled");
            }
        }
    }
}
