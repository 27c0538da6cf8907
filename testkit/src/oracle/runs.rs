//! The run oracle: every interval during which an app ran in leader mode, from the recording
//! app's own records ([`crate::recording_app`]) and, while watching, the kernel's word on when
//! each one ended; two of them at once is two writers.
//!
//! - An interval starts at the child's start record, its first act: nothing it does as an
//!   operator can come earlier.
//! - It ends at the child's stop record, which its TERM handler writes just before it exits.
//!   A child that wrote none (SIGKILLed, or signalled before its handler was installed) ends
//!   when a pidfd of it became readable — the kernel's "this process has exited" — as seen by a
//!   thread blocked on it, i.e. after the exit; if the child was gone before the observer even
//!   read its start record, when the observer looked.
//!
//! The children stamp their records with the wall clock in nanoseconds (`date +%s%N`), which
//! the observer converts to CLOCK_BOOTTIME with the offset between the two clocks measured when
//! it reads the record, a few milliseconds later (so clock slewing cannot add up). A frozen
//! (SIGSTOPped) child counts as running: it may resume in the middle of its work.
//!
//! Two ways to use it: [`Observer`] tails the records while pods run and watches each leader
//! child's exit (the fault campaign); [`AppRun`]s read afterwards from the records alone, with
//! [`assert_leader_runs_disjoint`] (the pod scenarios against the apiserver).

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::BootTime;
use crate::oracle::{overlaps, Stretch};
use crate::recording_app::parse_run;

/// How often the record files are read.
const TAIL_EVERY: Duration = Duration::from_millis(5);
/// How often a pidfd watcher checks whether the campaign is over.
const WATCH_TICK: Duration = Duration::from_millis(200);

/// One stretch of operator mode: a leader-mode child from its start record to its exit.
#[derive(Clone, Debug)]
pub struct LeaderInterval {
    pub pod: usize,
    pub pid: i32,
    /// The start record.
    pub start: BootTime,
    /// The stop record, if the child's TERM handler wrote one.
    pub stop_record: Option<BootTime>,
    /// When the observer knew the child had exited.
    pub exit_seen: Option<BootTime>,
}

impl LeaderInterval {
    /// The end: the stop record, else the exit as seen; `None` while the child runs.
    pub fn end(&self) -> Option<BootTime> {
        self.stop_record.or(self.exit_seen)
    }

    pub fn end_or(&self, now: BootTime) -> BootTime {
        self.end().unwrap_or(now)
    }
}

struct Shared {
    records: Vec<PathBuf>,
    intervals: Mutex<Vec<LeaderInterval>>,
    /// Follower-mode children seen, for the report.
    follower_starts: Mutex<u64>,
    malformed: Mutex<Vec<String>>,
    stop: AtomicBool,
    watchers: Mutex<Vec<JoinHandle<()>>>,
}

/// Tails every pod's record file and watches each leader child's exit.
#[must_use = "the observer stops when dropped"]
pub struct Observer {
    shared: Arc<Shared>,
    tail: Option<JoinHandle<()>>,
}

impl Observer {
    /// Starts observing `records[pod]`, the file pod `pod`'s children append to. Start it
    /// before any child, so no start record is missed.
    pub fn start(records: Vec<PathBuf>) -> Observer {
        let shared = Arc::new(Shared {
            records,
            intervals: Mutex::new(Vec::new()),
            follower_starts: Mutex::new(0),
            malformed: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            watchers: Mutex::new(Vec::new()),
        });
        let worker = Arc::clone(&shared);
        let tail = std::thread::Builder::new()
            .name("pme-campaign-observer".into())
            .spawn(move || tail(&worker))
            .expect("spawn observer");
        Observer {
            shared,
            tail: Some(tail),
        }
    }

    /// Pods with a leader-mode child running now (as far as the observer knows).
    pub fn leaders(&self) -> Vec<usize> {
        let mut pods: Vec<usize> = lock(&self.shared.intervals)
            .iter()
            .filter(|i| i.end().is_none())
            .map(|i| i.pod)
            .collect();
        pods.sort_unstable();
        pods.dedup();
        pods
    }

    pub fn intervals(&self) -> Vec<LeaderInterval> {
        let mut all = lock(&self.shared.intervals).clone();
        all.sort_by_key(|i| i.start);
        all
    }

    pub fn follower_starts(&self) -> u64 {
        *lock(&self.shared.follower_starts)
    }

    /// Record lines that could not be parsed (a broken child script, reported as a failure).
    pub fn malformed(&self) -> Vec<String> {
        lock(&self.shared.malformed).clone()
    }

    /// Stops observing; intervals still running stay open (`end()` is None).
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.tail.take() {
            let _ = t.join();
        }
        let watchers = std::mem::take(&mut *lock(&self.shared.watchers));
        for w in watchers {
            let _ = w.join();
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn tail(shared: &Arc<Shared>) {
    let mut offsets = vec![0u64; shared.records.len()];
    let mut partial = vec![String::new(); shared.records.len()];
    while !shared.stop.load(Ordering::SeqCst) {
        for pod in 0..shared.records.len() {
            let Some(text) = read_from(&shared.records[pod], &mut offsets[pod]) else {
                continue;
            };
            partial[pod].push_str(&text);
            while let Some(newline) = partial[pod].find('\n') {
                let line: String = partial[pod].drain(..=newline).collect();
                on_line(shared, pod, line.trim_end());
            }
        }
        std::thread::sleep(TAIL_EVERY);
    }
}

/// New bytes of `path` since `offset` (advanced), or None.
fn read_from(path: &PathBuf, offset: &mut u64) -> Option<String> {
    let mut file = fs::File::open(path).ok()?;
    file.seek(SeekFrom::Start(*offset)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    if bytes.is_empty() {
        return None;
    }
    *offset += bytes.len() as u64;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// A `runs` record (see [`crate::recording_app`]).
fn on_line(shared: &Arc<Shared>, pod: usize, line: &str) {
    let Some(record) = parse_run(line, BootTime::wall_offset()) else {
        lock(&shared.malformed).push(format!("pod {pod}: {line:?}"));
        return;
    };
    let (pid, ticks, at) = (record.pid, record.ticks, record.at);
    match (record.stop, record.mode.as_str()) {
        (false, "leader") => {
            lock(&shared.intervals).push(LeaderInterval {
                pod,
                pid,
                start: at,
                stop_record: None,
                exit_seen: None,
            });
            let worker = Arc::clone(shared);
            let watcher = std::thread::Builder::new()
                .name(format!("pme-exit-{pid}"))
                .spawn(move || {
                    let seen = wait_exit(&worker, pid, ticks);
                    if let Some(i) = lock(&worker.intervals)
                        .iter_mut()
                        .rev()
                        .find(|i| i.pid == pid && i.pod == pod)
                    {
                        i.exit_seen = seen;
                    }
                })
                .expect("spawn exit watcher");
            lock(&shared.watchers).push(watcher);
        }
        (false, _) => *lock(&shared.follower_starts) += 1,
        (true, "leader") => {
            if let Some(i) = lock(&shared.intervals)
                .iter_mut()
                .rev()
                .find(|i| i.pid == pid && i.pod == pod)
            {
                i.stop_record = Some(at);
            }
        }
        (true, _) => {}
    }
}

/// Blocks until process `pid` (started at `ticks`) has exited; returns when that was known, or
/// None if the campaign ended first.
fn wait_exit(shared: &Shared, pid: i32, ticks: u64) -> Option<BootTime> {
    // SAFETY: pidfd_open takes a PID and flags and returns a new fd or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        // ESRCH: already reaped.
        return Some(BootTime::now());
    }
    // SAFETY: a fresh fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    // The PID may have been reaped and reused before the open: then the fd is someone else's,
    // and our child is long gone.
    if start_ticks(pid) != Some(ticks) {
        return Some(BootTime::now());
    }
    while !shared.stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, WATCH_TICK.as_millis() as i32) };
        if n > 0 {
            return Some(BootTime::now());
        }
    }
    None
}

/// Every pair of leader intervals that overlap, same pod included (a pod's own children are
/// two writers too), intervals still running ending at `now`.
pub fn overlapping(
    intervals: &[LeaderInterval],
    now: BootTime,
) -> Vec<(LeaderInterval, LeaderInterval)> {
    // Each interval is its own owner: any two of them at once is an overlap.
    let stretches: Vec<Stretch<usize, BootTime>> = intervals
        .iter()
        .enumerate()
        .map(|(i, iv)| Stretch {
            owner: i,
            start: iv.start,
            end: Some(iv.end_or(now)),
        })
        .collect();
    overlaps(&stretches)
        .into_iter()
        .map(|(i, j)| (intervals[i].clone(), intervals[j].clone()))
        .collect()
}

/// What an app recorded of one run: its pid, the mode it ran in, and when it started and
/// stopped (CLOCK_BOOTTIME seconds; `None` while it runs, or when it was killed without a
/// stop record).
#[derive(Clone, Debug)]
pub struct AppRun {
    pub pid: i32,
    pub role: String,
    pub start: f64,
    pub stop: Option<f64>,
}

/// Every pair of leader-mode runs of different pods (`runs[pod]`) is disjoint in time; a run
/// without a stop record lasts for ever.
pub fn assert_leader_runs_disjoint(runs: &[Vec<AppRun>]) {
    let leaders: Vec<(usize, &AppRun)> = runs
        .iter()
        .enumerate()
        .flat_map(|(i, p)| p.iter().filter(|r| r.role == "leader").map(move |r| (i, r)))
        .collect();
    let ns = |secs: f64| (secs * 1e9) as u64;
    let stretches: Vec<Stretch<usize, u64>> = leaders
        .iter()
        .map(|(pod, r)| Stretch {
            owner: *pod,
            start: ns(r.start),
            end: r.stop.map(ns),
        })
        .collect();
    if let Some(&(i, j)) = overlaps(&stretches).first() {
        let ((a_pod, a), (b_pod, b)) = (leaders[i], leaders[j]);
        panic!("two apps in leader mode at once: pod {a_pod} {a:?} and pod {b_pod} {b:?}");
    }
}

/// Field 22 of `/proc/PID/stat`: the start time in clock ticks since boot.
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields after it start at field 3 (state).
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(22 - 3)?
        .parse()
        .ok()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
