//! The node's own cgroup subtree, `/pme-node-<pid>` in every mounted hierarchy: the kubelet's
//! cgroup root (pods go under `kubepods`) and, under `node`, every node process — containerd
//! and therefore its shims too, which daemonize away from their parent. Cleanup is exact: kill
//! what is in the subtree, remove the subtree; the host's other cgroups are never touched.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// One subtree, `/<name>`, in each cgroup hierarchy mounted on the host.
pub struct CgroupTree {
    pub name: String,
    /// The subtree's root in every hierarchy.
    roots: Vec<PathBuf>,
}

impl CgroupTree {
    /// Creates `/<name>` and `/<name>/node` in every hierarchy (cgroup v1 controllers and the
    /// v2 one of a hybrid host).
    pub fn create(name: &str) -> Result<CgroupTree, String> {
        let mut roots = Vec::new();
        for mount in hierarchies() {
            let root = mount.join(name);
            for dir in [root.clone(), root.join("node")] {
                match fs::create_dir(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(format!("mkdir {}: {e}", dir.display())),
                }
                // cgroup v1 cpuset: a new cgroup has no CPUs or memory nodes until given some,
                // and no process may join it before.
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let parent = dir.parent().map(|p| p.join(file));
                    if let Some(parent) = parent.filter(|p| p.exists()) {
                        let value = fs::read_to_string(&parent).unwrap_or_default();
                        fs::write(dir.join(file), value.trim())
                            .map_err(|e| format!("write {}/{file}: {e}", dir.display()))?;
                    }
                }
            }
            roots.push(root);
        }
        if roots.is_empty() {
            return Err("no cgroup hierarchy is mounted".into());
        }
        Ok(CgroupTree {
            name: name.to_owned(),
            roots,
        })
    }

    /// The tree of a run that died, for [`CgroupTree::destroy`].
    pub fn existing(name: &str) -> CgroupTree {
        let roots = hierarchies()
            .into_iter()
            .map(|m| m.join(name))
            .filter(|r| r.is_dir())
            .collect();
        CgroupTree {
            name: name.to_owned(),
            roots,
        }
    }

    /// Names of top-level cgroups starting with `prefix` in any hierarchy.
    pub fn list(prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = hierarchies()
            .into_iter()
            .filter_map(|m| fs::read_dir(m).ok())
            .flat_map(|entries| entries.flatten())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with(prefix))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The `cgroup.procs` files a node process writes itself into (one per hierarchy).
    pub fn node_procs(&self) -> Vec<PathBuf> {
        self.roots
            .iter()
            .map(|r| r.join("node/cgroup.procs"))
            .collect()
    }

    /// The kubelet's `cgroupRoot`.
    pub fn kubelet_root(&self) -> String {
        format!("/{}", self.name)
    }

    /// Every process in the subtree (any hierarchy), or below `sub` when given.
    pub fn pids(&self, sub: Option<&str>) -> Vec<i32> {
        let mut pids = Vec::new();
        for root in &self.roots {
            let start = match sub {
                Some(s) => root.join(s),
                None => root.clone(),
            };
            collect_pids(&start, &mut pids);
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Processes of the cgroup directory named `leaf` (a pod's `pod<uid>` or a container ID)
    /// wherever it is below the subtree, found in the first hierarchy that has it.
    pub fn pids_of(&self, leaf: &str) -> Vec<i32> {
        for root in &self.roots {
            if let Some(dir) = find_dir(root, leaf, 6) {
                let mut pids = Vec::new();
                collect_pids(&dir, &mut pids);
                pids.sort_unstable();
                pids.dedup();
                return pids;
            }
        }
        Vec::new()
    }

    /// SIGKILLs everything in the subtree (below `sub` when given) until nothing is left or
    /// `timeout` passes; returns what is still there.
    pub fn kill_all(&self, sub: Option<&str>, timeout: Duration) -> Vec<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            let pids = self.pids(sub);
            if pids.is_empty() || Instant::now() > deadline {
                return pids;
            }
            for pid in &pids {
                // A frozen or stopped process dies of SIGKILL too; SIGCONT only helps the
                // ones that were sent SIGSTOP and would otherwise linger in a queue.
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
                let _ = kill(Pid::from_raw(*pid), Signal::SIGCONT);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Removes the subtree, deepest first (every cgroup must be empty: call after
    /// [`CgroupTree::kill_all`]). Returns the directories that could not be removed.
    pub fn remove(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for root in &self.roots {
            let mut dirs = Vec::new();
            collect_dirs(root, &mut dirs);
            // Children were pushed after parents: reverse removes leaves first.
            for dir in dirs.iter().rev() {
                let mut removed = false;
                for _ in 0..50 {
                    match fs::remove_dir(dir) {
                        Ok(()) => {
                            removed = true;
                            break;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            removed = true;
                            break;
                        }
                        // EBUSY while the kernel finishes tearing down an exited task.
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
                if !removed {
                    problems.push(format!("rmdir {}", dir.display()));
                }
            }
        }
        problems
    }

    /// Kills everything, then removes the subtree.
    pub fn destroy(&self) -> Vec<String> {
        let left = self.kill_all(None, Duration::from_secs(20));
        let mut problems = Vec::new();
        if !left.is_empty() {
            problems.push(format!("processes survived SIGKILL: {left:?}"));
        }
        problems.extend(self.remove());
        problems
    }
}

/// Mount points of every cgroup hierarchy (v1 controllers and v2), from /proc/self/mountinfo.
fn hierarchies() -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts = Vec::new();
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fstype = right.split_whitespace().next().unwrap_or_default();
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        if let Some(mount_point) = left.split_whitespace().nth(4) {
            mounts.push(PathBuf::from(mount_point));
        }
    }
    mounts.sort();
    mounts.dedup();
    mounts
}

fn collect_pids(dir: &Path, pids: &mut Vec<i32>) {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_pids(&e.path(), pids);
            }
        }
    }
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    if !dir.is_dir() {
        return;
    }
    out.push(dir.to_owned());
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

fn find_dir(dir: &Path, leaf: &str, depth: usize) -> Option<PathBuf> {
    let entries = fs::read_dir(dir).ok()?;
    let mut subdirs = Vec::new();
    for e in entries.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if e.file_name().to_str() == Some(leaf) {
            return Some(e.path());
        }
        subdirs.push(e.path());
    }
    if depth == 0 {
        return None;
    }
    subdirs.iter().find_map(|d| find_dir(d, leaf, depth - 1))
}
