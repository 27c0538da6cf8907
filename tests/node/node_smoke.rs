//! The one-node cluster itself: a pod gets its own address and reaches the apiserver through
//! the `kubernetes` Service (kube-proxy), and the node leaves nothing behind on the host.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

use pme_testkit::node::{config, pods, Node};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_gets_its_own_address() {
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    eprintln!("node started in {:?}", node.started_in);
    let ns = node.new_namespace("smoke").await;
    let client = node.admin_client().await;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pause"},
        "spec": {"containers": [{
            "name": "pause", "image": node.images.pause_ref, "imagePullPolicy": "Never"
        }]}
    }))
    .unwrap();
    let api = Api::<Pod>::namespaced(client, &ns);
    api.create(&PostParams::default(), &pod).await.unwrap();
    let ready = pme_testkit::wait_until_async(
        Duration::from_secs(90),
        Duration::from_millis(250),
        || async {
            api.get("pause")
                .await
                .map(|p| pods::is_ready(&p))
                .unwrap_or(false)
        },
    )
    .await;
    let pod = api.get("pause").await.unwrap();
    assert!(
        ready,
        "pod not Ready: {:?}\n{}",
        pod.status,
        node.logs_tail(30)
    );
    let ip = pods::pod_ip(&pod).unwrap();
    assert!(
        ip.starts_with("10.88.0."),
        "pod IP {ip} not in {}",
        config::POD_CIDR
    );
    assert_ne!(ip, config::NODE_IP);
    assert!(
        !node.pod_pids(&pod).is_empty(),
        "no processes in the pod's cgroup"
    );
}

/// A pod reaches the apiserver as in-cluster clients do: `KUBERNETES_SERVICE_HOST` (the
/// `kubernetes` Service's ClusterIP) through kube-proxy's rules, verifying the apiserver's
/// certificate with the `kube-root-ca.crt` the controller-manager published, authenticated by
/// its projected ServiceAccount token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_reaches_the_api_through_the_kubernetes_service() {
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let ns = node.new_namespace("smoke-api").await;
    let image = node.passmower_image();
    let script = r#"
const fs = require('fs'), https = require('https');
const sa = '/var/run/secrets/kubernetes.io/serviceaccount/';
https.get({
  host: process.env.KUBERNETES_SERVICE_HOST, port: process.env.KUBERNETES_SERVICE_PORT,
  path: '/api/v1/namespaces/' + fs.readFileSync(sa + 'namespace') + '/serviceaccounts/default',
  ca: fs.readFileSync(sa + 'ca.crt'),
  headers: {authorization: 'Bearer ' + fs.readFileSync(sa + 'token')},
}, r => { console.log('status', r.statusCode); process.exit(r.statusCode === 403 ? 0 : 1); })
  .on('error', e => { console.error(e); process.exit(2); });
"#;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "in-cluster"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "client", "image": image, "imagePullPolicy": "Never",
            "command": ["node", "-e", script]
        }]}
    }))
    .unwrap();
    let api = Api::<Pod>::namespaced(node.admin_client().await, &ns);
    api.create(&PostParams::default(), &pod).await.unwrap();
    let done = pme_testkit::wait_until_async(
        Duration::from_secs(90),
        Duration::from_millis(250),
        || async {
            api.get("in-cluster")
                .await
                .ok()
                .and_then(|p| p.status?.phase)
                .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
        },
    )
    .await;
    let pod = api.get("in-cluster").await.unwrap();
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
    // 403: the request reached the apiserver over verified TLS and was authenticated as the
    // pod's ServiceAccount, which has no RBAC to read ServiceAccounts.
    assert!(
        done && phase.as_deref() == Some("Succeeded"),
        "the pod did not get a 403 from the apiserver through the Service: {phase:?}\n{:?}\n{}",
        pod.status,
        node.logs_tail(20)
    );
}

/// Everything the node mounts stays in its own mount namespace: while pods run, the host's
/// mount table has nothing under the run's directory or the paths containerd and the kubelet
/// hard-code, and no network namespace of the node's pods is visible on the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_mount_table_is_untouched() {
    let node_use = Node::of_group(module_path!()).await;
    let node = node_use.node();
    let ns = node.new_namespace("smoke-mounts").await;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pause"},
        "spec": {"containers": [{
            "name": "pause", "image": node.images.pause_ref, "imagePullPolicy": "Never"
        }]}
    }))
    .unwrap();
    let api = Api::<Pod>::namespaced(node.admin_client().await, &ns);
    api.create(&PostParams::default(), &pod).await.unwrap();
    let ready = pme_testkit::wait_until_async(
        Duration::from_secs(90),
        Duration::from_millis(250),
        || async {
            api.get("pause")
                .await
                .map(|p| pods::is_ready(&p))
                .unwrap_or(false)
        },
    )
    .await;
    assert!(ready, "pod not Ready");
    let dir = node.layout.dir.display().to_string();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let leaked: Vec<&str> = mountinfo
        .lines()
        .filter(|l| {
            let mount_point = l.split_whitespace().nth(4).unwrap_or_default();
            mount_point.starts_with(&dir)
                || [
                    "/run/containerd",
                    "/var/lib/kubelet",
                    "/var/log/pods",
                    "/var/lib/cni",
                ]
                .iter()
                .any(|p| mount_point.starts_with(p))
                // A node's own netns is bound there by `ip netns`, so is another test
                // binary's node running at the same time; anything else leaked from inside.
                || mount_point
                    .strip_prefix("/run/netns/")
                    .is_some_and(|name| !name.starts_with(pme_testkit::node::PREFIX))
        })
        .collect();
    assert!(leaked.is_empty(), "mounts visible on the host: {leaked:#?}");
    // The containers' processes are in the node's cgroup subtree, not the host's.
    let pod = api.get("pause").await.unwrap();
    for pid in node.pod_pids(&pod) {
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        assert!(
            cgroup
                .lines()
                .filter(|l| l.contains(":memory:"))
                .all(|l| l.contains(&node.cgroups.name)),
            "pid {pid} outside the node's cgroups: {cgroup}"
        );
    }
}
