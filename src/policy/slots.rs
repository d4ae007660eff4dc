//! How many passes of a job may run at once, and who gets a slot next.
//!
//! A job's slot count is whatever its passes ask for (`--slots N`); when
//! they disagree, the smallest among the live holders, the waiters and the
//! asker binds, and never less than one (a row with `slots = 0`, which only
//! a writer of the store can make, must not leave the queue unwoken).
//! Promotion, the queue's read-only look and the release's wake-ups all
//! count the same way, here.

/// The slot accounting of one job, from the rows read in one transaction
/// (or one consistent read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupancy {
    /// The slots held now.
    held: Vec<u32>,
    /// The binding slot count.
    limit: u32,
    /// Waiter ids in arrival order.
    queue: Vec<i64>,
}

/// Where a waiter stands when it asks to be promoted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Its row is gone (removed as a ghost, or cleared).
    Gone,
    /// Within the free slots: it may take one now.
    Now,
    /// Behind the free slots, at this 1-based queue position.
    Behind(u32),
}

impl Occupancy {
    /// `held`: (slot, `--slots` asked) of each lease; `queue`: (id,
    /// `--slots` asked) of each waiter in arrival order; `asked`: the
    /// asker's own `--slots`, when it asks for a slot now.
    pub fn of(
        held: impl IntoIterator<Item = (u32, u32)>,
        queue: impl IntoIterator<Item = (i64, u32)>,
        asked: Option<u32>,
    ) -> Occupancy {
        let held: Vec<(u32, u32)> = held.into_iter().collect();
        let queue: Vec<(i64, u32)> = queue.into_iter().collect();
        let limit = held
            .iter()
            .map(|(_, n)| *n)
            .chain(queue.iter().map(|(_, n)| *n))
            .chain(asked)
            .min()
            .unwrap_or(1)
            .max(1);
        Occupancy {
            held: held.into_iter().map(|(slot, _)| slot).collect(),
            limit,
            queue: queue.into_iter().map(|(id, _)| id).collect(),
        }
    }

    /// Slots free now.
    pub fn free(&self) -> usize {
        (self.limit as usize).saturating_sub(self.held.len())
    }

    /// Whether a pass that does not wait may take a slot: only when a slot
    /// is free beyond every waiter's claim (it never jumps the queue).
    pub fn room_past_the_queue(&self) -> bool {
        self.free() > self.queue.len()
    }

    /// The slot a new holder takes: the lowest free one.
    pub fn lowest_free_slot(&self) -> u32 {
        (0..).find(|s| !self.held.contains(s)).unwrap_or(0)
    }

    /// Where waiter `id` stands: first come, first served, one per free
    /// slot.
    pub fn turn_of(&self, id: i64) -> Turn {
        match self.queue.iter().position(|w| *w == id) {
            None => Turn::Gone,
            Some(rank) if rank < self.free() => Turn::Now,
            Some(rank) => Turn::Behind(rank as u32 + 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_slot_count_binds_and_never_below_one() {
        // (held: (slot, slots), queue: (id, slots), asked) -> (limit, free)
        type Case<'a> = (
            &'a [(u32, u32)],
            &'a [(i64, u32)],
            Option<u32>,
            (u32, usize),
        );
        let table: [Case; 7] = [
            (&[], &[], Some(1), (1, 1)),
            (&[], &[], Some(3), (3, 3)),
            (&[(0, 3)], &[], Some(3), (3, 2)),
            (&[(0, 3)], &[(7, 2)], Some(3), (2, 1)),
            (&[(0, 3), (1, 3)], &[], Some(1), (1, 0)),
            // A row with slots = 0 (only a writer of the store makes one)
            // binds at one: the queue is still woken and promoted.
            (&[], &[(7, 0)], None, (1, 1)),
            (&[(0, 0)], &[(7, 0)], None, (1, 0)),
        ];
        for (held, queue, asked, want) in table {
            let o = Occupancy::of(held.iter().copied(), queue.iter().copied(), asked);
            assert_eq!((o.limit, o.free()), want, "{held:?} {queue:?} {asked:?}");
        }
    }

    #[test]
    fn waiters_are_served_in_arrival_order_one_per_free_slot() {
        let o = Occupancy::of([(1, 3)], [(10, 3), (11, 3), (12, 3)], None);
        assert_eq!(o.lowest_free_slot(), 0);
        assert_eq!(o.turn_of(10), Turn::Now);
        assert_eq!(o.turn_of(11), Turn::Now);
        assert_eq!(o.turn_of(12), Turn::Behind(3));
        assert_eq!(o.turn_of(99), Turn::Gone);
        assert_eq!(o.free(), 2);
        assert!(!o.room_past_the_queue());
        let o = Occupancy::of([(0, 3)], [(10, 3)], Some(3));
        assert!(o.room_past_the_queue());
        assert_eq!(o.lowest_free_slot(), 1);
        let empty = Occupancy::of([], [], None);
        assert_eq!(empty.free(), 1);
    }
}
