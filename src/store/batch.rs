//! Group commit: the script calls of workers that ask the store at the same moment go in one round trip.
//!
//! A worker that finds no round trip under way leads: it takes every call waiting (its own among them),
//! sends them as one pipeline and hands each worker its answer. Calls that arrive meanwhile wait, and when
//! the leader has its answers, the first of them leads the next round trip with all that waited. A worker
//! alone (one connection, a quiet gateway) leads at once: nothing waits for a batch to fill. Under load the
//! batches grow by themselves, and Redis reads, runs and answers many calls per wake-up instead of one.
//!
//! Each call is still its own script call, applied in the order the leader took them: what one admission
//! decides is exactly what it decided alone.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Calls in one round trip at most: a round trip that fails (a timeout) fails all of its calls.
const MAX_BATCH: usize = 64;

/// Where one waiting call's answer arrives.
struct Slot<R> {
    state: Mutex<State<R>>,
    woken: Condvar,
}

enum State<R> {
    Waiting,
    /// The previous leader is done: this worker leads the next round trip.
    Lead,
    Done(R),
}

struct Queue<J, R> {
    waiting: Vec<(J, Arc<Slot<R>>)>,
    /// A round trip is under way (a worker leads).
    leading: bool,
}

/// The calls waiting for a round trip, and whether one is under way.
pub(super) struct CallBatch<J, R> {
    queue: Mutex<Queue<J, R>>,
    /// How long a leader waits before it takes the calls waiting: zero, but for a test (`PAUSE_ENV`).
    pause: Duration,
}

/// Test hook: with `TOLLGATE_TEST_ADMIT_PAUSE_MS=N`, the worker that leads a round trip of admissions waits
/// N ms before it takes those waiting, so that calls asked at the same moment surely share it.
pub(super) const PAUSE_ENV: &str = "TOLLGATE_TEST_ADMIT_PAUSE_MS";

impl<J, R> CallBatch<J, R> {
    pub(super) fn new() -> Self {
        let pause = std::env::var(PAUSE_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::ZERO, Duration::from_millis);
        CallBatch {
            queue: Mutex::new(Queue {
                waiting: Vec::new(),
                leading: false,
            }),
            pause,
        }
    }

    /// Runs `job` in a batch: `run` gets every job of the batch in order and returns their answers in the
    /// same order (one each). A worker waits `patience` at most for a round trip it does not lead; then it
    /// gives up (`Failed::TimedOut`, with its job when no round trip had taken it yet). `fail` is the answer
    /// of a job that failed so. Returns this job's answer.
    pub(super) fn submit(
        &self,
        job: J,
        patience: Duration,
        run: impl FnOnce(Vec<J>) -> Vec<R>,
        fail: impl Fn(Failed<J>) -> R,
    ) -> R {
        let mine = Arc::new(Slot {
            state: Mutex::new(State::Waiting),
            woken: Condvar::new(),
        });
        {
            let mut queue = crate::util::lock(&self.queue);
            queue.waiting.push((job, Arc::clone(&mine)));
            if queue.leading {
                drop(queue);
                match self.wait(&mine, Instant::now() + patience) {
                    Waited::Answer(answer) => return answer,
                    Waited::GaveUp(job) => return fail(Failed::TimedOut(job)),
                    Waited::Lead => {}
                }
            } else {
                queue.leading = true;
            }
        }
        // This worker leads: the calls waiting go (`MAX_BATCH` at most), its own among them: it is the
        // first in the queue (a worker that found no round trip under way found the queue empty, and a
        // worker told to lead is the first of those that waited).
        if !self.pause.is_zero() {
            std::thread::sleep(self.pause);
        }
        let (jobs, slots): (Vec<J>, Vec<Arc<Slot<R>>>) = {
            let mut queue = crate::util::lock(&self.queue);
            let n = queue.waiting.len().min(MAX_BATCH);
            queue.waiting.drain(..n).unzip()
        };
        let n = jobs.len();
        let mut answers = match catch_unwind(AssertUnwindSafe(|| run(jobs))) {
            Ok(a) if a.len() == n => a,
            Ok(a) => {
                log::error!("store: a batch of {n} calls got {} answers", a.len());
                (0..n).map(|_| fail(Failed::Broken)).collect()
            }
            Err(_) => {
                log::error!("store: a batch of {n} calls failed (a panic)");
                (0..n).map(|_| fail(Failed::Broken)).collect()
            }
        };
        let mut own = None;
        for (slot, answer) in slots.iter().zip(answers.drain(..)) {
            if Arc::ptr_eq(slot, &mine) {
                own = Some(answer);
            } else {
                *crate::util::lock(&slot.state) = State::Done(answer);
                slot.woken.notify_one();
            }
        }
        // The next round trip is led by the first call that waited meanwhile.
        {
            let mut queue = crate::util::lock(&self.queue);
            match queue.waiting.first() {
                Some((_, next)) => {
                    *crate::util::lock(&next.state) = State::Lead;
                    next.woken.notify_one();
                }
                None => queue.leading = false,
            }
        }
        own.unwrap_or_else(|| fail(Failed::Broken))
    }

    /// A worker that does not lead waits for its answer, or to be told to lead, until `deadline`; then it
    /// gives up: out of the queue with its job if no round trip took it yet, else without (the round trip
    /// under way goes on, and its answer is dropped). A worker told to lead leads, whenever it is told.
    fn wait(&self, mine: &Arc<Slot<R>>, deadline: Instant) -> Waited<J, R> {
        let mut state = crate::util::lock(&mine.state);
        loop {
            match std::mem::replace(&mut *state, State::Waiting) {
                State::Done(answer) => return Waited::Answer(answer),
                State::Lead => return Waited::Lead,
                State::Waiting => {}
            }
            let now = Instant::now();
            if now < deadline {
                state = mine
                    .woken
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
                continue;
            }
            // The queue's lock first, as the leader takes them.
            drop(state);
            let mut queue = crate::util::lock(&self.queue);
            let mut state = crate::util::lock(&mine.state);
            return match std::mem::replace(&mut *state, State::Waiting) {
                State::Done(answer) => Waited::Answer(answer),
                State::Lead => Waited::Lead,
                State::Waiting => {
                    let job = queue
                        .waiting
                        .iter()
                        .position(|(_, s)| Arc::ptr_eq(s, mine))
                        .map(|i| queue.waiting.remove(i).0);
                    Waited::GaveUp(job)
                }
            };
        }
    }
}

/// Why a job got no answer of its batch.
pub(super) enum Failed<J> {
    /// Its worker waited its patience out: with the job when no round trip had taken it.
    TimedOut(Option<J>),
    /// The batch could not finish (a panic, or a wrong number of answers).
    Broken,
}

enum Waited<J, R> {
    Answer(R),
    Lead,
    GaveUp(Option<J>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Patience no test waits out.
    const LONG: Duration = Duration::from_secs(600);

    /// A worker whose round trip does not come within its patience gives up with its job (no round trip
    /// took it), out of the queue; the round trip under way finishes, and the next call runs as usual.
    #[test]
    fn a_worker_that_waits_its_patience_out_leaves_the_queue_with_its_job() {
        let g: Arc<CallBatch<u32, Result<u32, Option<u32>>>> = Arc::new(CallBatch::new());
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let first = {
            let g = Arc::clone(&g);
            std::thread::spawn(move || {
                g.submit(
                    1,
                    LONG,
                    |jobs| {
                        release_rx.recv().unwrap();
                        jobs.into_iter().map(Ok).collect()
                    },
                    |_| Err(None),
                )
            })
        };
        while !crate::util::lock(&g.queue).leading {
            std::thread::yield_now();
        }
        let gave_up = g.submit(
            2,
            Duration::from_millis(1),
            |_| unreachable!("a follower that gives up never leads here"),
            |failed| match failed {
                Failed::TimedOut(job) => Err(job),
                Failed::Broken => Err(None),
            },
        );
        assert_eq!(gave_up, Err(Some(2)));
        assert!(crate::util::lock(&g.queue).waiting.is_empty());
        release_tx.send(()).unwrap();
        assert_eq!(first.join().unwrap(), Ok(1));
        assert!(!crate::util::lock(&g.queue).leading);
        let next = g.submit(
            3,
            LONG,
            |jobs| jobs.into_iter().map(Ok).collect(),
            |_| Err(None),
        );
        assert_eq!(next, Ok(3));
    }

    #[test]
    fn a_call_alone_is_run_at_once_and_answered() {
        let g: CallBatch<u32, u32> = CallBatch::new();
        let doubled = g.submit(7, LONG, |jobs| jobs.iter().map(|j| j * 2).collect(), |_| 0);
        assert_eq!(doubled, 14);
    }

    #[test]
    fn calls_that_arrive_during_a_round_trip_share_the_next_and_each_gets_its_own_answer() {
        let g: Arc<CallBatch<u32, u32>> = Arc::new(CallBatch::new());
        let batches = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        // The first call holds its round trip until the others have queued behind it.
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let first = {
            let (g, batches) = (Arc::clone(&g), Arc::clone(&batches));
            let rx = release_rx;
            std::thread::spawn(move || {
                g.submit(
                    1,
                    LONG,
                    |jobs| {
                        rx.lock().unwrap().recv().unwrap();
                        batches.lock().unwrap().push(jobs.clone());
                        jobs.iter().map(|j| j * 10).collect()
                    },
                    |_| 0,
                )
            })
        };
        while !crate::util::lock(&g.queue).leading {
            std::thread::yield_now();
        }
        let others: Vec<_> = (2..=5u32)
            .map(|j| {
                let (g, batches) = (Arc::clone(&g), Arc::clone(&batches));
                std::thread::spawn(move || {
                    g.submit(
                        j,
                        LONG,
                        |jobs| {
                            batches.lock().unwrap().push(jobs.clone());
                            jobs.iter().map(|j| j * 10).collect()
                        },
                        |_| 0,
                    )
                })
            })
            .collect();
        while crate::util::lock(&g.queue).waiting.len() < 4 {
            std::thread::yield_now();
        }
        release_tx.send(()).unwrap();
        assert_eq!(first.join().unwrap(), 10);
        let mut answers: Vec<u32> = others.into_iter().map(|t| t.join().unwrap()).collect();
        answers.sort();
        assert_eq!(answers, vec![20, 30, 40, 50]);
        let batches = batches.lock().unwrap();
        assert_eq!(batches.len(), 2, "{batches:?}");
        assert_eq!(batches[0], vec![1]);
        let mut second = batches[1].clone();
        second.sort();
        assert_eq!(second, vec![2, 3, 4, 5]);
        assert!(!crate::util::lock(&g.queue).leading);
    }

    #[test]
    fn a_batch_that_panics_answers_every_call_with_the_failure_and_the_next_call_still_runs() {
        let g: CallBatch<u32, Option<u32>> = CallBatch::new();
        let answer = g.submit(1, LONG, |_| panic!("a bug in the batch"), |_| None);
        assert_eq!(answer, None);
        let ran = AtomicUsize::new(0);
        let answer = g.submit(
            2,
            LONG,
            |jobs| {
                ran.fetch_add(1, Ordering::Relaxed);
                jobs.into_iter().map(Some).collect()
            },
            |_| None,
        );
        assert_eq!(answer, Some(2));
        assert_eq!(ran.load(Ordering::Relaxed), 1);
    }
}
