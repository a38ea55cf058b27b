"""The chart's JSON Schema of the policy and the step's parser give the same verdict on every document.

The schema (steps.policy.policy_json_schema, in charts/gpuaas/values.schema.json) is generated from the
step's own definition (steps/policy.py IDLE_FIELDS, SECTIONS): the chart must accept exactly the policies the
step accepts, or an admin gets a policy past `helm install` that every reaction then rejects (or a
valid one refused). A corpus of the edges, then the policy fuzzer's documents, each judged by both.

Only documents a values file can carry are judged: JSON numbers (no `.nan`, `.inf`, integers beyond
64 bits: Helm cannot read them, and the step refuses them itself, tests/fuzz/test_fuzz_policy.py).
"""

from __future__ import annotations

import json
import math
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from steps.policy import PolicyError, policy_from_mapping, policy_json_schema
from tests.fuzz.inputs import SEEDS, TEXT
from tests.fuzz.test_fuzz_policy import _policy_text

VALIDATOR = jsonschema.Draft7Validator(policy_json_schema())


def _verdicts(document: Any) -> tuple[bool, bool]:
    try:
        policy_from_mapping(document)
        step = True
    except PolicyError:
        step = False
    return step, VALIDATOR.is_valid(document)


def _json_representable(document: Any) -> bool:
    try:
        text = json.dumps(document, allow_nan=False)
    except (ValueError, TypeError):
        return False
    stack = [json.loads(text)]
    while stack:
        node = stack.pop()
        if isinstance(node, int) and not isinstance(node, bool) and not -(2**63) <= node < 2**63:
            return False
        if isinstance(node, float) and not math.isfinite(node):
            return False
        stack.extend(node.values() if isinstance(node, dict) else node if isinstance(node, list) else [])
    return json.loads(text) == document


CORPUS = [
    "", "{}", "idle: null", "idle: {}", "tenants: {a: null}", "tenants: {a: {}}", "quota: {weight: 2}",
    "idle: {window: 30m}", "idle: {window: 1h30m}", "idle: {window: 1.5h}", "idle: {window: ' 10m '}",
    "idle: {window: 0s}", "idle: {window: 0}", "idle: {window: 0.0001}", "idle: {window: 00.01s}", "idle: {window: 0h0m}",
    "idle: {window: 0h1s}", "idle: {window: ''}", "idle: {window: 10}", "idle: {window: -1}", "idle: {window: 1d}",
    "idle: {window: 1m30}", "idle: {window: 30s1m}", "idle: {window: '٣m'}", "idle: {window: true}",
    "idle: {minRuntime: 0}", "idle: {minRuntime: 0s}", "idle: {minRuntime: -1}", "idle: {minRuntime: 2h}",
    "idle: {windowSeconds: 60}", "idle: {minRuntimeSeconds: 0}", "idle: {window: 30m, windowSeconds: 60}",
    "idle: {windowSeconds: x, window: 30m}", "tenants: {a: {idle: {minRuntime: 1h, minRuntimeSeconds: 5}}}",
    "idle: {threshold: 0}", "idle: {threshold: 1}", "idle: {threshold: 1.01}", "idle: {threshold: '0.1'}",
    "idle: {minCoverage: -0.1}", "idle: {mode: enforce}", "idle: {mode: dry-run}", "idle: {mode: Enforce}",
    "idle: {maxReleasesPerHour: 0}", "idle: {maxReleasesPerHour: 3.0}", "idle: {maxReleasesPerHour: 2.5}",
    "idle: {maxReleasesPerHour: -1}", "idle: {maxReleasesPerHour: true}", "idle: {windw: 1m}", "idle: []",
    "quota: 3", "quota: []", "tenants: []", "tenants: {a: 3}", "tenants: {a: {quota: 3}}", "tenants: {a: {idel: {}}}",
    "tenants: {a: {idle: {window: 5m}, quota: {weight: 1}}}", "kinds: {}", "[]", "3",
    # the per-kind policy: kinds, releaseOn, the kinds' own evidence
    "idle: {kinds: {notebook: {window: 2h}}}", "idle: {kinds: null}", "idle: {kinds: {notebook: null}}",
    "idle: {kinds: []}", "idle: {kinds: {gpu: {}}}", "idle: {kinds: {batch: {maxReleasesPerHour: 1}}}",
    "idle: {kinds: {ray: {kinds: {}}}}", "idle: {kinds: {batch: {window: 0s}}}",
    "idle: {kinds: {batch: {window: 1m, windowSeconds: 60}}}", "idle: {kinds: {serving: {minRuntimeSeconds: 5}}}",
    "idle: {releaseOn: demand}", "idle: {releaseOn: never}", "idle: {releaseOn: sometimes}",
    "idle: {nodePoolAutoscaled: true}", "idle: {nodePoolAutoscaled: 1}", "idle: {signal: none}",
    "idle: {signal: gpu}", "idle: {withoutSignal: keep}", "idle: {withoutSignal: none}",
    "idle: {kinds: {training: {progressMetric: train_steps_total}}}", "idle: {kinds: {training: {progressMetric: a-b}}}",
    "idle: {kinds: {training: {progressMetric: \"steps\\n\"}}}", "idle: {kinds: {training: {progressMetric: 3}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://{name}.{namespace}:8888'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'ftp://x'}}}", "tenants: {a: {idle: {kinds: {serving: {window: 0}}}}}",
    "tenants: {a: {idle: {kinds: {serving: {requestMetric: 'vllm:requests'}}}}}",
    "tenants: {a: {idle: {releaseOn: demand, kinds: {ray: {releaseOn: never}}}}}",
    # signalUrl's placeholders: the step formats it with {name}, {namespace} and {domain} only
    "idle: {kinds: {notebook: {signalUrl: 'http://{name}.{namespace}.svc.{domain}:8888'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://{notebook}:8888'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://{name:>9}:8888'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://{name!r}:8888'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://{name.upper}:8888'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://{name.nothing}:8888'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://{}:8888'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://{{name}}/{name}'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://{name'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://name}'}}}",
    "idle: {kinds: {notebook: {signalUrl: 'http://{{{name}}}'}}}",
]


@pytest.mark.parametrize("text", CORPUS)
def test_schema_and_step_agree_on_the_corpus(text: str) -> None:
    document = yaml.safe_load(text)
    step, schema = _verdicts(document)
    assert step == schema, f"{text!r}: the step {'accepts' if step else 'refuses'} it, the schema " \
                           f"{'accepts' if schema else 'refuses'} it"


def test_schema_and_step_agree_on_fuzzed_policies() -> None:
    judged = 0

    @given(st.builds(_policy_text, st.integers(0, 999), SEEDS, TEXT))
    def policy(text: str) -> None:
        nonlocal judged
        try:
            document = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError, ValueError):
            return
        if not _json_representable(document):
            return
        judged += 1
        step, schema = _verdicts(document)
        assert step == schema, f"{text!r}: step {step}, schema {schema}"

    policy()
    # about 4 in 10 fuzzed texts are YAML documents of JSON numbers (the rest: not YAML, .nan, huge numbers)
    assert judged >= settings.default.max_examples // 4, f"only {judged} documents were judged"
