//! Shared by the Rust benchmark candidates (included with `#[path]`): the command line and
//! the leadership record the benchmark reads.
//!
//! `--flag-file` holds `{"mode":"leader"|"follower","holder":ID,"at_boottime_ns":N}` (written
//! atomically) and `<flag-file>.events` gets one line `MODE NS` per change, NS being
//! CLOCK_BOOTTIME nanoseconds taken when the change was seen.

use std::io::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Each crate has its own subset of these knobs (kube-lease-manager no retry period,
/// kube-leader-election no renew deadline), so some fields go unread in each program.
#[allow(dead_code)]
pub struct Args {
    pub namespace: String,
    pub lease_name: String,
    pub identity: String,
    pub flag_file: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Args {
    /// `--namespace NS --lease-name NAME --identity ID --flag-file PATH` and the timings in
    /// whole seconds (`--lease-duration 15 --renew-deadline 10 --retry-period 2`).
    pub fn parse() -> Args {
        let argv: Vec<String> = std::env::args().skip(1).collect();
        let get = |key: &str| {
            argv.iter()
                .position(|a| a == key)
                .and_then(|i| argv.get(i + 1))
                .cloned()
        };
        let required = |key: &str| {
            get(key).unwrap_or_else(|| {
                eprintln!("{key} is required");
                std::process::exit(2)
            })
        };
        let secs = |key: &str, default: u64| {
            Duration::from_secs(get(key).and_then(|v| v.parse().ok()).unwrap_or(default))
        };
        Args {
            namespace: required("--namespace"),
            lease_name: required("--lease-name"),
            identity: required("--identity"),
            flag_file: required("--flag-file"),
            lease_duration: secs("--lease-duration", 15),
            renew_deadline: secs("--renew-deadline", 10),
            retry_period: secs("--retry-period", 2),
        }
    }
}

pub fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub struct Recorder {
    flag_file: String,
    identity: String,
    mode: Mutex<&'static str>,
}

impl Recorder {
    pub fn new(args: &Args) -> Recorder {
        let r = Recorder {
            flag_file: args.flag_file.clone(),
            identity: args.identity.clone(),
            mode: Mutex::new(""),
        };
        r.set(false);
        r
    }

    /// Records a change of mode; repeating the current mode is a no-op.
    pub fn set(&self, leader: bool) {
        let at = boottime_ns();
        let mode = if leader { "leader" } else { "follower" };
        let mut current = self.mode.lock().unwrap_or_else(|e| e.into_inner());
        if *current == mode {
            return;
        }
        *current = mode;
        let body = format!(
            "{{\"mode\":\"{mode}\",\"holder\":\"{}\",\"at_boottime_ns\":{at}}}",
            self.identity
        );
        let tmp = format!("{}.tmp", self.flag_file);
        if std::fs::write(&tmp, body).is_ok() {
            let _ = std::fs::rename(&tmp, &self.flag_file);
        }
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(format!("{}.events", self.flag_file))
        {
            let _ = writeln!(f, "{mode} {at}");
        }
    }
}
