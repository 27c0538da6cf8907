//! What k3s's helm-controller does with `HelmChart` objects, done by the test (no k3s runs
//! here), as its source says (k3s-io/helm-controller `pkg/controllers/chart/chart.go`: `job()`,
//! `args()`, the values Secret; k3s-io/klipper-helm's `entry`): for a new or changed HelmChart,
//! a Job runs `helm install` (or `helm upgrade` once `helm status` finds the release) with Helm
//! 4, `--namespace` the `targetNamespace`, `--create-namespace` when `createNamespace`,
//! `--version`, the release named after the HelmChart, the chart from `chartContent`
//! (base64-decoded to NAME.tgz) or `chart`, `valuesContent` as a values file followed by the
//! `valuesContent` of a `HelmChartConfig` of the same name (k3s's way to override a chart's
//! values), and `--server-side=true` on install; for a deleted one, `helm uninstall --wait`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::get;
use crate::tools::{Ran, Sandbox};

/// The HelmChart specs helm-controller last ran a Job for, by name.
#[derive(Default)]
pub struct HelmController {
    applied: BTreeMap<String, Value>,
}

impl HelmController {
    /// One pass over the HelmCharts of kube-system: a Job for each new or changed one, an
    /// uninstall for each one gone. Returns what each Job ran.
    pub fn reconcile(&mut self, sandbox: &Sandbox) -> Vec<(String, Ran)> {
        let list = sandbox
            .ok("kubectl -n kube-system get helmcharts -o json")
            .stdout;
        let list: Value = serde_json::from_str(&list).expect("JSON");
        let mut ran = Vec::new();
        let mut present = Vec::new();
        for chart in list["items"].as_array().expect("items") {
            let name = chart["metadata"]["name"].as_str().expect("name").to_owned();
            present.push(name.clone());
            let wanted = serde_json::json!([chart["spec"], config_of(sandbox, &name)]);
            if self.applied.get(&name) == Some(&wanted) {
                continue;
            }
            let job = job(sandbox, chart);
            if job.success {
                self.applied.insert(name.clone(), wanted);
            }
            ran.push((name, job));
        }
        let gone: Vec<String> = self
            .applied
            .keys()
            .filter(|n| !present.contains(n))
            .cloned()
            .collect();
        for name in gone {
            let wanted = self.applied.remove(&name).expect("applied");
            let target = wanted[0]["targetNamespace"]
                .as_str()
                .unwrap_or("kube-system");
            ran.push((
                name.clone(),
                sandbox.bash(
                    &format!("helm uninstall {name} --namespace {target} --wait"),
                    Duration::from_secs(300),
                ),
            ));
        }
        ran
    }

    /// The Job of HelmChart `name` alone, as when it finishes before the others.
    pub fn run_one(&mut self, sandbox: &Sandbox, name: &str) -> Ran {
        let chart = get(sandbox, "kube-system", &format!("helmchart {name}")).expect("HelmChart");
        let ran = job(sandbox, &chart);
        if ran.success {
            let wanted = serde_json::json!([chart["spec"], config_of(sandbox, name)]);
            self.applied.insert(name.to_owned(), wanted);
        }
        ran
    }

    /// Runs `script` (a page's block) with this controller beside it, then once more.
    pub fn run_beside(&mut self, sandbox: &Sandbox, script: &str) {
        super::run_beside(sandbox, script, || self.reconcile(sandbox));
        super::settle(|| self.reconcile(sandbox));
    }

    /// [`HelmController::reconcile`], panicking unless every Job succeeded.
    pub fn reconcile_ok(&mut self, sandbox: &Sandbox) {
        for (name, ran) in self.reconcile(sandbox) {
            assert!(
                ran.success,
                "HelmChart {name}: the Job failed:\n{}\n{}",
                ran.stdout, ran.stderr
            );
        }
    }
}

/// What the Job of `chart` runs (klipper-helm's `entry`, install or upgrade).
fn job(sandbox: &Sandbox, chart: &Value) -> Ran {
    let name = chart["metadata"]["name"].as_str().expect("name");
    let spec = &chart["spec"];
    let target = spec["targetNamespace"].as_str().unwrap_or("kube-system");
    let dir = sandbox.root().join(".helm-controller").join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let source = match spec["chartContent"].as_str() {
        Some(content) => {
            let encoded = dir.join(format!("{name}.tgz.base64"));
            std::fs::write(&encoded, content).expect("chart content");
            let tgz = dir.join(format!("{name}.tgz"));
            sandbox.ok(&format!(
                "base64 -d {} >{}",
                encoded.display(),
                tgz.display()
            ));
            tgz.display().to_string()
        }
        None => spec["chart"]
            .as_str()
            .expect("chart or chartContent")
            .to_owned(),
    };
    let mut args = format!("--namespace {target}");
    if spec["createNamespace"].as_bool() == Some(true) {
        args.push_str(" --create-namespace");
    }
    if let Some(version) = spec["version"].as_str() {
        args.push_str(&format!(" --version {version}"));
    }
    let mut values = String::new();
    let config = config_of(sandbox, name);
    for (file, content) in [
        (
            "values-0-000-HelmChart-ValuesContent.yaml",
            spec["valuesContent"].as_str(),
        ),
        (
            "values-1-000-HelmChartConfig-ValuesContent.yaml",
            config["valuesContent"].as_str(),
        ),
    ] {
        if let Some(content) = content {
            let file = dir.join(file);
            std::fs::write(&file, content).expect("values");
            values.push_str(&format!(" --values {}", file.display()));
        }
    }
    let exists = sandbox
        .bash(
            &format!("helm status --namespace {target} {name} --output json"),
            Duration::from_secs(60),
        )
        .success;
    let command = if exists {
        format!("helm upgrade {args} {name} {source}{values}")
    } else {
        format!("helm install {args} {name} {source} --server-side=true{values}")
    };
    sandbox.bash(&command, Duration::from_secs(300))
}

/// The spec of the `HelmChartConfig` named like the HelmChart, or `null` (none, or no
/// HelmChartConfig kind served).
fn config_of(sandbox: &Sandbox, name: &str) -> Value {
    let served = sandbox
        .bash(
            "kubectl api-resources --api-group=helm.cattle.io -o name",
            Duration::from_secs(60),
        )
        .stdout
        .contains("helmchartconfigs");
    if !served {
        return Value::Null;
    }
    get(sandbox, "kube-system", &format!("helmchartconfig {name}"))
        .map(|c| c["spec"].clone())
        .unwrap_or(Value::Null)
}
