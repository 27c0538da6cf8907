//! `inject` and a PodDisruptionBudget the stream already has, run as the binary. The eviction
//! API refuses to evict a pod that two budgets select, so a node drain would hang on every
//! Passmower pod: a budget of the stream that selects the workload's pods is adopted (inject
//! adds none of its own), whether or not its selector is the workload's; one that selects
//! other pods, or sits in another namespace, leaves inject's own in place.

use crate::golden::{golden, inject, ExitStatus};

/// The 2.2 golden input (pods labelled `app.kubernetes.io/name: passmower` and
/// `app.kubernetes.io/instance: passmower`) followed by a budget in `namespace` with
/// `selector` (YAML, indented for `spec.selector`).
fn with_budget(namespace: &str, selector: &str) -> String {
    format!(
        "{}---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: passmower-budget
  namespace: {namespace}
spec:
  minAvailable: 1
  selector:
{selector}",
        golden("passmower.in.yaml")
    )
}

/// The budgets of `inject`'s output, by name, sorted.
fn budgets(args: &[&str], input: &str) -> Vec<String> {
    let out = inject(args, input, &[]);
    assert_eq!(out.status, ExitStatus::Code(0), "{}", out.stderr);
    out.stdout
        .split("\n---\n")
        .filter(|d| d.contains("kind: PodDisruptionBudget"))
        .map(|d| {
            d.lines()
                .find_map(|l| l.trim().strip_prefix("name: "))
                .unwrap_or_default()
                .to_owned()
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[test]
fn a_budget_that_selects_the_pods_is_adopted_and_no_second_one_added() {
    let args = ["--namespace=auth"];
    let overlapping = [
        // A subset of the workload's selector.
        "    matchLabels:\n      app.kubernetes.io/name: passmower\n",
        // An expression over the pods' labels.
        "    matchExpressions:\n    - {key: app.kubernetes.io/instance, operator: In, values: [passmower, other]}\n",
        // Every pod of the namespace.
        "    {}\n",
    ];
    for selector in overlapping {
        assert_eq!(
            budgets(&args, &with_budget("auth", selector)),
            ["passmower-budget"],
            "{selector}"
        );
    }
    // Another app's budget, or one in another namespace: inject's own is added beside it.
    let redis = "    matchLabels:\n      app.kubernetes.io/name: redis\n";
    assert_eq!(
        budgets(&args, &with_budget("auth", redis)),
        ["passmower", "passmower-budget"]
    );
    let elsewhere = "    matchLabels:\n      app.kubernetes.io/name: passmower\n";
    assert_eq!(
        budgets(&args, &with_budget("other", elsewhere)),
        ["passmower", "passmower-budget"]
    );
    // No budget in the stream: inject's own.
    assert_eq!(budgets(&args, &golden("passmower.in.yaml")), ["passmower"]);
}
