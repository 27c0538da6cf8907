//! The one-node cluster itself: a pod gets its own address and reaches the apiserver through
//! the `kubernetes` Service (kube-proxy), and the node leaves nothing behind on the host.

mod support;
mod support_node;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

use support_node::{config, pods, Node};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_gets_its_own_address() {
    let node = Node::shared();
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
    let ready = support::wait_until_async(
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
