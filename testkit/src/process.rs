//! Child processes that cannot outlive the test binary: spawned with a parent-death signal from
//! a thread that never exits, and killed by PID from an exit handler.
//!
//! Two mechanisms, because each covers a hole in the other:
//! - `PR_SET_PDEATHSIG=SIGKILL` kills a child when the test process dies abruptly (SIGKILL,
//!   `cargo test` killed by CI). The kernel fires it when the *thread* that forked exits, not
//!   the process, and libtest runs every test on its own short-lived thread — so all forks
//!   happen on one dedicated spawner thread that lives as long as the process.
//! - libtest never drops statics, and the process exits through `exit(3)`, which runs
//!   `atexit` handlers but does not kill children (they are re-parented to init and would keep
//!   their ports and tempdirs). The handler kills every registered PID, reaps it and removes
//!   the registered directories.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, Once, OnceLock};

use nix::sys::signal::{kill, sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{getppid, Pid};

type SpawnJob = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` on the spawner thread with `PR_SET_PDEATHSIG=SIGKILL` and every signal at its
/// default action, and registers its PID to be killed at exit. Call [`forget_at_exit`] once the
/// child has been killed and reaped.
///
/// Why the default actions: dispositions set to "ignore" survive exec, so a test binary started
/// with SIGHUP ignored (`nohup`, some CI runners) would hand that on to every app it starts, and
/// a POSIX shell cannot trap a signal that was ignored on entry: the sh recording app would
/// silently drop the HUP a test sends it, while its Node twin (Node resets dispositions at
/// boot) records it. A container runtime starts every container with default actions; so does
/// the kit. Any `pre_exec` the caller set runs before this one.
pub fn spawn_tracked(mut cmd: Command) -> io::Result<Child> {
    let parent = std::process::id() as i32;
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
    // syscalls (sigaction, prctl, getppid, _exit); it allocates nothing and takes no locks.
    unsafe {
        cmd.pre_exec(move || {
            let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
            for sig in Signal::iterator() {
                if sig != Signal::SIGKILL && sig != Signal::SIGSTOP {
                    sigaction(sig, &default).map_err(io::Error::from)?;
                }
            }
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
            // The parent may have died between fork and prctl; then no signal would come.
            if getppid().as_raw() != parent {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    let (reply, result) = mpsc::channel();
    spawner()
        .lock()
        .map_err(|_| io::Error::other("spawner lock poisoned"))?
        .send((cmd, reply))
        .map_err(|_| io::Error::other("spawner thread is gone"))?;
    let child = result
        .recv()
        .map_err(|_| io::Error::other("spawner thread dropped the request"))??;
    kill_at_exit(child.id() as i32);
    Ok(child)
}

/// Removes `dir` (recursively) when the process exits, after every tracked child is dead.
/// Set `PME_KEEP_TMP=1` to keep it for a post-mortem.
pub fn remove_at_exit(dir: PathBuf) {
    install_exit_handler();
    if let Ok(mut dirs) = exit_dirs().lock() {
        dirs.push(dir);
    }
}

/// Stops tracking `pid` (it was killed and reaped by its owner; the number may be reused).
pub fn forget_at_exit(pid: i32) {
    for slot in &PIDS {
        if slot
            .compare_exchange(pid, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
    }
}

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("pme-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so `recv` only fails at process teardown.
                while let Ok((mut cmd, reply)) = queue.recv() {
                    let _ = reply.send(cmd.spawn());
                }
                // Never return: children forked here get SIGKILL when this thread exits.
                loop {
                    std::thread::park();
                }
            })
            .expect("cannot start the pme-spawner thread");
        Mutex::new(jobs)
    })
}

/// Fixed slots instead of a `Mutex<Vec>`: the exit handler may run while another thread holds
/// a lock, and atomics cannot deadlock it.
static PIDS: [AtomicI32; 256] = [const { AtomicI32::new(0) }; 256];

fn exit_dirs() -> &'static Mutex<Vec<PathBuf>> {
    static DIRS: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
    DIRS.get_or_init(|| Mutex::new(Vec::new()))
}

fn kill_at_exit(pid: i32) {
    install_exit_handler();
    for slot in &PIDS {
        if slot
            .compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
    }
    // More than 256 live children is a leak in a test, not a load to support.
    eprintln!("support::process: no free slot to track pid {pid}; it relies on PDEATHSIG");
}

fn install_exit_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a plain `extern "C" fn()` is what atexit expects.
        let rc = unsafe { libc::atexit(kill_tracked_at_exit) };
        if rc != 0 {
            eprintln!("support::process: atexit failed; children rely on PDEATHSIG");
        }
    });
}

extern "C" fn kill_tracked_at_exit() {
    for slot in &PIDS {
        let pid = slot.swap(0, Ordering::SeqCst);
        if pid > 0 {
            let pid = Pid::from_raw(pid);
            let _ = kill(pid, Signal::SIGKILL);
            // Reap so the directories below are no longer in use; ECHILD if already reaped.
            let _ = waitpid(pid, None);
        }
    }
    if std::env::var_os("PME_KEEP_TMP").is_some() {
        return;
    }
    // try_lock: a thread still running at exit may hold the lock; leaking a tempdir beats
    // hanging the test binary.
    if let Ok(dirs) = exit_dirs().try_lock() {
        for dir in dirs.iter() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
