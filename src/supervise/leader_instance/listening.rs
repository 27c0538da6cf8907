//! The leader instance's "listening" pipe: how a supervisor that starts while its pod leads
//! learns that the leader instance has booted, so the serving instance it holds back
//! (`--serving-head-start`) starts then instead of after a fixed wait.
//!
//! Why a signal and not only a wait: two Node.js boots at once share the pod's CPU, and on a
//! small node the leader instance's boot took twice as long with the serving instance booting
//! beside it; but how long a boot takes alone differs from node to node, so any fixed wait is
//! either too short (the boots overlap) or longer than needed (the pod is not Ready meanwhile).
//! The app's first `listen()` is the end of its boot that an unmodified image shows: Passmower
//! listens once Redis is connected, right before its operators start watching.
//!
//! Only with `--leader-port-map`, whose preload module already sees every `listen()` of the
//! leader instance: it writes one byte to the pipe's write end (its number in
//! [`FD_VAR`]) when the first server is listening, and closes it. The write end is inherited by
//! that one leader instance alone; the supervisor keeps the read end, so EOF means the leader
//! instance (and everything it started) is gone or closed it: the serving instance starts then
//! too. The head start stays the upper bound.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

/// The variable telling the preload module which file descriptor to write to.
pub const FD_VAR: &str = "PASSMOWER_ELECTOR_LISTENING_FD";

/// A pipe opened for one leader instance's start.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    /// Opens the pipe with an inheritable write end. The supervisor starts processes from its
    /// one loop thread, and the pipe is opened right before the leader instance's start and
    /// handed to [`Pipe::watch`] right after it, so no other start inherits the write end.
    pub fn open() -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        fcntl(&write, FcntlArg::F_SETFD(FdFlag::empty()))?;
        Ok(Pipe { read, write })
    }

    /// The variable to give the leader instance.
    pub fn env(&self) -> (String, String) {
        (FD_VAR.to_owned(), self.write.as_raw_fd().to_string())
    }

    /// Closes the supervisor's copy of the write end and waits, in a task, for the leader
    /// instance's byte or EOF; then sends `()` on `done`.
    pub fn watch(self, done: mpsc::UnboundedSender<()>) -> io::Result<()> {
        drop(self.write);
        let mut read = pipe::Receiver::from_owned_fd(self.read)?;
        tokio::spawn(async move {
            let mut byte = [0u8; 1];
            // A byte, EOF or an error: the boot is over or the instance is gone, either way
            // nothing is left to wait for.
            let _ = read.read(&mut byte).await;
            let _ = done.send(());
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_watch_ends_on_a_byte_or_on_eof() {
        // A byte from the holder of the write end.
        let pipe = Pipe::open().expect("pipe");
        let write = pipe.write.try_clone().expect("dup");
        let (tx, mut rx) = mpsc::unbounded_channel();
        pipe.watch(tx).expect("watch");
        assert!(rx.try_recv().is_err(), "nothing was written yet");
        nix::unistd::write(&write, b"L").expect("write");
        tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv())
            .await
            .expect("the byte ends the watch")
            .expect("sent");

        // EOF: the last holder of the write end closed it.
        let pipe = Pipe::open().expect("pipe");
        let write = pipe.write.try_clone().expect("dup");
        let (tx, mut rx) = mpsc::unbounded_channel();
        pipe.watch(tx).expect("watch");
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "the write end is still open");
        drop(write);
        tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv())
            .await
            .expect("EOF ends the watch")
            .expect("sent");
    }

    #[test]
    fn only_the_write_end_is_inherited() {
        let pipe = Pipe::open().expect("pipe");
        let flags =
            |fd: &OwnedFd| FdFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFD).expect("getfd"));
        assert!(flags(&pipe.read).contains(FdFlag::FD_CLOEXEC));
        assert!(!flags(&pipe.write).contains(FdFlag::FD_CLOEXEC));
        assert_eq!(pipe.env().0, FD_VAR);
        assert_eq!(pipe.env().1, pipe.write.as_raw_fd().to_string());
    }
}
