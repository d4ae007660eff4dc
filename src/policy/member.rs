//! Who is a member of a pass: the one rule that says whether a running
//! process belongs to a pass, from where the kernel says it sits.
//!
//! A row names the pass's process group (its command's pid) and the
//! wrapper's session, and anyone who can write the store can name any. An
//! inherited environment string (`JOBRUN_PASS`) is no proof by itself
//! either: a daemon the command started with `setsid` carries it for life.
//! What only the pass has is where its processes sit. jobrun's command
//! leads a process group inside the wrapper's session and is never a
//! session leader (a group leader cannot call `setsid`), and every member
//! of a group shares its leader's session. So a process whose session id
//! equals its group id has left the wrapper's session, and is never a
//! member, whatever its environment or a row says; and a group counts only
//! while it sits in the session the wrapper recorded.

/// Where the kernel says a running process sits now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seat {
    pub pgid: i32,
    pub session: i32,
}

/// Whether a running process is a member of a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Membership {
    Member,
    /// It is not, and why (an operator reads it after `pid N `).
    Outside(String),
    /// Where it sits fits, but its environment cannot be read (another
    /// user's process): nothing says whose it is.
    Cannot,
}

/// The membership rule: a process of group `group` (the command's pid),
/// not a session leader's group, in the wrapper's session `session` where
/// the row recorded one, carrying the pass's id (`carries`: `None` when
/// its environment cannot be read).
pub fn membership(
    group: i32,
    session: Option<i32>,
    seat: Seat,
    carries: Option<bool>,
) -> Membership {
    if seat.pgid != group {
        return Membership::Outside(format!("is not in the pass's process group {group}"));
    }
    if seat.session == seat.pgid {
        return Membership::Outside(format!(
            "left the wrapper's session (setsid): its group leads session {}",
            seat.session
        ));
    }
    if let Some(s) = session.filter(|s| *s != seat.session) {
        return Membership::Outside(format!(
            "is in session {}, not the wrapper's session {s}",
            seat.session
        ));
    }
    match carries {
        Some(true) => Membership::Member,
        Some(false) => Membership::Outside("is not of this pass".into()),
        None => Membership::Cannot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_membership_table() {
        let seat = |pgid, session| Seat { pgid, session };
        let member = Membership::Member;
        let outside = |m: &Membership| matches!(m, Membership::Outside(_));
        // (group, recorded session, seat, carries the id) -> member?
        let table = [
            // The command's group inside the wrapper's session.
            ((100, Some(7), seat(100, 7), Some(true)), Some(true)),
            // A row of a jobrun that recorded no session.
            ((100, None, seat(100, 7), Some(true)), Some(true)),
            // Another user's process: where it sits fits, nothing more.
            ((100, Some(7), seat(100, 7), None), None),
            // A setsid escapee, named as the group by a forged row.
            ((100, Some(100), seat(100, 100), Some(true)), Some(false)),
            ((100, None, seat(100, 100), Some(true)), Some(false)),
            // A group of the pass's id in another session.
            ((100, Some(7), seat(100, 9), Some(true)), Some(false)),
            // Another group; a process without the pass's id.
            ((100, Some(7), seat(101, 7), Some(true)), Some(false)),
            ((100, Some(7), seat(100, 7), Some(false)), Some(false)),
        ];
        for ((group, session, seat, carries), want) in table {
            let m = membership(group, session, seat, carries);
            let got = match &m {
                m if *m == member => Some(true),
                m if outside(m) => Some(false),
                _ => None,
            };
            assert_eq!(got, want, "{group} {session:?} {seat:?} {carries:?}: {m:?}");
        }
    }
}
