//! Whether the app container's memory leaves room for the leader instance: with
//! `--on-change=leader-instance` the leader pod runs the app twice, and a limit sized for one
//! instance gets the app container OOM-killed when its pod is promoted. With the warm standby
//! (`--leader-standby`, inject's default) every other pod runs the app twice as well, the
//! standby taking about what the leader instance takes, so such a limit fails in every pod
//! at once. Also the Kubernetes quantity parser the checks read the resources with.
//!
//! The rules, from Passmower 1.3, 2.2 and 2.4 measured after a 20 s idle window
//! (docs/results/generations.md): the serving instance takes 130–158 MiB RSS, a leader instance
//! 132–177 MiB and a waiting standby 174–194 MiB; 200Mi per instance covers each of them.
//! - The limit: warn when `resources.limits.memory` is below 2 × 200Mi = 400Mi. What the app
//!   needs beyond idle cannot be known here, so the rule only catches a limit that cannot hold
//!   two idle instances. No limit, no warning: nothing is capped.
//! - The standby: only where the workload planned memory for two instances in every pod. A
//!   memory request (or, without one, the limit, which Kubernetes then takes as the request)
//!   below 400Mi says the pods were sized for one instance each; a standby would put a second
//!   in every pod, and a node packed by those requests would run short in all of them. There
//!   the standby is left out (the leader pod alone runs two instances while it leads, so a
//!   promotion waits for Node's boot), and the output says so. No request and no limit: the
//!   standby stays, as nothing was planned to exceed.

use serde_norway::{Mapping, Value};

use crate::inject::options::{AppOnChange, InjectOptions};
use crate::inject::target::PodSite;
use crate::inject::value::at;

/// The standby's resident memory as measured (tests/bench/standby_bench.rs), for the warning.
const STANDBY_MEASURED: &str = "176-197 MiB beside the serving instance's 132-170 MiB";

/// What one instance of Passmower is given in the rule, in MiB.
pub const INSTANCE_MIB: u64 = 200;
/// The smallest memory limit that is not warned about, in MiB: two instances.
pub const LEADER_POD_MIB: u64 = 2 * INSTANCE_MIB;

/// Whether the warm standby goes into the pods of `main`'s workload: asked for (inject's
/// default) and within the memory the workload planned per pod (the module's rule). The note
/// says why it was left out.
pub fn standby(main: &Mapping, site: &PodSite, opts: &InjectOptions) -> (bool, Option<String>) {
    if !opts.leader_standby || opts.app_on_change() != AppOnChange::LeaderInstance {
        return (false, None);
    }
    let resources = main.get("resources");
    let (which, planned) = match (
        resources.and_then(|r| at(r, &["requests", "memory"])),
        resources.and_then(|r| at(r, &["limits", "memory"])),
    ) {
        (Some(request), _) if !request.is_null() => ("requests", request),
        (_, Some(limit)) if !limit.is_null() => ("limits", limit),
        _ => return (true, None),
    };
    // A quantity that cannot be read is refused by the apiserver, or warned about as a limit.
    let Some(bytes) = quantity_value(planned) else {
        return (true, None);
    };
    if bytes >= (LEADER_POD_MIB * MI) as f64 {
        return (true, None);
    }
    let note = format!(
        "{}: {}.containers[{}].resources.{which}.memory is {}, below {LEADER_POD_MIB}Mi (2 x \
         {INSTANCE_MIB}Mi): the pods are sized for one instance of the app, so the warm \
         standby (--leader-standby), which runs a second one in every pod \
         ({STANDBY_MEASURED}), is left out. A promotion then starts the leader instance afresh \
         (measured on Passmower: 2.4-4.2 s to the first reconcile, against 0.4-1.2 s with the \
         standby). For the standby, request at least {LEADER_POD_MIB}Mi; --no-leader-standby \
         leaves it out without this note",
        site.workload,
        site.path,
        opts.container,
        shown(planned)
    );
    (false, Some(note))
}

/// The warning for the app container `main` (of the pod at `site`) when its memory limit
/// cannot hold two instances, or cannot be read. Only for `--on-change=leader-instance`:
/// `restart` runs one instance at a time. `standby`: whether its pods get the warm standby.
pub fn memory_limit_warning(
    main: &Mapping,
    site: &PodSite,
    opts: &InjectOptions,
    standby: bool,
) -> Option<String> {
    if opts.app_on_change() != AppOnChange::LeaderInstance {
        return None;
    }
    let limit = main
        .get("resources")
        .and_then(|r| at(r, &["limits", "memory"]))
        .filter(|v| !v.is_null())?;
    let field = format!(
        "{}: {}.containers[{}].resources.limits.memory",
        site.workload, site.path, opts.container
    );
    let second = if standby {
        format!(
            "every pod runs a second instance of the app: its leader instance while it leads \
             (--on-change=leader-instance), else its warm standby (--leader-standby; \
             measured on Passmower: {STANDBY_MEASURED})"
        )
    } else {
        "while this pod leads it runs a second instance of the app \
         (--on-change=leader-instance; measured on Passmower: 145-179 MiB beside the serving \
         instance's 132-170 MiB)"
            .to_owned()
    };
    let need = format!(
        "{second}, so the limit must hold both: at least {LEADER_POD_MIB}Mi \
         (2 x {INSTANCE_MIB}Mi)"
    );
    let when = if standby {
        "in every pod, the standby's first"
    } else {
        "when its pod becomes leader"
    };
    let Some(bytes) = quantity_value(limit) else {
        return Some(format!(
            "{field} {} is not a Kubernetes quantity (such as 512Mi, 0.5Gi or 300M), so it \
             cannot be checked: {need}",
            shown(limit)
        ));
    };
    (bytes < (LEADER_POD_MIB * MI) as f64).then(|| {
        format!(
            "{field} is {}, below {LEADER_POD_MIB}Mi: {need}, or the container is OOM-killed \
             {when}. Raise it, or pass --on-change=restart (one instance at a time; HTTP is \
             down on every handover)",
            shown(limit)
        )
    })
}

const KI: u64 = 1 << 10;
const MI: u64 = 1 << 20;

/// A quantity as YAML holds it: a string (`512Mi`), or a plain number of bytes.
fn quantity_value(value: &Value) -> Option<f64> {
    match value {
        Value::String(text) => parse_quantity(text),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => serde_norway::to_string(other)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
    }
}

/// Parses a Kubernetes quantity (`512Mi`, `0.5Gi`, `300M`, `1e9`, `128974848`) into its value,
/// in the unit it counts (bytes for memory); `None` when it is not one. The grammar is the
/// apiserver's: an optional sign, a decimal number (`1`, `1.5`, `.5`, `1.`), then one suffix:
/// binary (`Ki` … `Ei`), decimal (`n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`, `E`), or an
/// exponent (`e3`, `E-2`). No spaces.
pub fn parse_quantity(text: &str) -> Option<f64> {
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let digits = number.bytes().filter(u8::is_ascii_digit).count();
    if digits == 0 || number.matches('.').count() > 1 {
        return None;
    }
    let mantissa: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "Ki" => KI as f64,
        "Mi" => MI as f64,
        "Gi" => (MI * KI) as f64,
        "Ti" => (MI * MI) as f64,
        "Pi" => (MI * MI * KI) as f64,
        "Ei" => (MI * MI * MI) as f64,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exponent => {
            let power = exponent.strip_prefix(['e', 'E'])?;
            let unsigned = power.strip_prefix(['-', '+']).unwrap_or(power);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            10f64.powi(power.parse().ok()?)
        }
    };
    let value = mantissa * scale;
    value
        .is_finite()
        .then_some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::target::tests::opts;

    #[test]
    fn quantities_parse_as_the_apiserver_reads_them() {
        let mib = MI as f64;
        for (text, want) in [
            ("512Mi", 512.0 * mib),
            ("0.5Gi", 512.0 * mib),
            ("300M", 300e6),
            ("320Mi", 320.0 * mib),
            ("1Gi", 1024.0 * mib),
            ("2G", 2e9),
            ("128974848", 128_974_848.0),
            ("129e6", 129e6),
            ("1E3", 1e3),
            ("1e-3", 1e-3),
            ("64Ki", 65536.0),
            ("100k", 1e5),
            (".5Gi", 512.0 * mib),
            ("1.", 1.0),
            ("+1Ki", 1024.0),
            ("-1Ki", -1024.0),
            ("1Ti", 1024.0 * 1024.0 * mib),
            ("1E", 1e18),
            ("500m", 0.5),
        ] {
            let got = parse_quantity(text).unwrap_or_else(|| panic!("{text} refused"));
            assert!(
                (got - want).abs() <= want.abs() * 1e-12,
                "{text}: {got} != {want}"
            );
        }
        for bad in [
            "", "Mi", "512 Mi", " 512Mi", "512MiB", "512mi", "512KI", "1.2.3", ".", "1e", "1e+",
            "1ee3", "1e3.5", "lots", "0x100", "--1", "1K", "inf", "NaN",
        ] {
            assert_eq!(parse_quantity(bad), None, "{bad:?}");
        }
    }

    fn site() -> PodSite {
        PodSite {
            document: 1,
            workload: "Deployment/passmower".into(),
            path: "spec.template.spec",
        }
    }

    fn container(resources: &str) -> Mapping {
        serde_norway::from_str(&format!("name: passmower\nresources: {resources}\n")).unwrap()
    }

    fn warning(resources: &str, opts: &InjectOptions) -> Option<String> {
        memory_limit_warning(&container(resources), &site(), opts, opts.leader_standby)
    }

    #[test]
    fn a_limit_below_two_instances_is_warned_about_with_what_to_set() {
        for limit in [
            "256Mi",
            "0.25Gi",
            "300M",
            "419430399",
            "399Mi",
            "320Mi",
            "336M",
        ] {
            let text = warning(&format!("{{limits: {{memory: {limit}}}}}"), &opts())
                .unwrap_or_else(|| panic!("{limit}: no warning"));
            assert!(
                text.starts_with(
                    "Deployment/passmower: spec.template.spec.containers[passmower].resources.limits.memory is "
                ),
                "{text}"
            );
            assert!(text.contains(limit), "{text}");
            assert!(text.contains("at least 400Mi"), "{text}");
            assert!(text.contains("--on-change=restart"), "{text}");
            assert!(text.contains("warm standby (--leader-standby"), "{text}");
            assert!(text.contains("OOM-killed in every pod"), "{text}");
        }
        // Without the standby only the leader's pod runs two instances.
        let cold = InjectOptions {
            leader_standby: false,
            ..opts()
        };
        let text = warning("{limits: {memory: 256Mi}}", &cold).expect("warned");
        assert!(text.contains("while this pod leads"), "{text}");
        assert!(text.contains("when its pod becomes leader"), "{text}");
        assert!(!text.contains("standby"), "{text}");
    }

    #[test]
    fn a_limit_that_holds_two_instances_or_none_at_all_is_not_warned_about() {
        for resources in [
            "{limits: {memory: 400Mi}}",
            "{limits: {memory: 512Mi}}",
            "{limits: {memory: 0.5Gi}}",
            "{limits: {memory: 420M}}",
            "{limits: {memory: 419430400}}",
            "{limits: {memory: 1G}}",
            "{limits: {memory: null}}",
            "{limits: {cpu: 100m}}",
            "{requests: {memory: 64Mi}}",
            "{}",
            "null",
        ] {
            assert_eq!(warning(resources, &opts()), None, "{resources}");
        }
    }

    #[test]
    fn an_unreadable_limit_is_warned_about_not_refused() {
        for limit in ["lots", "512MB", "[1]"] {
            let text = warning(&format!("{{limits: {{memory: {limit}}}}}"), &opts())
                .unwrap_or_else(|| panic!("{limit}: no warning"));
            assert!(text.contains("is not a Kubernetes quantity"), "{text}");
            assert!(text.contains("at least 400Mi"), "{text}");
        }
    }

    #[test]
    fn restart_mode_runs_one_instance_and_gets_no_warning() {
        let restart = InjectOptions {
            on_change: Some(AppOnChange::Restart),
            ..opts()
        };
        assert_eq!(warning("{limits: {memory: 128Mi}}", &restart), None);
        // Another container defaults to restart; asked for leader-instance it is checked too.
        let other = InjectOptions {
            container: "app".into(),
            ..opts()
        };
        assert_eq!(warning("{limits: {memory: 128Mi}}", &other), None);
        let both = InjectOptions {
            on_change: Some(AppOnChange::LeaderInstance),
            ..other
        };
        let text = warning("{limits: {memory: 128Mi}}", &both).expect("warned");
        assert!(text.contains("containers[app]"), "{text}");
    }

    /// The standby goes only where every pod was planned for two instances: a request (or,
    /// without one, a limit) below 400Mi leaves it out, with a note that says why and what to
    /// set; no plan at all keeps it.
    #[test]
    fn the_standby_goes_only_where_the_pods_are_sized_for_two_instances() {
        let standby_of =
            |resources: &str, opts: &InjectOptions| standby(&container(resources), &site(), opts);
        for (resources, which, shown) in [
            ("{requests: {memory: 256Mi}}", "requests", "256Mi"),
            (
                "{requests: {memory: 256Mi}, limits: {memory: 1Gi}}",
                "requests",
                "256Mi",
            ),
            ("{limits: {memory: 300M}}", "limits", "300M"),
            ("{requests: {memory: 399Mi}}", "requests", "399Mi"),
        ] {
            let (on, note) = standby_of(resources, &opts());
            assert!(!on, "{resources}: standby kept");
            let note = note.unwrap_or_else(|| panic!("{resources}: no note"));
            assert!(
                note.starts_with(&format!(
                    "Deployment/passmower: spec.template.spec.containers[passmower].resources.\
                     {which}.memory is {shown}, below 400Mi"
                )),
                "{note}"
            );
            for needle in [
                "warm standby",
                "request at least 400Mi",
                "--no-leader-standby",
            ] {
                assert!(note.contains(needle), "{needle}: {note}");
            }
        }
        for resources in [
            "{}",
            "{requests: {cpu: 100m}}",
            "{requests: {memory: 400Mi}}",
            "{requests: {memory: 512Mi}, limits: {memory: 1Gi}}",
            "{limits: {memory: 0.5Gi}}",
            "{requests: {memory: lots}}",
        ] {
            assert_eq!(standby_of(resources, &opts()), (true, None), "{resources}");
        }
        // Not asked for, or a mode without a second instance: none, and nothing to say.
        let cold = InjectOptions {
            leader_standby: false,
            ..opts()
        };
        assert_eq!(
            standby_of("{requests: {memory: 1Gi}}", &cold),
            (false, None)
        );
        let restart = InjectOptions {
            on_change: Some(AppOnChange::Restart),
            ..opts()
        };
        assert_eq!(standby_of("{}", &restart), (false, None));
    }
}
