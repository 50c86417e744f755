//! One reading of shared state for every caller that asks for it at about the same time.
//!
//! A caller needs a reading taken after it asked (an older one could miss what it looks for).
//! While a reading is being taken, the callers that arrive wait for it to end; then one of them
//! takes the next reading, with the questions of all of them, and each gets that one. A burst
//! of `n` callers costs two readings instead of `n`, and no caller is given a reading that
//! began before it asked. With a gathering time, the caller that is to take a reading waits
//! that long first, and the callers arriving meanwhile share it too.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Readings of type `T`, each made for the questions (`Q`) of the callers waiting for it.
pub(crate) struct Coalesced<Q, T> {
    state: Mutex<State<Q, T>>,
    /// Signalled when a reading ends.
    ended: Condvar,
    /// How long the caller that is to take a reading waits first for others to join it.
    gather: Duration,
}

struct State<Q, T> {
    /// Readings begun so far; the latest one's id.
    begun: u64,
    /// Whether a reading is being taken now.
    running: bool,
    /// The next caller's id.
    next_caller: u64,
    /// The callers waiting for a reading, with their questions.
    waiting: Vec<(u64, Q)>,
    /// The last reading that ended, with its id.
    latest: Option<(u64, Arc<T>)>,
}

impl<Q: Clone, T> Coalesced<Q, T> {
    /// No reading yet; the caller that is to take a reading first waits `gather` for others
    /// to join it (one reading for callers spread over that time; zero: none).
    pub const fn gathering_for(gather: Duration) -> Self {
        Coalesced {
            gather,
            state: Mutex::new(State {
                begun: 0,
                running: false,
                next_caller: 0,
                waiting: Vec::new(),
                latest: None,
            }),
            ended: Condvar::new(),
        }
    }

    /// A reading begun after this call: made by this caller with `read`, given the questions
    /// of every caller waiting then (this one's included), or made so by another caller.
    /// Blocks while an earlier reading ends.
    pub fn get(&self, question: Q, read: impl FnOnce(&[Q]) -> T) -> Arc<T> {
        let mut state = self.lock();
        let needed = state.begun + 1;
        let me = state.next_caller;
        state.next_caller += 1;
        state.waiting.push((me, question));
        loop {
            if let Some((id, reading)) = &state.latest {
                if *id >= needed {
                    let reading = reading.clone();
                    state.waiting.retain(|(caller, _)| *caller != me);
                    return reading;
                }
            }
            if !state.running {
                return self.take(state, me, read);
            }
            state = self.ended.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Takes the next reading for everyone waiting (`state` is locked and nothing runs).
    fn take(
        &self,
        mut state: MutexGuard<'_, State<Q, T>>,
        me: u64,
        read: impl FnOnce(&[Q]) -> T,
    ) -> Arc<T> {
        state.running = true;
        if !self.gather.is_zero() {
            // Callers arriving meanwhile see a reading running and wait for the next one,
            // which is this one: it begins after the wait.
            let deadline = std::time::Instant::now() + self.gather;
            while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
                if left.is_zero() {
                    break;
                }
                state = self
                    .ended
                    .wait_timeout(state, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        state.begun += 1;
        let id = state.begun;
        let questions: Vec<Q> = state.waiting.iter().map(|(_, q)| q.clone()).collect();
        drop(state);
        let running = Running { owner: self, me };
        let reading = Arc::new(read(&questions));
        self.lock().latest = Some((id, reading.clone()));
        drop(running);
        reading
    }

    fn lock(&self) -> MutexGuard<'_, State<Q, T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Ends the running reading and its caller's wait when dropped (also when `read` panics, so
/// no caller waits forever and no question is left behind).
struct Running<'a, Q: Clone, T> {
    owner: &'a Coalesced<Q, T>,
    me: u64,
}

impl<Q: Clone, T> Drop for Running<'_, Q, T> {
    fn drop(&mut self) {
        let mut state = self.owner.lock();
        state.running = false;
        state.waiting.retain(|(caller, _)| *caller != self.me);
        drop(state);
        self.owner.ended.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::Barrier;
    use std::time::Duration;

    /// Each reading records when it began (a clock of calls) and the questions it answered.
    #[derive(Debug)]
    struct Reading {
        began_at: u64,
        questions: Vec<u64>,
    }

    /// `callers` threads each call `before(i)`, then ask `coalesced` (a reading takes
    /// `reading_takes`); checks that each got a reading begun after it asked, with its question.
    /// Returns how many readings were taken.
    fn ask(
        coalesced: &'static Coalesced<u64, Reading>,
        callers: u64,
        before: impl Fn(u64) + Sync,
        reading_takes: Duration,
    ) -> u64 {
        let clock = AtomicU64::new(0);
        let readings = AtomicU64::new(0);
        let results: Vec<(u64, Arc<Reading>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..callers)
                .map(|i| {
                    let (clock, readings, before) = (&clock, &readings, &before);
                    s.spawn(move || {
                        before(i);
                        let asked_at = clock.fetch_add(1, SeqCst);
                        let reading = coalesced.get(i, |questions| {
                            readings.fetch_add(1, SeqCst);
                            let began_at = clock.fetch_add(1, SeqCst);
                            std::thread::sleep(reading_takes);
                            Reading {
                                began_at,
                                questions: questions.to_vec(),
                            }
                        });
                        (asked_at, reading)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, (asked_at, reading)) in results.iter().enumerate() {
            assert!(reading.began_at > *asked_at, "caller {i}: {reading:?}");
            assert!(
                reading.questions.contains(&(i as u64)),
                "caller {i}: {reading:?}"
            );
        }
        readings.load(SeqCst)
    }

    #[test]
    fn callers_arriving_during_a_reading_share_the_next_one_which_began_after_each_asked() {
        static COALESCED: Coalesced<u64, Reading> = Coalesced::gathering_for(Duration::ZERO);
        let start = Barrier::new(8);
        // Each reading long enough for the others to arrive while it runs.
        let taken = ask(
            &COALESCED,
            8,
            |_| {
                start.wait();
            },
            Duration::from_millis(50),
        );
        assert!(
            (1..=3).contains(&taken),
            "8 callers arriving together took {taken} readings"
        );
    }

    #[test]
    fn callers_arriving_while_one_gathers_share_its_reading_which_began_after_each_asked() {
        static COALESCED: Coalesced<u64, Reading> =
            Coalesced::gathering_for(Duration::from_millis(300));
        // Spread over 90 ms, each reading instant.
        let spread = |i: u64| std::thread::sleep(Duration::from_millis(30 * i));
        let taken = ask(&COALESCED, 4, spread, Duration::ZERO);
        assert_eq!(taken, 1, "4 callers within the gathering time");
    }

    #[test]
    fn a_caller_after_a_reading_ended_gets_a_new_one_and_a_panicking_reading_blocks_no_one() {
        let coalesced: Coalesced<u8, u32> = Coalesced::gathering_for(Duration::ZERO);
        assert_eq!(*coalesced.get(1, |q| u32::from(q[0])), 1);
        assert_eq!(*coalesced.get(2, |q| u32::from(q[0])), 2);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            coalesced.get(3, |_| panic!("reading failed"))
        }));
        assert!(panicked.is_err());
        assert_eq!(
            *coalesced.get(4, |q| q.iter().map(|&x| u32::from(x)).sum()),
            4
        );
    }
}
