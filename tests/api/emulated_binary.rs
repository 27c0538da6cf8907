//! Another architecture's build of the product (the arm64 release binary, under qemu-user on
//! an amd64 machine) as two whole pods against the real kube-apiserver: each pod's `elect`
//! and `supervise` are that build, given as `PME_ELECTOR_BINARY` and `PME_ELECTOR_RUNNER`
//! (scripts/check-arm64.sh builds the one and prints the other; .ci/run runs this file with
//! them). Skipped when no such build is given, a failure under CI.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use nix::sys::signal::Signal;
use pme_testkit::elector::Product;
use pme_testkit::pods::{assert_leader_runs_disjoint, wait_for_leading_pod, Pod, PodSpec};
use pme_testkit::{have_or_skip, Cluster, TestNs};

use crate::product::ElectorNamespaces;

/// An emulated process runs many times slower than a native one: the waits are generous, the
/// election timings are the defaults' proportions, shortened (R + K + 1s < D holds).
const TIMINGS: [&str; 8] = [
    "--lease-duration",
    "8s",
    "--renew-deadline",
    "4s",
    "--retry-period",
    "500ms",
    "--kill-grace",
    "1s",
];
const WAIT: Duration = Duration::from_secs(90);

/// The ELF machine of `path`: the architecture the binary was built for.
fn elf_machine(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("read the binary");
    assert_eq!(
        bytes.get(..4),
        Some(&b"\x7fELF"[..]),
        "{} is not ELF",
        path.display()
    );
    match bytes.get(18..20).map(|m| u16::from_le_bytes([m[0], m[1]])) {
        Some(0x3e) => "x86-64".into(),
        Some(0xb7) => "AArch64".into(),
        other => format!("{other:?}"),
    }
}

/// The executable behind process `pid` (for an emulated process: the emulator).
fn exe_of(pid: i32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/exe")).expect("read /proc/PID/exe")
}

fn parent_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    let rest = stat.rsplit_once(')').expect("stat format").1;
    rest.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("ppid in /proc/PID/stat")
}

async fn holder(ns: &TestNs) -> String {
    let leases: Api<Lease> = Api::namespaced(Cluster::shared().admin_client().await, &ns.name);
    leases
        .get(&ns.lease_name)
        .await
        .expect("read the Lease")
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

/// Two pods of the emulated build: one takes the Lease and runs its app as leader; SIGTERM of
/// its elector hands the Lease over (released, not expired) to the other pod, whose app then
/// runs as leader; at no instant do both apps run as leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulated_pods_take_the_lease_and_hand_it_over_on_sigterm() {
    let product = Product::from_env();
    if !have_or_skip(
        product.is_some(),
        "PME_ELECTOR_BINARY names no build of the product (scripts/check-arm64.sh prints the \
         arm64 one and its runner, PME_ELECTOR_RUNNER)",
    ) {
        return;
    }
    let product = product.expect("checked");
    let binary = std::env::var_os("PME_ELECTOR_BINARY")
        .map(PathBuf::from)
        .expect("checked");
    eprintln!(
        "product: {} ({}) run as {} {:?}",
        binary.display(),
        elf_machine(&binary),
        product.program.display(),
        product.args
    );
    let ns = Cluster::shared().new_namespace().await;
    let spec = PodSpec {
        product: Some(product.clone()),
        timings: TIMINGS.iter().map(|s| s.to_string()).collect(),
        ..PodSpec::default()
    };
    let mut pods = vec![
        Pod::start_spec("pod-a", &ns, spec.clone()),
        Pod::start_spec("pod-b", &ns, spec),
    ];

    let first = wait_for_leading_pod(&pods, WAIT, None);
    let app = pods[first].leading_app().expect("a leading app");
    // The processes are the emulated build: the elector and the app's supervisor run as the
    // given program (the emulator, when there is a runner).
    let want = std::fs::canonicalize(which(&product.program)).expect("the product's program");
    let elector_pid = pods[first].elector().pid().as_raw();
    assert_eq!(
        exe_of(elector_pid),
        want,
        "the elector is not the given product"
    );
    assert_eq!(
        exe_of(parent_of(app.pid)),
        want,
        "the supervisor is not the given product"
    );
    let first_holder = holder(&ns).await;
    assert!(
        first_holder.starts_with(&format!("{}_", pods[first].name)),
        "Lease holder {first_holder:?}, leading app in {}",
        pods[first].name
    );

    pods[first].signal_elector(Signal::SIGTERM);
    let next = wait_for_leading_pod(&pods, WAIT, Some(first));
    let status = pods[first]
        .elector()
        .wait_exit(Duration::from_secs(30))
        .expect("the old leader's elector exits");
    assert!(status.success(), "graceful exit: {status:?}");
    let logs = pods[first].elector_logs();
    assert!(logs.contains("released the Lease"), "{logs}");
    let next_holder = holder(&ns).await;
    assert!(
        next_holder.starts_with(&format!("{}_", pods[next].name)),
        "Lease holder {next_holder:?} after the handover, leading app in {}",
        pods[next].name
    );
    assert!(
        pods[first].leading_app().is_none(),
        "the old leader's app still runs as leader"
    );
    assert_leader_runs_disjoint(&pods);
    for pod in &mut pods {
        pod.shut_down();
    }
}

/// `program` as exec finds it: itself when it has a slash, else its first match on `PATH`.
fn which(program: &Path) -> PathBuf {
    if program.components().count() > 1 {
        return program.to_owned();
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{} is not on PATH", program.display()))
}
