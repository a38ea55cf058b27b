"""Fuzz: the policy ConfigMap's policy.yaml as every step reads it (steps.policy.parse_policy).

An admin's typo reaches every reaction, so the policy is an entry point like the step parameters:
whatever the text (YAML of hostile values in the known keys, `.nan`, `.inf`, numbers of thousands of
digits, nesting thousands deep, not YAML at all), it parses to settings the idle decision can trust
(finite, in range) or is a PolicyError naming the key, one line; never another exception.
"""

from __future__ import annotations

import math

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from steps.policy import PolicyError, parse_policy
from tests.fuzz.inputs import SEEDS, TEXT, Picks, deep_json, process_recursion_limit

IDLE_KEYS = ("window", "threshold", "minCoverage", "minRuntime", "mode", "maxReleasesPerHour", "windowSeconds",
             "minRuntimeSeconds", "releaseOn", "nodePoolAutoscaled", "signal", "withoutSignal", "progressMetric",
             "requestMetric", "signalUrl", "windw")
KIND_NAMES = ("notebook", "ray", "training", "serving", "batch", "gpu")
YAML_VALUES = [".nan", ".inf", "-.inf", "1e400", "9" * 30, "9" * 5000, "-1", "0", "0.5", "1", "2", "30m", "1h30m",
               "9" * 400 + "s", "'5%'", "true", "null", "[]", "{}", "dry-run", "enforce", "off", "'٣'", "²",
               deep_json(40), "'\\ud800'", "\"\\ud800\"", "idle", "demand", "never", "auto", "none", "gpu", "keep",
               "train_steps_total", "'vllm:requests'", "'steps\\n'", "'http://{name}.{namespace}:8888'", "'ftp://x'"]
# PyYAML's scanner is pure Python where nesting is deep (3,000 levels: 1.5 s); 600 levels is already
# past what it reads at a process's recursion limit, and those cases are kept rare.
DEEP = ("idle: " + "[" * 600 + "]" * 600, deep_json(600, "object"), "idle: {threshold: " + "[" * 600 + "]" * 600 + "}")


def _policy_text(shape: int, seed: int, text: str) -> str:
    pick = Picks(seed, text)
    if shape % 10 == 0:
        return pick.random.choice([text, "- a", "{", "\t", "idle: [", "idle: {window: 10m\n"])
    if shape % 97 == 0:
        return pick.random.choice(DEEP)

    def idle(kinds: bool = True) -> str:
        keys = pick.random.sample(IDLE_KEYS, pick.random.randint(0, 4))
        items = [f"{k}: {pick.random.choice(YAML_VALUES)}" for k in keys]
        if kinds and pick.random.random() < 0.3:  # per kind: the same keys one level down (not every key is allowed)
            names = pick.random.sample(KIND_NAMES, pick.random.randint(0, 2))
            items.append("kinds: {" + ", ".join(f"{name}: {idle(kinds=False)}" for name in names) + "}")
        return "{" + ", ".join(items) + "}"

    lines = [f"idle: {idle()}"] if pick.random.random() < 0.8 else []
    if pick.random.random() < 0.4:
        lines.append(f"tenants: {{team-a: {{idle: {idle()}, quota: {{weight: {pick.random.choice(YAML_VALUES)}}}}}}}")
    if pick.random.random() < 0.2:
        lines.append(f"quota: {{guaranteedGpus: {pick.random.choice(YAML_VALUES)}}}")
    if pick.random.random() < 0.1:
        lines.append(f"{pick.random.choice(['idel', 'tenants', 'quota'])}: {pick.random.choice(YAML_VALUES)}")
    return "\n".join(lines)


def test_policy_yaml() -> None:
    cases = 0

    @given(st.builds(_policy_text, st.integers(0, 999), SEEDS, TEXT))
    def policy(text: str) -> None:
        nonlocal cases
        cases += 1
        try:
            with process_recursion_limit():
                parsed = parse_policy(text)
        except PolicyError as error:
            message = str(error)
            assert "\n" not in message and "policy.yaml" in message.split(": expected")[0], message
            message.encode("utf-8")
            return
        for idle in (parsed.idle, *parsed.tenants.values(), *parsed.every_settings()):
            assert math.isfinite(idle.window_seconds) and idle.window_seconds > 0, idle
            assert 0 <= idle.threshold <= 1 and 0 <= idle.min_coverage <= 1, idle
            assert math.isfinite(idle.min_runtime_seconds) and idle.min_runtime_seconds >= 0, idle
            assert 0 <= idle.max_releases_per_hour < 2**63, idle
        yaml.safe_dump(parsed.raw)  # what the record keeps can be written

    policy()
    assert cases >= settings.default.max_examples, f"only {cases} cases ran"
