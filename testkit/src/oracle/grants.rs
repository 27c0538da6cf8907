//! The safety oracle: records, from the pods' flag files, when each pod held a leader grant,
//! and fails a test if two pods' grants (plus the consumer's kill grace) ever overlapped.
//!
//! Every bound is taken on the side that makes an overlap *more* likely to be reported:
//! - a grant starts at the recorder's previous look at that pod's file (the object was written
//!   after that look), not when it was first seen;
//! - it ends at the first look that shows a follower object or another grant, or at the
//!   grant's own `expires_boottime_ns`, whichever is first — then `kill_grace` is added, the
//!   time the consumer may still run after a demotion;
//! - a missing file ends nothing: the consumer may still obey the last grant until it expires.
//!
//! The recorder and the electors read the same CLOCK_BOOTTIME, so expiries compare directly.
//! The kit does not read the product's grant files itself: the test passes a reader (the
//! product's own, see `tests/product`) that turns a file into a [`Seen`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::BootTime;
use crate::oracle::{overlaps, Stretch};

/// How often the recorder reads every flag file.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(5);
/// A recorder stops by itself after this long, so a leaked one cannot spin forever.
const MAX_RECORDING: Duration = Duration::from_secs(3600);

/// One stretch during which one pod held one grant (`incarnation`, `epoch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantInterval {
    pub pod: String,
    pub holder: String,
    pub incarnation: u64,
    pub epoch: u64,
    /// No later than the moment the grant object appeared.
    pub start: BootTime,
    /// No earlier than the moment the grant stopped being in force.
    pub end: BootTime,
    /// The consumer may run until here: `end` + kill grace.
    pub consumer_end: BootTime,
    /// Still held when this snapshot was taken (`end` is the current expiry).
    pub open: bool,
}

/// What the oracle needs of one grant object: whether it grants leadership, to whom, which
/// elector incarnation and epoch wrote it, and when it lapses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantView {
    pub leader: bool,
    pub holder: String,
    pub incarnation: u64,
    pub epoch: u64,
    /// `expires_boottime_ns` (0 for a follower).
    pub expiry: BootTime,
}

/// Reads one flag file as the product does: `Ok(None)` when there is none.
pub type ReadGrant = fn(&std::path::Path) -> Result<Option<GrantView>, String>;

/// What the recorder saw at one look at a pod's flag file.
#[derive(Clone, Debug)]
pub enum Seen {
    /// No file (yet).
    Missing,
    Object(GrantView),
    /// The file exists but is not a grant object: a protocol violation, reported as such.
    Unreadable(String),
}

#[derive(Debug)]
struct OpenGrant {
    holder: String,
    incarnation: u64,
    epoch: u64,
    start: BootTime,
    expiry: BootTime,
}

#[derive(Debug, Default)]
struct PodTrack {
    last_look: Option<BootTime>,
    open: Option<OpenGrant>,
}

/// The pure interval logic, fed with timestamped looks; [`GrantRecorder`] drives it from files.
#[derive(Debug)]
pub struct GrantTimeline {
    kill_grace: Duration,
    pods: BTreeMap<String, PodTrack>,
    closed: Vec<GrantInterval>,
    anomalies: Vec<String>,
}

impl GrantTimeline {
    pub fn new(kill_grace: Duration) -> Self {
        GrantTimeline {
            kill_grace,
            pods: BTreeMap::new(),
            closed: Vec::new(),
            anomalies: Vec::new(),
        }
    }

    /// Records that `pod`'s flag file showed `seen` at `at`. Looks at one pod must come in
    /// time order.
    pub fn observe(&mut self, pod: &str, at: BootTime, seen: &Seen) {
        self.observe_read(pod, at, at, seen)
    }

    /// As [`Self::observe`] for a read that began at `began` and returned at `at`: a new grant
    /// starts no later than the previous read's `began`, an end is stamped with `at`.
    pub fn observe_read(&mut self, pod: &str, began: BootTime, at: BootTime, seen: &Seen) {
        let grace = self.kill_grace;
        let track = self.pods.entry(pod.to_owned()).or_default();
        let previous_look = track.last_look.replace(began).unwrap_or(began);
        let close = |open: OpenGrant, end: BootTime| GrantInterval {
            pod: pod.to_owned(),
            holder: open.holder,
            incarnation: open.incarnation,
            epoch: open.epoch,
            start: open.start,
            end,
            consumer_end: end.saturating_add(grace),
            open: false,
        };
        let mut closed = Vec::new();
        // A grant nobody renewed in time has lapsed at its expiry, whatever comes next.
        if track.open.as_ref().is_some_and(|o| o.expiry <= at) {
            let o = track.open.take().expect("checked above");
            let expiry = o.expiry;
            closed.push(close(o, expiry));
        }
        match seen {
            Seen::Object(g) if g.leader && g.expiry > at => {
                let same = track
                    .open
                    .as_ref()
                    .is_some_and(|o| (o.incarnation, o.epoch) == (g.incarnation, g.epoch));
                if same {
                    let o = track.open.as_mut().expect("checked above");
                    // A consumer that has not read the newer object yet obeys the older one.
                    o.expiry = o.expiry.max(g.expiry);
                } else {
                    if let Some(o) = track.open.take() {
                        closed.push(close(o, at));
                    }
                    track.open = Some(OpenGrant {
                        holder: g.holder.clone(),
                        incarnation: g.incarnation,
                        epoch: g.epoch,
                        start: previous_look,
                        expiry: g.expiry,
                    });
                }
            }
            Seen::Object(_) => {
                if let Some(o) = track.open.take() {
                    let end = at.min(o.expiry);
                    closed.push(close(o, end));
                }
            }
            Seen::Missing => {}
            Seen::Unreadable(why) => {
                // The same garbage is seen on every look; report it once.
                let anomaly = format!("{pod}: {why}");
                if !self.anomalies.contains(&anomaly) {
                    self.anomalies.push(anomaly);
                }
            }
        }
        self.closed.extend(closed);
    }

    /// Every interval so far; grants still held end at their current expiry.
    pub fn intervals(&self) -> Vec<GrantInterval> {
        let mut all = self.closed.clone();
        for (pod, track) in &self.pods {
            if let Some(o) = &track.open {
                all.push(GrantInterval {
                    pod: pod.clone(),
                    holder: o.holder.clone(),
                    incarnation: o.incarnation,
                    epoch: o.epoch,
                    start: o.start,
                    end: o.expiry,
                    consumer_end: o.expiry.saturating_add(self.kill_grace),
                    open: true,
                });
            }
        }
        all.sort_by_key(|i| (i.start, i.pod.clone()));
        all
    }

    /// Pods holding a grant that has not expired at `now`.
    pub fn leaders_at(&self, now: BootTime) -> Vec<String> {
        self.pods
            .iter()
            .filter(|(_, t)| t.open.as_ref().is_some_and(|o| o.expiry > now))
            .map(|(pod, _)| pod.clone())
            .collect()
    }

    /// Pairs of intervals of different pods that overlap (including kill grace).
    pub fn overlaps(&self) -> Vec<(GrantInterval, GrantInterval)> {
        let all = self.intervals();
        let stretches: Vec<Stretch<&str, BootTime>> = all
            .iter()
            .map(|i| Stretch {
                owner: i.pod.as_str(),
                start: i.start,
                end: Some(i.consumer_end),
            })
            .collect();
        overlaps(&stretches)
            .into_iter()
            .map(|(i, j)| (all[i].clone(), all[j].clone()))
            .collect()
    }

    pub fn anomalies(&self) -> &[String] {
        &self.anomalies
    }

    /// Panics with a readable timeline if two pods' grants overlapped or a flag file was
    /// unreadable.
    pub fn assert_no_overlap(&self) {
        let overlaps = self.overlaps();
        if overlaps.is_empty() && self.anomalies.is_empty() {
            return;
        }
        let all = self.intervals();
        let origin = all.first().map(|i| i.start).unwrap_or_default();
        let ms = |t: BootTime| t.saturating_since(origin).as_secs_f64() * 1000.0;
        let describe = |i: &GrantInterval| {
            format!(
                "{} (holder {}, incarnation {}, epoch {}): {:.1}ms .. {:.1}ms, consumer until {:.1}ms{}",
                i.pod,
                i.holder,
                i.incarnation,
                i.epoch,
                ms(i.start),
                ms(i.end),
                ms(i.consumer_end),
                if i.open { " (still held)" } else { "" }
            )
        };
        let mut msg = String::new();
        for (a, b) in &overlaps {
            let _ = writeln!(
                msg,
                "TWO LEADERS for {:.1}ms:\n  {}\n  {}",
                (a.consumer_end
                    .min(b.consumer_end)
                    .saturating_since(a.start.max(b.start)))
                .as_secs_f64()
                    * 1000.0,
                describe(a),
                describe(b)
            );
        }
        for anomaly in &self.anomalies {
            let _ = writeln!(msg, "unreadable flag file: {anomaly}");
        }
        let _ = writeln!(msg, "all grants (times from the first grant's start):");
        for i in &all {
            let _ = writeln!(msg, "  {}", describe(i));
        }
        panic!("{msg}");
    }
}

struct Shared {
    timeline: Mutex<GrantTimeline>,
    files: Mutex<Vec<(String, PathBuf)>>,
    read: ReadGrant,
    stop: AtomicBool,
}

/// Watches flag files (one per pod) on a background thread every [`SAMPLE_EVERY`] and keeps a
/// [`GrantTimeline`]. Start it before the electors, so no grant predates the first look.
#[must_use = "the recorder stops when dropped"]
pub struct GrantRecorder {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GrantRecorder {
    /// Records `files` (pod name, flag-file path), each read with `read`; more can be added
    /// with [`Self::watch`].
    pub fn start(
        kill_grace: Duration,
        files: impl IntoIterator<Item = (String, PathBuf)>,
        read: ReadGrant,
    ) -> GrantRecorder {
        let shared = Arc::new(Shared {
            timeline: Mutex::new(GrantTimeline::new(kill_grace)),
            files: Mutex::new(files.into_iter().collect()),
            read,
            stop: AtomicBool::new(false),
        });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("pme-grant-recorder".into())
            .spawn(move || record(&worker))
            .expect("spawn grant recorder");
        GrantRecorder {
            shared,
            thread: Some(thread),
        }
    }

    /// Adds a pod's flag file to the set being watched.
    pub fn watch(&self, pod: &str, flag_file: PathBuf) {
        lock(&self.shared.files).push((pod.to_owned(), flag_file));
    }

    pub fn intervals(&self) -> Vec<GrantInterval> {
        lock(&self.shared.timeline).intervals()
    }

    /// Pods holding an unexpired grant now.
    pub fn leaders(&self) -> Vec<String> {
        lock(&self.shared.timeline).leaders_at(BootTime::now())
    }

    pub fn assert_no_overlap(&self) {
        lock(&self.shared.timeline).assert_no_overlap()
    }

    /// Stops looking (idempotent); the intervals stay available.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for GrantRecorder {
    fn drop(&mut self) {
        self.stop();
    }
}

fn record(shared: &Shared) {
    let started = Instant::now();
    while !shared.stop.load(Ordering::SeqCst) && started.elapsed() < MAX_RECORDING {
        let files = lock(&shared.files).clone();
        for (pod, path) in &files {
            let began = BootTime::now();
            let seen = match (shared.read)(path) {
                Ok(None) => Seen::Missing,
                Ok(Some(g)) => Seen::Object(g),
                Err(e) => Seen::Unreadable(e),
            };
            let at = BootTime::now();
            lock(&shared.timeline).observe_read(pod, began, at, &seen);
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
}

/// A panicking test thread must not hide the recording from the report that follows.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
