//! The stand-in app of the tests: a POSIX sh script, or the same app as a Node.js module, that
//! records its life — its start (its first act), its stop, each signal it gets — in files
//! beside it, and otherwise idles. The supervisor runs it as it runs Passmower; its mode comes
//! from `$MODE` (`--leader-env MODE=leader --follower-env MODE=follower`). What it records is
//! the ground truth the scenarios and the run oracle ([`crate::oracle::runs`]) judge by.
//!
//! Three files in its directory:
//! - `runs`: `start PID TICKS MODE WALL_NS` as its first act, and `stop PID TICKS MODE WALL_NS`
//!   just before it exits on its own (TICKS: its start time in `/proc/PID/stat`, which tells a
//!   recycled PID apart; WALL_NS: `date +%s%N`, since `/proc/uptime` has only 10 ms);
//! - `starts`: `PID mode=MODE args=ARGS` once its traps are in place (a test that saw it may
//!   signal the app);
//! - `signals`: `NAME PID UPTIME` for each TERM, HUP, USR1, USR2 and INT it gets.
//!
//! The sh app needs GNU `date` (`%N`). The Node app ([`Program::Node`]) is for the supervisor's
//! Node-only modes (`--leader-port-map`, `--leader-standby`); it records the same lines, its
//! WALL_NS from `Date.now()` (whole milliseconds, truncated, so records keep their order).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::clock::BootTime;

/// What the app does on SIGTERM (after recording it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnTerm {
    /// Writes its stop record and exits with this code.
    Exit(i32),
    /// Goes on running (the supervisor must SIGKILL it).
    Ignore,
    /// Like a real app, not instant to stop: one in four (by PID) ignores SIGTERM, the others
    /// finish "in-flight work" for 0–900 ms, then write the stop record and exit 0.
    Linger,
}

/// Which program the app is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Program {
    /// A POSIX sh script, `app.sh`, run as it is.
    #[default]
    Sh,
    /// A Node.js module, `app.mjs` beside a `package.json` (as an npm install lays an app out,
    /// with no dependencies), run as `node app.mjs`, as Passmower is.
    Node,
}

/// How the app is made.
#[derive(Clone, Debug)]
pub struct RecordingApp {
    /// Where the program and its records go.
    pub dir: PathBuf,
    pub program: Program,
    pub on_term: OnTerm,
    /// Whether it keeps `runs` (for the run oracle): then its start record is its very first
    /// act, before its traps. Without, nothing comes before its traps and its `starts` line, so
    /// a supervisor that switches it a moment after it started finds them in place.
    pub runs: bool,
    /// The app exits 1 this long (sh `sleep` syntax; the Node app reads a number of seconds)
    /// after starting in leader mode: an app that cannot run as leader.
    pub leader_crash_after: Option<String>,
    /// How long each idle sleep of the sh app lasts (sh `sleep` syntax). A trapped signal ends
    /// the wait at once either way; a long one forks less, for runs of minutes where PIDs are
    /// scarce. The Node app idles on a timer.
    pub idle: &'static str,
}

impl RecordingApp {
    /// An app in `dir` that keeps no `runs` and idles in short sleeps: for the scenarios that
    /// watch `starts` and `signals`.
    pub fn new(dir: &Path, on_term: OnTerm) -> RecordingApp {
        RecordingApp {
            dir: dir.to_owned(),
            program: Program::Sh,
            on_term,
            runs: false,
            leader_crash_after: None,
            idle: "0.05",
        }
    }

    /// Writes the program and returns the command that runs it: `[<dir>/app.sh]`, or
    /// `[node, <dir>/app.mjs]`.
    pub fn command(&self) -> Vec<String> {
        let path = self.write();
        let path = path.to_string_lossy().into_owned();
        match self.program {
            Program::Sh => vec![path],
            Program::Node => vec!["node".to_owned(), path],
        }
    }

    /// Writes the program (`<dir>/app.sh`, or `<dir>/app.mjs` and `<dir>/package.json`) and
    /// returns its path.
    pub fn write(&self) -> PathBuf {
        match self.program {
            Program::Sh => self.write_sh(),
            Program::Node => self.write_node(),
        }
    }

    fn write_sh(&self) -> PathBuf {
        let rec = self.dir.display();
        // With `runs`, every exit of its own is recorded (after TERM, INT, a leader crash);
        // without, the TERM it gets is (in `signals`).
        let (start, stop, term) = if self.runs {
            (
                "ticks=$(cut -d' ' -f22 /proc/$$/stat)\n\
                 run() { echo \"$1 $$ $ticks ${MODE:-unset} $(date +%s%N)\" >> \"$rec/runs\"; }\n\
                 run start\n",
                "run stop; ",
                "",
            )
        } else {
            ("", "", "sig TERM; ")
        };
        let on_term = match self.on_term {
            OnTerm::Exit(code) => format!("trap '{term}{stop}exit {code}' TERM"),
            OnTerm::Ignore => "trap 'sig TERM' TERM".to_owned(),
            OnTerm::Linger => format!(
                r#"on_term() {{
  [ $(($$ % 4)) -eq 0 ] && return
  sleep "0.$(($$ % 10))"
  {stop}kill $! 2>/dev/null
  exit 0
}}
trap on_term TERM"#
            ),
        };
        let crash = match &self.leader_crash_after {
            Some(after) => {
                format!(r#"if [ "$MODE" = leader ]; then sleep {after}; {stop}exit 1; fi"#)
            }
            None => String::new(),
        };
        let script = format!(
            r#"#!/bin/sh
rec='{rec}'
{start}sig() {{ echo "$1 $$ $(cut -d' ' -f1 /proc/uptime)" >> "$rec/signals"; }}
{on_term}
trap 'sig HUP' HUP
trap 'sig USR1' USR1
trap 'sig USR2' USR2
trap 'sig INT; {stop}exit 130' INT
{crash}
# Recorded once the traps are in place, so a test that saw the start may signal the app.
echo "$$ mode=$MODE args=$*" >> "$rec/starts"
# `wait` returns when a trapped signal arrives; a foreground sleep would delay the trap.
while :; do sleep {idle} & wait $!; done
"#,
            idle = self.idle,
        );
        let path = self.dir.join("app.sh");
        fs::write(&path, script).expect("write the recording app");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
            .expect("chmod the recording app");
        path
    }

    /// The sh app's twin in Node.js. Node runs a signal's listener from its event loop, which
    /// turns only after the module's top level has run: the listeners are in place before the
    /// start record, and none can run before it.
    fn write_node(&self) -> PathBuf {
        let rec = serde_json::to_string(&self.dir.to_string_lossy()).expect("a JSON string");
        let (stop, term) = if self.runs {
            ("run('stop'); ", "")
        } else {
            ("", "sig('TERM'); ")
        };
        let on_term = match self.on_term {
            OnTerm::Exit(code) => format!("() => {{ {term}{stop}process.exit({code}); }}"),
            OnTerm::Ignore => "() => sig('TERM')".to_owned(),
            OnTerm::Linger => format!(
                "() => {{\n  if (process.pid % 4 === 0) return;\n  \
                 setTimeout(() => {{ {stop}process.exit(0); }}, (process.pid % 10) * 100);\n}}"
            ),
        };
        let crash_after = match &self.leader_crash_after {
            Some(after) => serde_json::to_string(after).expect("a JSON string"),
            None => "null".to_owned(),
        };
        let start = if self.runs { "run('start');" } else { "" };
        let script = format!(
            r#"import fs from 'node:fs';
const rec = {rec};
const mode = process.env.MODE ?? 'unset';
const stat = fs.readFileSync('/proc/self/stat', 'utf8');
const ticks = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
const run = (what) =>
  fs.appendFileSync(`${{rec}}/runs`, `${{what}} ${{process.pid}} ${{ticks}} ${{mode}} ${{BigInt(Date.now()) * 1000000n}}\n`);
const sig = (name) =>
  fs.appendFileSync(`${{rec}}/signals`, `${{name}} ${{process.pid}} ${{fs.readFileSync('/proc/uptime', 'utf8').split(' ')[0]}}\n`);
process.on('SIGTERM', {on_term});
process.on('SIGHUP', () => sig('HUP'));
process.on('SIGUSR1', () => sig('USR1'));
process.on('SIGUSR2', () => sig('USR2'));
process.on('SIGINT', () => {{ sig('INT'); {stop}process.exit(130); }});
{start}
const crashAfter = {crash_after};
if (mode === 'leader' && crashAfter !== null) {{
  setTimeout(() => {{ {stop}process.exit(1); }}, parseFloat(crashAfter) * 1000);
}} else {{
  // Recorded once the listeners are in place, so a test that saw the start may signal the app.
  fs.appendFileSync(`${{rec}}/starts`, `${{process.pid}} mode=${{process.env.MODE ?? ''}} args=${{process.argv.slice(2).join(' ')}}\n`);
}}
setInterval(() => {{}}, 1 << 30);
"#
        );
        fs::write(
            self.dir.join("package.json"),
            r#"{"name":"recording-app","type":"module"}"#,
        )
        .expect("write the recording app's package.json");
        let path = self.dir.join("app.mjs");
        fs::write(&path, script).expect("write the recording app");
        path
    }

    /// The `runs` file of the app in `dir`.
    pub fn runs_file(dir: &Path) -> PathBuf {
        dir.join("runs")
    }
}

/// One line of `runs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRecord {
    pub stop: bool,
    pub pid: i32,
    pub ticks: u64,
    pub mode: String,
    /// The wall-clock stamp, as CLOCK_BOOTTIME.
    pub at: BootTime,
}

/// Parses the `runs` lines in `text` (clock offset taken once, for all of them); the lines
/// that are not records come back as errors.
pub fn parse_runs(text: &str) -> Vec<Result<RunRecord, String>> {
    let offset = BootTime::wall_offset();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| parse_run(line, offset).ok_or_else(|| line.to_owned()))
        .collect()
}

/// One `runs` line, with the wall-clock stamp moved to CLOCK_BOOTTIME by `offset` (see
/// [`BootTime::wall_offset`]).
pub fn parse_run(line: &str, offset: u64) -> Option<RunRecord> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [what, pid, ticks, mode, wall_ns] = fields.as_slice() else {
        return None;
    };
    let stop = match *what {
        "start" => false,
        "stop" => true,
        _ => return None,
    };
    Some(RunRecord {
        stop,
        pid: pid.parse().ok()?,
        ticks: ticks.parse().ok()?,
        mode: (*mode).to_owned(),
        at: BootTime::from_nanos(wall_ns.parse::<u64>().ok()?.saturating_sub(offset)),
    })
}

/// `(pid, mode)` of each line of a `starts` file's `lines`.
pub fn starts(lines: &[String]) -> Vec<(i32, String)> {
    lines
        .iter()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let pid = it.next()?.parse().ok()?;
            let mode = it.next()?.strip_prefix("mode=")?.to_owned();
            Some((pid, mode))
        })
        .collect()
}
