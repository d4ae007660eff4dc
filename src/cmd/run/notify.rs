//! Cross-host wake-ups for waiters on a PostgreSQL store: a release (an
//! eviction, a resume) notifies `jobrun_release` in its own transaction, and
//! a queued pass listens on a connection it holds while it waits, so a
//! waiter on any host looks again at once instead of at its next poll.
//!
//! Kept apart from the same-machine wake files (`wake.rs`): it needs only
//! the store. Nothing depends on it for correctness: a missed notification
//! (a dropped connection, a pooler that does not carry LISTEN) costs one
//! poll interval, never a pass.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
#[cfg(feature = "postgres")]
use std::time::Duration;

#[cfg(feature = "postgres")]
use crate::events::Event;
use crate::events::EventSender;
#[cfg(feature = "postgres")]
use crate::store::postgres::PgStore;
use crate::store::StoreSpec;
#[cfg(feature = "postgres")]
use crate::store::ALL_JOBS;

/// How often the listening thread checks whether its waiter is done.
#[cfg(feature = "postgres")]
const CHECK_STOP: Duration = Duration::from_millis(200);

/// A listening connection; dropping it stops the thread and closes it.
pub struct Listener {
    stop: Arc<AtomicBool>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Listen for releases of `job`, forwarding each as `Event::Wake`. `None`
/// when the store has no notifications (SQLite) or the listening
/// connection could not be opened (the waiter just polls). The LISTEN is
/// in place when this returns, so a release after it is never missed.
pub fn listen(spec: &StoreSpec, job: &str, events: EventSender) -> Option<Listener> {
    let StoreSpec::Postgres(url) = spec else {
        return None;
    };
    on_postgres(url, job, events)
}

/// A build without the PostgreSQL store hands its commands over before
/// any waits (`store::elsewhere`).
#[cfg(not(feature = "postgres"))]
fn on_postgres(_url: &str, _job: &str, _events: EventSender) -> Option<Listener> {
    None
}

#[cfg(feature = "postgres")]
fn on_postgres(url: &str, job: &str, events: EventSender) -> Option<Listener> {
    // A busy server is not waited for: the waiter polls instead. The pass
    // checked the schema; listening needs only a connection.
    let mut store = PgStore::connect(url, Duration::ZERO).ok()?;
    store.backend().listen_releases().ok()?;
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, url, job) = (stop.clone(), url.to_string(), job.to_string());
    std::thread::Builder::new()
        .name("jobrun-listen".into())
        .spawn(move || {
            let mut store = Some(store);
            while !flag.load(Ordering::SeqCst) {
                let Some(s) = store.as_mut() else {
                    // Reconnect after a pause; a release meanwhile may have
                    // been missed, so look once more when listening again.
                    std::thread::sleep(Duration::from_secs(1));
                    if let Ok(mut s) = PgStore::connect(&url, Duration::ZERO) {
                        if s.backend().listen_releases().is_ok() {
                            store = Some(s);
                            let _ = events.send(Event::Wake);
                        }
                    }
                    continue;
                };
                match s.backend().next_release(CHECK_STOP) {
                    Ok(Some(named)) if named == job || named == ALL_JOBS => {
                        if events.send(Event::Wake).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => store = None,
                }
            }
        })
        .ok()?;
    Some(Listener { stop })
}
