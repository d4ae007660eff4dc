//! Capture a command's output (`--output quiet-unless-failed`) into its
//! pass's spool, bounded, without holding it in memory and without ever
//! holding up the pass.
//!
//! The command's stdout and stderr are one pipe, so what it writes arrives
//! in the order it wrote it. A thread reads the pipe into the spool. The
//! spool keeps at most `--output-limit` bytes: the head and the tail, with
//! a line marking the cut between them (the tail goes round a ring in the
//! file while the command runs, so the file never grows past the limit
//! until the mark is put in at the end). The thread does not wait for
//! end-of-file once told the pass is over: a daemon the command started
//! may hold the pipe open for ever, and the pass ends when its process
//! group is gone, not when every copy of the pipe is closed. What was
//! written before then is in the pipe and is read.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::files::Spool;

/// Copies and reads are done this much at a time.
const CHUNK: usize = 64 * 1024;
/// How long the reader drains the pipe once told to stop.
const DRAIN: Duration = Duration::from_secs(1);

/// The smallest `--output-limit`: room for a head, a tail and the mark.
pub const MIN_LIMIT: u64 = 1024;

/// A pass's capture before its command runs: the pipe the command writes
/// to, and the spool its reader will fill.
pub struct Capture {
    spool: Spool,
    read: OwnedFd,
    write: OwnedFd,
    limit: u64,
}

/// A capture being read while the command runs.
pub struct Reading {
    spool: Spool,
    stop: OwnedFd,
    reader: JoinHandle<Written>,
}

/// What the reader wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// Every byte the command wrote (that was read).
    pub total: u64,
    /// How many of them were cut out of the middle.
    pub cut: u64,
    /// Why the spool is incomplete (a full disk), if it is.
    pub error: Option<String>,
}

/// The output of a pass that is over, in its spool.
pub struct Spooled {
    spool: Spool,
    pub written: Written,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

impl Capture {
    pub fn new(spool: Spool, limit: u64) -> io::Result<Capture> {
        let (read, write) = pipe()?;
        Ok(Capture {
            spool,
            read,
            write,
            limit: limit.max(MIN_LIMIT),
        })
    }

    /// Where the command's stdout and stderr go.
    pub fn command_end(&self) -> BorrowedFd<'_> {
        self.write.as_fd()
    }

    /// Start reading: the wrapper's own copy of the writing end is closed,
    /// so the pipe ends when the command's processes have closed theirs.
    pub fn start(self) -> io::Result<Reading> {
        let Capture {
            spool,
            read,
            write,
            limit,
        } = self;
        drop(write);
        let (stop_r, stop) = pipe()?;
        let file = spool.file().try_clone()?;
        let reader = std::thread::Builder::new()
            .name("jobrun-output".into())
            .spawn(move || read_loop(read, stop_r, Bounded::new(file, limit)))?;
        Ok(Reading {
            spool,
            stop,
            reader,
        })
    }
}

impl Reading {
    /// The pass is over (its process group is gone): read what is left in
    /// the pipe, without waiting for processes that left the group and
    /// still hold it, and close the spool's bounds.
    pub fn finish(self) -> Spooled {
        let _ = nix::unistd::write(&self.stop, b"q");
        let written = self.reader.join().unwrap_or_else(|_| Written {
            error: Some("the output reader failed".into()),
            ..Written::default()
        });
        Spooled {
            spool: self.spool,
            written,
        }
    }
}

impl Spooled {
    /// The spool's path: what a failure hook gets in `JOBRUN_OUTPUT_FILE`
    /// (`hook::OUTPUT_FILE_ENV`), before `Ctx::end` removes it.
    pub fn path(&self) -> &Path {
        self.spool.path()
    }

    /// Copy the whole spool to `out`.
    pub fn copy_to(&self, out: &mut dyn Write) -> io::Result<()> {
        let file = self.spool.file();
        let mut buf = vec![0u8; CHUNK];
        let mut at = 0;
        loop {
            let n = file.read_at(&mut buf, at)?;
            if n == 0 {
                return out.flush();
            }
            out.write_all(&buf[..n])?;
            at += n as u64;
        }
    }

    /// The last `n` bytes of the spool (all of it when shorter).
    pub fn tail(&self, n: u64) -> io::Result<Vec<u8>> {
        let file = self.spool.file();
        let len = file.metadata()?.len();
        let from = len.saturating_sub(n);
        let mut buf = vec![0u8; (len - from) as usize];
        file.read_exact_at(&mut buf, from)?;
        Ok(buf)
    }
}

/// Read `read` into `out` until end-of-file, or until `stop` is written to
/// and what is in the pipe then has been drained (for at most `DRAIN`).
fn read_loop(read: OwnedFd, stop: OwnedFd, mut out: Bounded) -> Written {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut buf = vec![0u8; CHUNK];
    let mut error = None;
    let mut take = |buf: &[u8], out: &mut Bounded| {
        if error.is_none() {
            if let Err(e) = out.write(buf) {
                error = Some(format!("cannot write the output spool: {e}"));
            }
        }
    };
    loop {
        let (data, stopped) = {
            let mut fds = [
                PollFd::new(read.as_fd(), PollFlags::POLLIN),
                PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
            let any = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            (any(&fds[0]), any(&fds[1]))
        };
        if stopped {
            // Told to stop: drain what is there, never wait for more (a
            // writer that keeps writing is cut off at the deadline).
            let _ = nix::fcntl::fcntl(
                read.as_fd(),
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            );
            let deadline = Instant::now() + DRAIN;
            while Instant::now() < deadline {
                match nix::unistd::read(read.as_fd(), &mut buf) {
                    Ok(0) => break,
                    Ok(n) => take(&buf[..n], &mut out),
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => break,
                }
            }
            break;
        }
        if data {
            match nix::unistd::read(read.as_fd(), &mut buf) {
                Ok(0) => break,
                Ok(n) => take(&buf[..n], &mut out),
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => break,
            }
        }
    }
    let (total, cut) = match out.close() {
        Ok(x) => x,
        Err(e) => {
            error.get_or_insert(format!("cannot write the output spool: {e}"));
            (out.total, 0)
        }
    };
    Written { total, cut, error }
}

/// The spool's bounds: the first `head` bytes stay where they are; the
/// next `tail` bytes of the file are a ring that the rest of the output
/// goes round, so the file never holds more than the limit. Closing it
/// turns the ring into the last `tail` bytes in order and puts the mark of
/// the cut between the head and them.
struct Bounded {
    file: File,
    head: u64,
    tail: u64,
    /// Where the next byte goes in the ring (0 until the head is full).
    at: u64,
    total: u64,
}

/// The line that marks where output was cut.
pub fn cut_mark(cut: u64) -> String {
    format!("\n[jobrun: {cut} bytes of output cut here (--output-limit)]\n")
}

impl Bounded {
    fn new(file: File, limit: u64) -> Bounded {
        let head = limit / 2;
        Bounded {
            file,
            head,
            tail: limit - head,
            at: 0,
            total: 0,
        }
    }

    fn write(&mut self, mut buf: &[u8]) -> io::Result<()> {
        if self.total < self.head {
            let k = buf.len().min((self.head - self.total) as usize);
            self.file.write_all_at(&buf[..k], self.total)?;
            self.total += k as u64;
            buf = &buf[k..];
        }
        // Only the last `tail` bytes of what is left can stay.
        let skip = (buf.len() as u64).saturating_sub(self.tail);
        if skip > 0 {
            self.at = (self.at + skip) % self.tail;
            self.total += skip;
            buf = &buf[skip as usize..];
        }
        while !buf.is_empty() {
            let k = buf.len().min((self.tail - self.at) as usize);
            self.file.write_all_at(&buf[..k], self.head + self.at)?;
            self.at = (self.at + k as u64) % self.tail;
            self.total += k as u64;
            buf = &buf[k..];
        }
        Ok(())
    }

    /// Copy `n` bytes from `from` to `to`, chunk by chunk, front to back
    /// when moving down, back to front when moving up, so an overlap is
    /// never read after it was written.
    fn copy(&self, from: u64, to: u64, n: u64) -> io::Result<()> {
        let mut buf = vec![0u8; CHUNK];
        let mut done = 0;
        while done < n {
            let k = (n - done).min(CHUNK as u64);
            let off = if to <= from { done } else { n - done - k };
            let chunk = &mut buf[..k as usize];
            self.file.read_exact_at(chunk, from + off)?;
            self.file.write_all_at(chunk, to + off)?;
            done += k;
        }
        Ok(())
    }

    /// Reverse the bytes of `[from, to)` in place, a chunk from each end
    /// at a time.
    fn reverse(&self, mut from: u64, mut to: u64) -> io::Result<()> {
        let (mut a, mut b) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
        while to - from >= 2 {
            let k = ((to - from) / 2).min(CHUNK as u64);
            let (front, back) = (&mut a[..k as usize], &mut b[..k as usize]);
            self.file.read_exact_at(front, from)?;
            self.file.read_exact_at(back, to - k)?;
            front.reverse();
            back.reverse();
            self.file.write_all_at(back, from)?;
            self.file.write_all_at(front, to - k)?;
            from += k;
            to -= k;
        }
        Ok(())
    }

    /// Close the bounds: (every byte written, the bytes cut).
    fn close(&mut self) -> io::Result<(u64, u64)> {
        if self.total <= self.head + self.tail {
            return Ok((self.total, 0));
        }
        // The ring went round: its oldest byte is at `at`. Rotate it into
        // order (reverse both parts, then the whole).
        let (ring, end) = (self.head, self.head + self.tail);
        self.reverse(ring, ring + self.at)?;
        self.reverse(ring + self.at, end)?;
        self.reverse(ring, end)?;
        let cut = self.total - self.head - self.tail;
        let mark = cut_mark(cut);
        let m = mark.len() as u64;
        self.copy(ring, ring + m, self.tail)?;
        self.file.write_all_at(mark.as_bytes(), ring)?;
        Ok((self.total, cut))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spooled(limit: u64, input: &[u8], chunk: usize) -> (Vec<u8>, Written) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        crate::files::private_dir(&dir).unwrap();
        let cap = Capture::new(Spool::create(&dir, "00000000000a").unwrap(), limit).unwrap();
        let mut w = File::from(cap.write.try_clone().unwrap());
        let reading = cap.start().unwrap();
        let input = input.to_vec();
        let writer = std::thread::spawn(move || {
            for c in input.chunks(chunk) {
                w.write_all(c).unwrap();
            }
        });
        writer.join().unwrap();
        let s = reading.finish();
        let mut out = Vec::new();
        s.copy_to(&mut out).unwrap();
        (out, s.written)
    }

    #[test]
    fn output_under_the_limit_is_kept_whole() {
        let input: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let (out, w) = spooled(4096, &input, 7);
        assert_eq!(out, input);
        assert_eq!((w.total, w.cut, w.error), (3000, 0, None));
    }

    #[test]
    fn past_the_limit_the_head_and_the_tail_stay_with_the_cut_marked() {
        let input: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        for chunk in [1000, 4096, 65536] {
            let (out, w) = spooled(4096, &input, chunk);
            let cut = 200_000 - 4096;
            assert_eq!((w.total, w.cut), (200_000, cut));
            let mark = cut_mark(cut);
            let mut want = input[..2048].to_vec();
            want.extend_from_slice(mark.as_bytes());
            want.extend_from_slice(&input[input.len() - 2048..]);
            assert_eq!(out.len(), want.len(), "chunk {chunk}");
            assert!(out == want, "chunk {chunk}");
        }
    }

    #[test]
    fn the_ring_goes_round_at_any_write_size_and_the_file_stays_within_the_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        let input: Vec<u8> = (0..50_000u32).map(|i| (i % 241) as u8).collect();
        for (limit, chunk) in [(1024u64, 1usize), (1024, 700), (1025, 3000), (4096, 4096)] {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let mut b = Bounded::new(file.try_clone().unwrap(), limit);
            for c in input.chunks(chunk) {
                b.write(c).unwrap();
                assert!(file.metadata().unwrap().len() <= limit);
            }
            let (total, cut) = b.close().unwrap();
            assert_eq!((total, cut), (50_000, 50_000 - limit));
            let head = (limit / 2) as usize;
            let mut want = input[..head].to_vec();
            want.extend_from_slice(cut_mark(cut).as_bytes());
            want.extend_from_slice(&input[input.len() - (limit as usize - head)..]);
            assert!(std::fs::read(&path).unwrap() == want, "{limit} {chunk}");
        }
    }

    #[test]
    fn the_reader_does_not_wait_for_a_writer_that_keeps_the_pipe_open() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        crate::files::private_dir(&dir).unwrap();
        let cap = Capture::new(Spool::create(&dir, "00000000000b").unwrap(), 4096).unwrap();
        // A daemon's copy of the pipe, never closed while we finish.
        let mut daemon = File::from(cap.write.try_clone().unwrap());
        let reading = cap.start().unwrap();
        daemon.write_all(b"before the end\n").unwrap();
        let started = Instant::now();
        let s = reading.finish();
        assert!(started.elapsed() < DRAIN + Duration::from_secs(1));
        let mut out = Vec::new();
        s.copy_to(&mut out).unwrap();
        assert_eq!(out, b"before the end\n");
        assert_eq!(s.tail(4).unwrap(), b"end\n");
        drop(daemon);
    }
}
