//! Random bytes from the kernel, for what must not move in step across
//! processes (pass ids, retry pauses, the renewer's tick): the one place
//! jobrun asks for them.

use std::time::Duration;

/// `N` random bytes; `None` only if the kernel would not give them.
pub fn bytes<const N: usize>() -> Option<[u8; N]> {
    let mut buf = [0u8; N];
    // SAFETY: getrandom writes at most buf.len() bytes into buf, which we
    // own for the call.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    (n == N as isize).then_some(buf)
}

/// `base` scaled by a random factor in [0.5, 1.5): processes that met a
/// busy store together do not come back together.
pub fn jittered(base: Duration) -> Duration {
    let r = bytes::<2>().map_or(32_768, u16::from_le_bytes) as u32;
    base / 2 + base * r / 65_536
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_and_one_and_a_half() {
        let base = Duration::from_millis(100);
        for _ in 0..200 {
            let j = jittered(base);
            assert!(j >= base / 2 && j < base * 3 / 2, "{j:?}");
        }
    }
}
