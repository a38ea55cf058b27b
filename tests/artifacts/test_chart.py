"""The Helm chart, judged by the real helm (stack/helm) and compared object for object with kustomize.

Three builds of one values file must agree: `helm template` of charts/gpuaas, the kustomize build of its
kustomize form (an overlay, or a site folder with patch files: gpuaas/manifests/kustomize_site.py) with
the pinned kubectl, and gpuaas/manifests/site.py's objects (kustomize has no Helm hooks: its builds are
compared with `helm template --no-hooks`). Objects are compared whole, keyed by kind,
namespace and name; the one thing read before comparing is the policy ConfigMap's policy.yaml, a YAML
document in a string (Helm's toYaml and PyYAML order and quote it differently), which is compared
parsed. Nothing else is normalised: not labels, not list order, not number types.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaas.manifests import SITE_EXAMPLE_NAMESPACE, kustomize_site, site, values
from gpuaas.manifests.validation import YamlLoader, validate_all
from tests.support.helm import CHART, ROOT, helm, template
from tests.support.kubectl import pinned_kubectl

EXAMPLES = ROOT / "examples" / "values"
MANIFESTS = ROOT / "manifests"


def comparable(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    out = {}
    for obj in objects:
        obj = yaml.safe_load(yaml.safe_dump(obj))  # plain dicts and lists, numbers as YAML reads them
        if obj["kind"] == "ConfigMap" and "policy.yaml" in (obj.get("data") or {}):
            obj["data"]["policy.yaml"] = yaml.safe_load(obj["data"]["policy.yaml"])
        key = (obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        assert key not in out, f"two objects {key}"
        out[key] = obj
    return out


def assert_same(left: list[dict], right: list[dict], what: str) -> None:
    a, b = comparable(left), comparable(right)
    assert sorted(a) == sorted(b), f"{what}: only left {sorted(set(a) - set(b))}; only right {sorted(set(b) - set(a))}"
    for key in a:
        assert a[key] == b[key], f"{what}: {key} differs:\n{yaml.safe_dump(a[key])}\n---\n{yaml.safe_dump(b[key])}"


def kustomize(folder: Path) -> list[dict]:
    done = subprocess.run([str(pinned_kubectl()), "kustomize", str(folder)], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {folder} failed: {done.stderr.strip()}"
    return [doc for doc in yaml.load_all(done.stdout, Loader=YamlLoader) if doc]


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


def test_helm_lint_passes_for_the_defaults_and_every_example(helm_home: Path) -> None:
    done = helm("lint", "--strict", str(CHART), home=helm_home)
    assert done.returncode == 0, done.stdout + done.stderr
    for path in sorted(EXAMPLES.glob("*.yaml")):
        done = helm("lint", "--strict", str(CHART), "-f", str(path), home=helm_home)
        assert done.returncode == 0, f"helm lint -f {path.name}:\n{done.stdout}{done.stderr}"


@pytest.mark.parametrize("example", [None, "kubernetes", "kube-prometheus-stack", "openshift", "site"])
def test_helm_template_builds_what_the_python_builds(example: str | None, helm_home: Path) -> None:
    files = [EXAMPLES / f"{example}.yaml"] if example else []
    namespace = "gpuaas-test"
    rendered = template(files, namespace, helm_home)
    expected = site.objects(values.load(files[0] if files else None), namespace)
    assert_same(rendered, expected, f"helm template vs site.objects ({example or 'defaults'})")


@pytest.mark.parametrize("overlay", ["kubernetes", "kube-prometheus-stack", "openshift"])
def test_each_overlay_is_the_chart_with_its_example_values(overlay: str, helm_home: Path) -> None:
    assert_same(kustomize(MANIFESTS / "overlays" / overlay),
                template([EXAMPLES / f"{overlay}.yaml"], "gpuaas", helm_home, hooks=False),
                f"kubectl kustomize overlays/{overlay} vs helm template -f examples/values/{overlay}.yaml")


def test_the_example_site_is_the_chart_with_the_site_values(helm_home: Path) -> None:
    assert_same(kustomize(MANIFESTS / "examples" / "site"),
                template([EXAMPLES / "site.yaml"], SITE_EXAMPLE_NAMESPACE, helm_home, hooks=False),
                "kubectl kustomize manifests/examples/site vs helm template -f examples/values/site.yaml")


OTHER_SITES: dict[str, dict[str, Any]] = {
    "dry-run policy, no routing, own namespace object": {
        "namespace": {"create": True},
        "monitoring": {"alertRouting": {"mode": "none"}},
        "policy": {"idle": {"mode": "dry-run", "window": 5400}, "tenants": {"a": {"idle": {"window": "1h1s"}}}},
        "kueue": {"workloadVersion": "v1beta1", "flavor": {"create": False}, "cohort": {"create": False}},
        "tenants": [{"name": "a", "quota": {"nvidia.com/gpu": 2}}],
        "sweep": {"schedule": "*/5 * * * *", "grace": "90s"},
    },
    "OpenShift pool with its own Prometheus and no tenants": {
        "image": {"repository": "r.example/x", "tag": "sha-1"},
        "monitoring": {"alertRouting": {"namespace": "monitoring"}},
        "prometheus": {"url": "https://prometheus.example:9091",
                       "auth": {"type": "serviceAccountToken", "clusterRole": "cluster-monitoring-view"},
                       "ca": {"configMap": "site-ca", "key": "ca.pem"}},
        "keda": {"namespace": "autoscaling"},
        "kueue": {"namespaceLabels": {"example.com/queued": "yes"}},
        "nodePool": {"enabled": True, "kind": "MachineSet", "name": "p", "namespace": "openshift-machine-api",
                     "label": "example.com/pool_v1"},
        "policy": None,
    },
}


@pytest.mark.parametrize("name", sorted(OTHER_SITES))
def test_a_kustomize_site_rendered_from_other_values_is_the_chart_too(name: str, tmp_path: Path,
                                                                        helm_home: Path) -> None:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(OTHER_SITES[name]))
    chosen = values.load(values_file)
    folder = tmp_path / "site"
    for path, text in kustomize_site.site_files(chosen, "other-ns",
                                                os.path.relpath(MANIFESTS / "base", folder / "product")).items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    built = kustomize(folder)
    assert_same(built, template([values_file], "other-ns", helm_home, hooks=False), f"site {name!r}: kustomize vs helm")
    assert validate_all(built) == [], "the site's objects are valid against the upstream schemas"


@pytest.mark.parametrize(("policy", "window"), [
    ({"idle": {"window": "30m"}, "tenants": {"a": {"idle": {"window": "10m"}}}}, "10m"),
    ({"idle": {"window": "1h"}, "tenants": {"a": {"idle": {"window": "2h"}}}}, "1h"),
    ({"idle": {"window": 90}}, "90s"),
    ({"idle": {"windowSeconds": 5400}}, "90m"),
    ({"idle": {"window": " 1h30m "}}, "90m"),
    ({"idle": {"threshold": 0.1}, "tenants": {"a": {"idle": {"window": "45m"}}}}, "30m"),
    ({"tenants": {"a": {"idle": {"window": "20m30.4s"}}}}, "1230s"),
    ({"tenants": {"a": {"idle": {"window": 1.5}}}}, "2s"),
    ({"tenants": {"a": None, "b": {"quota": {"weight": 2}}}}, "30m"),
    # per kind: the step's layers, not every window written anywhere
    ({"idle": {"kinds": {"batch": {"window": "2h"}}}}, "2h"),
    ({"idle": {"window": "4h", "kinds": {"notebook": {"window": "3h"}}}}, "3h"),
    ({"idle": {"window": "4h"}}, "4h"),
    ({"tenants": {"a": {"idle": {"kinds": {"ray": {"windowSeconds": 600}}}}}}, "10m"),
    ({"idle": {"kinds": {"batch": {"window": "2h"}}}, "tenants": {"a": {"idle": {"window": "50m"}}}}, "50m"),
    ({"tenants": {"a": {"idle": {"window": "5m", "kinds": {k: {"window": "1h"} for k in
                                                            ("notebook", "ray", "training", "serving", "batch")}}}}},
     "30m"),
])
def test_the_charts_alert_window_is_the_policys_shortest(policy: dict, window: str, tmp_path: Path,
                                                          helm_home: Path) -> None:
    from gpuaas.manifests import observability

    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump({"policy": policy}))
    (rule,) = [o for o in template([values_file], "gpuaas", helm_home) if o["kind"] == "PrometheusRule"]
    alert = rule["spec"]["groups"][0]["rules"][-1]
    assert f"[{window}]" in alert["expr"] and f"offset {window}" in alert["expr"], alert["expr"]
    assert observability.duration_text(observability.shortest_window_seconds(policy)) == window


@pytest.mark.parametrize(("override", "message"), [
    ("policy.idle.window=0s", "/policy/idle/window"),
    ("policy.idle.windw=10m", "windw"),
    ("policy.idle.mode=off", "/policy/idle/mode"),
    ("policy.tenants.a.idle.threshold=2", "/policy/tenants/a/idle/threshold"),
    ("prometheus.ulr=http://x", "ulr"),
    ("nodePool.kind=Deployment", "/nodePool/kind"),
    ("monitoring.platform=openshift", "prometheus.auth.type: expected serviceAccountToken"),
    ("monitoring.platform=kube-prometheus-stack", "monitoring.ruleLabels: expected a `release` label"),
    ("prometheus.ca.configMap=x,prometheus.ca.key=ca.crt", "prometheus.ca: a CA is used with"),
    ("prometheus.auth.type=bearer", "/prometheus/auth/type"),
    ("sweep.schedule=every 2 minutes", "/sweep/schedule"),
    ("sweep.schedule=0 */2 * *", "/sweep/schedule"),
    ("sweep.grace=5", "/sweep/grace"),
    ("sweep.grace=5 minutes", "/sweep/grace"),
])
def test_values_the_chart_refuses_are_refused_by_helm_naming_the_key(override: str, message: str, tmp_path: Path,
                                                                      helm_home: Path) -> None:
    """Helm refuses them (the schema, or the chart's `fail` for settings that cannot work together), and so does
    `gpuaas render`."""
    done = helm("template", "gpuaas", str(CHART), "--set", override, home=helm_home)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    key, _, raw = override.partition("=")
    document: dict[str, Any] = {}
    node = document
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = yaml.safe_load(raw)
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(site.SiteError):
        site.objects(values.load(path))


def test_prometheus_settings_reach_every_step_through_one_configmap() -> None:
    """The on-idle step reads GPU activity there, and the on-admitted step writes the URL and KEDA's
    authentication into the KEDA ScaledObjects of inference servers (steps/reactions/on_admitted.py): every
    step takes ConfigMap gpuaas-prometheus as its environment, and mounts the CA's ConfigMap where the
    settings' CA file points."""
    url = "https://prometheus.example.svc:9091"
    chosen = values.load(overrides={"prometheus": {"url": url, "auth": {"type": "serviceAccountToken"},
                                                   "ca": {"configMap": "site-ca", "key": "ca.pem"}}})
    built = site.objects(chosen)
    (settings,) = [o for o in built if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpuaas-prometheus"]
    assert settings["data"]["GPUAAS_PROMETHEUS_URL"] == url
    assert settings["data"]["GPUAAS_KEDA_AUTHENTICATION"] == "ClusterTriggerAuthentication/gpuaas-prometheus"
    templates = [o for o in built if o["kind"] == "WorkflowTemplate"]
    assert {"gpuaas-on-idle", "gpuaas-on-admitted"} <= {t["metadata"]["name"] for t in templates}
    for workflow_template in templates:
        volumes = {v["name"]: v for v in workflow_template["spec"]["volumes"]}
        for step in (t["script"] for t in workflow_template["spec"]["templates"] if "script" in t):
            assert {"configMapRef": {"name": "gpuaas-prometheus", "optional": True}} in step["envFrom"]
            (mount,) = [m for m in step["volumeMounts"] if volumes[m["name"]].get("configMap")]
            assert volumes[mount["name"]]["configMap"]["name"] == "site-ca"
            assert settings["data"]["GPUAAS_PROMETHEUS_CA_FILE"] == f"{mount['mountPath']}/ca.pem"


@pytest.mark.parametrize("url", ["http://{name}.{namespace}.svc.{domain}:8888", "http://{{name}}/{name}", "https://x/{{{name}}}",
                                 "http://{notebook}:8888", "http://{}:8888", "http://{name:>9}", "http://{name",
                                 "http://name}", "http://{name.upper}", "ftp://{name}"])
def test_helm_and_the_step_agree_on_a_signal_url(url: str, tmp_path: Path, helm_home: Path) -> None:
    """The schema's pattern for signalUrl is the step's own regular expression; Helm evaluates it with Go's regexp,
    the step with Python's: the same verdict on every placeholder form."""
    from steps.policy import PolicyError, policy_from_mapping

    policy = {"idle": {"kinds": {"notebook": {"signalUrl": url}}}}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"policy": policy}))
    try:
        policy_from_mapping(policy)
        step = True
    except PolicyError:
        step = False
    done = helm("template", "gpuaas", str(CHART), "-f", str(path), home=helm_home)
    assert (done.returncode == 0) == step, f"{url!r}: step {'accepts' if step else 'refuses'}; helm: {done.stderr[-500:]}"
    if not step:
        assert "signalUrl" in done.stderr, done.stderr
