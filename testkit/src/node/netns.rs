//! The node's own network and mount namespaces: created per test binary, entered by every node
//! process before it execs, and reached from the test process through threads that join the
//! network namespace (sockets keep the namespace they were created in).
//!
//! Why a mount namespace too: containerd 1.6 and the kubelet write to fixed host paths that no
//! flag moves — shim sockets under /run/containerd/s, pod network namespaces under /run/netns,
//! /var/log/containers symlinks, the device-plugin directory under /var/lib/kubelet, libcni's
//! cache under /var/lib/cni — and they mount tmpfs, overlay and bind mounts. In a private mount
//! namespace with a tmpfs over each of those paths, all of it exists only there and disappears
//! with the namespace's last process; the host's mount table never changes.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::process;

/// Host paths that get a private tmpfs in the node's mount namespace (see the module doc).
const PRIVATE_PATHS: &[&str] = &[
    "/run/containerd",
    "/run/netns",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/var/lib/kubelet",
];

/// The file in the run's directory listing the mount points it created on the host.
pub const CREATED_MOUNT_POINTS: &str = "created-mount-points";

/// The node's namespaces. Dropping it does not remove them: [`Namespaces::remove`] does, once
/// every process inside is gone.
pub struct Namespaces {
    /// `ip netns` name, `pme-node-<test pid>`.
    pub name: String,
    net: OwnedFd,
    mnt: OwnedFd,
    holder: Mutex<Option<Child>>,
    /// Mount points this run had to create on the host (removed again, empty, at the end).
    created_dirs: Vec<PathBuf>,
    connector: Mutex<mpsc::Sender<ConnectJob>>,
}

type ConnectJob = (SocketAddr, Duration, mpsc::Sender<io::Result<TcpStream>>);

impl Namespaces {
    /// Creates the network namespace `name` with loopback up and a bridge `bridge` holding
    /// `node_cidr` (e.g. `10.88.0.1/24`: the node's address, the pods' gateway), and a mount
    /// namespace with the private paths, held open by a `sleep` process.
    pub fn create(name: &str, bridge: &str, node_cidr: &str, dir: &Path) -> Result<Self, String> {
        let mut created_dirs = Vec::new();
        if !Path::new("/run/netns").exists() {
            // `ip netns add` makes it; this run removes it again (when empty) at the end.
            created_dirs.push(PathBuf::from("/run/netns"));
        }
        run("ip", &["netns", "add", name])?;
        let ip = |args: &[&str]| {
            let mut all = vec!["-n", name];
            all.extend_from_slice(args);
            run("ip", &all)
        };
        ip(&["link", "set", "lo", "up"])?;
        ip(&["link", "add", bridge, "type", "bridge"])?;
        ip(&["addr", "add", node_cidr, "dev", bridge])?;
        ip(&["link", "set", bridge, "up"])?;
        let net: OwnedFd = File::open(format!("/run/netns/{name}"))
            .map_err(|e| format!("open /run/netns/{name}: {e}"))?
            .into();

        for path in PRIVATE_PATHS {
            let path = Path::new(path);
            if !path.exists() {
                std::fs::create_dir_all(path)
                    .map_err(|e| format!("mkdir {}: {e}", path.display()))?;
                created_dirs.push(path.to_owned());
            }
        }
        // Recorded so a later run can remove them if this one is killed before its cleanup.
        let list: String = created_dirs
            .iter()
            .map(|d| format!("{}\n", d.display()))
            .collect();
        std::fs::write(dir.join(CREATED_MOUNT_POINTS), list)
            .map_err(|e| format!("write {CREATED_MOUNT_POINTS}: {e}"))?;
        let ready = dir.join("mount-namespace.ready");
        let mut script = String::new();
        for path in PRIVATE_PATHS {
            script.push_str(&format!("mount -t tmpfs -o mode=0755 pme-node {path} && "));
        }
        script.push_str(&format!("touch {} && exec sleep infinity", ready.display()));
        let mut holder = Command::new("unshare");
        holder
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        enter_before_exec(&mut holder, net.as_raw_fd(), None, None, &[]);
        let holder = process::spawn_tracked(holder).map_err(|e| format!("spawn unshare: {e}"))?;
        let holder_pid = holder.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            if Instant::now() > deadline {
                return Err("the mount namespace holder did not get ready in 10s".into());
            }
            thread::sleep(Duration::from_millis(20));
        }
        let mnt: OwnedFd = File::open(format!("/proc/{holder_pid}/ns/mnt"))
            .map_err(|e| format!("open the holder's mount namespace: {e}"))?
            .into();
        let connector = spawn_connector(name, net.try_clone().map_err(|e| e.to_string())?)?;
        Ok(Namespaces {
            name: name.to_owned(),
            net,
            mnt,
            holder: Mutex::new(Some(holder)),
            created_dirs,
            connector: Mutex::new(connector),
        })
    }

    /// Makes `cmd` enter both namespaces (and the cgroup behind each of `cgroup_procs`) after
    /// the fork, then change to `cwd`.
    pub fn enter(&self, cmd: &mut Command, cwd: &Path, cgroup_procs: &[PathBuf]) {
        enter_before_exec(
            cmd,
            self.net.as_raw_fd(),
            Some(self.mnt.as_raw_fd()),
            Some(cwd),
            cgroup_procs,
        );
    }

    /// A TCP connection made from inside the network namespace.
    pub fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        let (reply, answer) = mpsc::channel();
        self.connector
            .lock()
            .map_err(|_| io::Error::other("connector lock poisoned"))?
            .send((addr, timeout, reply))
            .map_err(|_| io::Error::other("connector thread is gone"))?;
        answer
            .recv()
            .map_err(|_| io::Error::other("connector dropped the request"))?
    }

    /// Runs `f` on a new thread that has joined the network namespace: every socket it
    /// creates lives there (pod addresses, Service IPs).
    pub fn spawn_inside<T: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let fd = self.net.try_clone().expect("dup the netns fd");
        thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                join_net(&fd).expect("setns into the node's network namespace");
                drop(fd);
                f()
            })
            .expect("spawn a thread")
    }

    /// Forwards `127.0.0.1:<returned port>` on the host to `target` inside the namespace, for
    /// the life of the test process: how the test's kube clients reach the apiserver.
    pub fn forward(self: &std::sync::Arc<Self>, target: SocketAddr) -> Result<u16, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let ns = std::sync::Arc::clone(self);
        thread::Builder::new()
            .name("pme-node-forward".into())
            .spawn(move || {
                for outer in listener.incoming().flatten() {
                    let Ok(inner) = ns.connect(target, Duration::from_secs(5)) else {
                        continue; // the client sees the connection close, as if refused
                    };
                    pipe(outer, inner);
                }
            })
            .map_err(|e| format!("spawn forwarder: {e}"))?;
        Ok(port)
    }

    /// Ends the holder (call once every node process is gone), deletes the network
    /// namespace and removes the mount points this run created.
    pub fn remove(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(mut holder) = self.holder.lock().ok().and_then(|mut h| h.take()) {
            let _ = holder.kill();
            let _ = holder.wait();
            process::forget_at_exit(holder.id() as i32);
        }
        if let Err(e) = run("ip", &["netns", "delete", &self.name]) {
            problems.push(e);
        }
        for dir in self.created_dirs.iter().rev() {
            if let Err(e) = std::fs::remove_dir(dir) {
                problems.push(format!("rmdir {}: {e}", dir.display()));
            }
        }
        problems
    }
}

/// Deletes the network namespace of a test binary that died without cleaning up, and the
/// (empty) mount points it created on the host, listed in its directory `dir`.
pub fn remove_stale(name: &str, dir: Option<&Path>) {
    let _ = run("ip", &["netns", "delete", name]);
    if let Some(list) = dir.and_then(|d| std::fs::read_to_string(d.join(CREATED_MOUNT_POINTS)).ok())
    {
        for path in list.lines().rev() {
            let _ = std::fs::remove_dir(path);
        }
    }
}

/// Names of `ip netns` namespaces that start with `prefix`.
pub fn list(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

fn join_net(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: setns on a valid namespace fd; affects only the calling thread.
    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn spawn_connector(name: &str, fd: OwnedFd) -> Result<mpsc::Sender<ConnectJob>, String> {
    let (jobs, queue) = mpsc::channel::<ConnectJob>();
    thread::Builder::new()
        .name(format!("{name}-connect"))
        .spawn(move || {
            if let Err(e) = join_net(&fd) {
                for (_, _, reply) in queue.iter() {
                    let _ = reply.send(Err(io::Error::other(format!("setns: {e}"))));
                }
                return;
            }
            // Connects one at a time; each is bounded by its timeout, and the callers (API
            // clients, a probe loop) open few connections.
            for (addr, timeout, reply) in queue.iter() {
                let _ = reply.send(TcpStream::connect_timeout(&addr, timeout));
            }
        })
        .map_err(|e| format!("spawn connector: {e}"))?;
    Ok(jobs)
}

/// Copies bytes both ways until either side closes.
fn pipe(a: TcpStream, b: TcpStream) {
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let one_way = |mut from: TcpStream, mut to: TcpStream| {
        move || {
            let _ = io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Write);
            let _ = from.shutdown(std::net::Shutdown::Read);
        }
    };
    let _ = thread::Builder::new().spawn(one_way(a, b2));
    let _ = thread::Builder::new().spawn(one_way(b, a2));
}

/// After the fork: join the cgroups, the network namespace, the mount namespace, then `cwd`.
/// Everything the closure touches is prepared before the fork; it only makes syscalls.
fn enter_before_exec(
    cmd: &mut Command,
    net: i32,
    mnt: Option<i32>,
    cwd: Option<&Path>,
    cgroup_procs: &[PathBuf],
) {
    let cwd = cwd.map(|c| CString::new(c.as_os_str().as_encoded_bytes()).expect("cwd has NUL"));
    let procs: Vec<CString> = cgroup_procs
        .iter()
        .map(|p| CString::new(p.as_os_str().as_encoded_bytes()).expect("path has NUL"))
        .collect();
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // syscalls (open, write, close, setns, chdir) on memory allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for path in &procs {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // "0" moves the writing process (cgroup v1 and v2 alike).
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if n != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            if libc::setns(net, libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(mnt) = mnt {
                if libc::setns(mnt, libc::CLONE_NEWNS) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Joining a mount namespace resets the working directory to its root.
            if let Some(cwd) = &cwd {
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

pub(super) fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
