//! A dataset position that checkpoints itself: [`Cursor`] walks a list of items in a cycle
//! (upstream's `self.train[self.iter % len(self.train)]`), and a cursor made inside `setup`
//! registers its position with the run, so `serve` saves it in every checkpoint and restores
//! it on restart without the author writing `save_checkpoint` for it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

tokio::task_local! {
    /// The positions of the cursors made by the `setup` hook being run.
    static REGISTRY: Cursors;
}

/// The named positions of a run's cursors (shared with the cursors themselves).
#[derive(Debug, Clone, Default)]
pub struct Cursors(Arc<Mutex<BTreeMap<String, Arc<AtomicU64>>>>);

impl Cursors {
    /// Runs `setup` with this registry in scope: every [`Cursor::new`] inside registers here.
    pub async fn scope<F: std::future::Future>(&self, setup: F) -> F::Output {
        REGISTRY.scope(self.clone(), setup).await
    }

    /// Every registered cursor's position, by name.
    pub fn positions(&self) -> BTreeMap<String, u64> {
        self.lock()
            .iter()
            .map(|(name, pos)| (name.clone(), pos.load(Ordering::SeqCst)))
            .collect()
    }

    /// Sets the positions of the cursors named in `saved`; returns the saved names no
    /// registered cursor has (the environment no longer makes them).
    pub fn restore(&self, saved: &BTreeMap<String, u64>) -> Vec<String> {
        let registered = self.lock();
        let mut unknown = Vec::new();
        for (name, value) in saved {
            match registered.get(name) {
                Some(pos) => pos.store(*value, Ordering::SeqCst),
                None => unknown.push(name.clone()),
            }
        }
        unknown
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<AtomicU64>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Items served in order, wrapping around at the end, with a position that `serve`
/// checkpoints when the cursor was made in `setup` (else one WARN line says it is not).
#[derive(Debug)]
pub struct Cursor<T> {
    items: Vec<T>,
    position: Arc<AtomicU64>,
}

impl<T: Clone> Cursor<T> {
    /// A cursor over `items` at position 0, checkpointed under `name` (unique per
    /// environment, e.g. `"train"`).
    pub fn new(name: &str, items: Vec<T>) -> Cursor<T> {
        let position = Arc::new(AtomicU64::new(0));
        let registered = REGISTRY.try_with(|registry| {
            let mut map = registry.lock();
            if map.insert(name.to_owned(), Arc::clone(&position)).is_some() {
                tracing::warn!(
                    "data cursor '{name}' was made twice in setup: only the last one is checkpointed"
                );
            }
        });
        if registered.is_err() {
            tracing::warn!(
                "data cursor '{name}' was made outside the setup hook: its position is not checkpointed"
            );
        }
        Cursor { items, position }
    }

    /// The item at the position, then the position moves on; `None` only when there are no
    /// items. Wraps around at the end, as upstream's `iter % len` does.
    pub fn next_item(&mut self) -> Option<T> {
        if self.items.is_empty() {
            return None;
        }
        let at = self.position.fetch_add(1, Ordering::SeqCst);
        Some(self.items[(at % self.items.len() as u64) as usize].clone())
    }

    /// Items served so far (across restarts); `position() / len()` is the number of epochs.
    pub fn position(&self) -> u64 {
        self.position.load(Ordering::SeqCst)
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The items, in serving order.
    pub fn items(&self) -> &[T] {
        &self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cursors_made_in_scope_are_saved_and_restored() {
        let cursors = Cursors::default();
        let mut train = cursors
            .scope(async { Cursor::new("train", vec!['a', 'b', 'c']) })
            .await;
        assert_eq!(train.next_item(), Some('a'));
        assert_eq!(train.next_item(), Some('b'));
        assert_eq!(cursors.positions(), BTreeMap::from([("train".into(), 2)]));
        let saved = BTreeMap::from([("train".to_owned(), 7), ("gone".to_owned(), 1)]);
        assert_eq!(cursors.restore(&saved), ["gone"]);
        assert_eq!(train.position(), 7);
        assert_eq!(train.next_item(), Some('b'), "7 % 3 = 1: wraps as upstream");
        let mut empty: Cursor<u8> = Cursor::new("outside", Vec::new());
        assert_eq!(empty.next_item(), None);
        assert_eq!(
            cursors.positions().len(),
            1,
            "made outside setup: not registered"
        );
    }
}
