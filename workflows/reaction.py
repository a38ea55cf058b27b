"""The shape every gpuaas WorkflowTemplate shares: one reaction step, its retry, lock, record and metrics.

A reaction template is deliberately uniform (ARCHITECTURE section 1) because three parties read it:
Argo on a cluster, the local engine (which executes the rendered YAML), and an admin in the Argo UI.

    spec.arguments        every parameter with a description and a default (Submit works as is)
    entrypoint `main`     a `steps` template calling the reaction's script template
    script template       image `gpuaas-step`, command [python, -m, steps, <reaction>],
                          source '{{inputs.parameters}}', outputs read from /tmp/gpuaas/outputs/<name>
    retryStrategy         retry exit code 75 (EX_TEMPFAIL: 5xx, timeouts, conflicts exhausted) and attempts
                          that ended without an exit code (pod evicted or deleted: Argo's "-1")
    onExit `exit-handler` runs `python -m steps record-outcome` with {{workflow.status}} and
                          {{workflow.failures}} when the run did not succeed, so a run whose step
                          crashed still leaves a record (a Succeeded run recorded itself: no pod)
    recorded-by, record   (on-admitted, on-finished) a run the catch-up sweep already decided needs
                          no write: the step is skipped by `when`, no pod runs, and the audit record
                          the sweep built is the `record` parameter (docs/catch-up.md)
    synchronization       `mutexes` (Argo 4 removed the singular form): one lock per Workload
    workflowMetadata      labels gpuaas.io/reaction (fixed), gpuaas.io/workload and gpuaas.io/tenant
                          (labelsFrom expressions over workflow parameters) so history is searchable
    metrics               runs by reaction and Argo status, duration histogram (workflow level);
                          outcomes by reaction (template level, from the step's `outcome` output,
                          counted once per reaction: only the attempt whose `final` output is true)
    podGC, ttlStrategy, activeDeadlineSeconds, serviceAccountName
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hera.workflows import (
    ConfigMapEnvFrom,
    Counter,
    Env,
    FieldEnv,
    Histogram,
    Label,
    Parameter,
    Resources,
    Script,
    Step,
    Steps,
    WorkflowTemplate,
)
from hera.workflows.models import (
    Backoff,
    Capabilities,
    ConfigMapVolumeSource,
    LabelValueFrom,
    Mutex,
    PodGC,
    RetryStrategy,
    SeccompProfile,
    SecurityContext,
    Synchronization,
    TTLStrategy,
    ValueFrom,
    Volume,
    VolumeMount,
    WorkflowMetadata,
)
from hera.workflows.models import Parameter as ModelParameter

IMAGE = "gpuaas-step"
"""Placeholder image name; kustomize `images:` (name gpuaas-step) pins the admin's registry and tag."""
SERVICE_ACCOUNT = "gpuaas-steps"
OUTPUTS_DIR = "/tmp/gpuaas/outputs"
"""ARCHITECTURE section 1: the step writes one file per output parameter here (env GPUAAS_OUTPUTS_DIR)."""
PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
PROMETHEUS_CONFIGMAP = "gpuaas-prometheus"
"""ConfigMap in the product's namespace whose keys become every step's environment (envFrom): where the steps
and KEDA's scalers query Prometheus (GPUAAS_PROMETHEUS_URL), and on platforms that want them the bearer token
file, the CA file and KEDA's authentication (gpuaas.manifests.platforms renders one per platform)."""
PROMETHEUS_CA_CONFIGMAP = "gpuaas-prometheus-ca"
"""Optional ConfigMap with the query endpoint's CA, mounted at PROMETHEUS_CA_DIR (OpenShift's service CA
operator fills it: annotation service.beta.openshift.io/inject-cabundle, key service-ca.crt)."""
PROMETHEUS_CA_DIR = "/etc/gpuaas/prometheus-ca"
PROMETHEUS_CA_VOLUME = "prometheus-ca"
TRANSIENT_EXIT_CODE = 75
NO_EXIT_CODE = "-1"
"""What Argo's lastRetry.exitCode holds for an attempt whose main container never reported one
(pod evicted or deleted before it exited; workflow/controller/operator.go buildRetryStrategyLocalScope)."""
RETRY_LIMIT = 4
REACTION_LABEL = "gpuaas.io/reaction"
TENANT_LABEL = "gpuaas.io/tenant"
WORKLOAD_LABEL = "gpuaas.io/workload"
RUNS_METRIC = "gpuaas_reaction_runs"
DURATION_METRIC = "gpuaas_reaction_duration_seconds"
OUTCOMES_METRIC = "gpuaas_reaction_outcomes"
RECLAIMED_GPU_HOURS_METRIC = "gpuaas_gpu_hours_reclaimed"
RELEASED_GPUS_METRIC = "gpuaas_idle_gpus_released"


@dataclass(frozen=True)
class Input:
    """One template parameter: what the UI shows, and the default that lets Submit run as is."""

    name: str
    description: str
    default: str = ""
    enum: tuple[str, ...] = ()

    def argument(self) -> Parameter:
        return Parameter(name=self.name, value=self.default, description=self.description,
                         enum=list(self.enum) or None)


NAMESPACE = Input("namespace", "Namespace of the Kueue Workload (the tenant's project).")
WORKLOAD = Input("workload", "Name of the Kueue Workload (kubectl get workloads -n NAMESPACE).")
EVENT = Input("event", "The raw event as the Sensor delivered it (JSON). Leave empty when submitting by hand: "
                       "the step then reads the live state only.")
DRY_RUN = Input("dry-run", "true: plan and record only, change nothing. false: apply the plan.", "false",
                ("false", "true"))
TENANT = Input("tenant", "Optional hint for the gpuaas.io/tenant label (ClusterQueue name). The step resolves "
                         "the tenant itself and never trusts this value.")
WORKLOAD_INPUTS: tuple[Input, ...] = (NAMESPACE, WORKLOAD, EVENT, DRY_RUN, TENANT)
RECORDED_BY = Input("recorded-by", "Leave empty. `sweep`: the catch-up sweep already observed the Workload, planned "
                                   "this reaction and found nothing to write; no step pod runs and its audit record "
                                   "is the `record` parameter.", "", ("", "sweep"))
RECORD = Input("record", "Leave empty. The audit record (CloudEvent JSON) the catch-up sweep built when "
                         "recorded-by is `sweep`.")
RECORDED_INPUTS: tuple[Input, ...] = (RECORDED_BY, RECORD)
STEP_WHEN = "'{{workflow.parameters.recorded-by}}' == ''"
"""The reaction step runs unless the sweep recorded the run (no pod: Argo marks the step Skipped)."""
EXIT_WHEN = "{{workflow.status}} != Succeeded"
"""record-outcome runs only for a run that did not succeed (a Succeeded run recorded itself)."""

STANDARD_OUTPUTS: tuple[tuple[str, str], ...] = (("outcome", "failed"), ("plan", "{}"), ("record", ""),
                                                 ("final", "true"))
"""(name, default): a step that dies before writing its files still yields parsable outputs. `final`
is "false" only when Argo will run another attempt (the step knows: exit 75 and attempts left); a
step that died without writing it is final (only exit 75 and no exit code at all are retried, and
an attempt without an exit code has no outputs for Argo to read)."""
TENANT_OUTPUT = ("tenant", "unknown")
"""The tenant (ClusterQueue) the step resolved; labels the amount metrics."""


@dataclass(frozen=True)
class ReactionTemplate:
    """What differs between the six templates; everything else is the shared shape above."""

    name: str
    """WorkflowTemplate name users find in the Argo UI (`gpuaas-on-admitted`)."""
    reaction: str
    """`python -m steps <reaction>`."""
    description: str
    inputs: tuple[Input, ...] = WORKLOAD_INPUTS
    mutex: str | None = "gpuaas-workload-{{workflow.parameters.namespace}}-{{workflow.parameters.workload}}"
    extra_outputs: tuple[tuple[str, str], ...] = ()
    needs_prometheus: bool = False
    reclaimed_gpu_hours: bool = False
    """Emit gpuaas_gpu_hours_reclaimed from the step's `gpu-hours-reclaimed` output."""
    active_deadline_seconds: int = 900
    labels_from_workload: bool = True
    extra_annotations: dict[str, str] = field(default_factory=dict)
    recordable: bool = False
    """The sweep may record a run of it without a pod (RECORDED_INPUTS; on-admitted, on-finished)."""
    service_account: str = ""
    """The template's ServiceAccount (default: gpuaas-steps)."""

    @property
    def all_inputs(self) -> tuple[Input, ...]:
        return (*self.inputs, *RECORDED_INPUTS) if self.recordable else self.inputs


def label_value(parameter: str) -> str:
    """An Argo expression turning a workflow parameter into a valid label value.

    Label values are limited to 63 characters and must end alphanumeric; Kueue Workload names can be
    longer (`job-<63-char job name>-<hash>`), and Argo fails a run whose labelsFrom yields an invalid
    label. So: the first 63 characters, without a trailing `-` or `.` (names start alphanumeric)."""
    return f'sprig.trimAll("-.", sprig.trunc(63, workflow.parameters.{parameter}))'


def mutex(name: str) -> Synchronization:
    return Synchronization(mutexes=[Mutex(name=name)])


def transient_retry() -> RetryStrategy:
    """Retry exit code 75, and attempts that never got an exit code (evicted, deleted: "-1"; every
    step is idempotent, so running it again is safe). A permanent failure (1), a crash (137) or a
    recorded outcome (0) is final.

    No backoff maxDuration: the attempt number alone decides whether Argo retries, so the step can
    tell (`final` output) and the outcome counter counts each reaction once. Waits: 5, 10, 20, 40 s;
    the workflow's activeDeadlineSeconds bounds the whole run."""
    return RetryStrategy(limit=str(RETRY_LIMIT), retry_policy="Always",
                         expression=(f"asInt(lastRetry.exitCode) == {TRANSIENT_EXIT_CODE} || "
                                     f'lastRetry.exitCode == "{NO_EXIT_CODE}"'),
                         backoff=Backoff(duration="5s", factor="2"))


def restricted_security_context() -> SecurityContext:
    """What OpenShift's restricted-v2 SCC and Pod Security `restricted` accept; the UID is left to the platform."""
    return SecurityContext(allow_privilege_escalation=False, run_as_non_root=True,
                           capabilities=Capabilities(drop=["ALL"]),
                           seccomp_profile=SeccompProfile(type="RuntimeDefault"))


def step_env(needs_prometheus: bool, retry: bool = True) -> list[Env | FieldEnv]:
    """The step's environment. GPUAAS_RUN_ID (the workflow uid) lets a retried attempt recognise
    what an earlier attempt of the same run wrote; GPUAAS_RUN_NAME (the workflow name) is what a record written on
    an object names for a reader (`gpuaas audit show <name>`: an idle warning's run); GPUAAS_ATTEMPT/GPUAAS_RETRY_LIMIT let it say
    whether Argo will retry it (the `final` output)."""
    env: list[Env | FieldEnv] = [FieldEnv(name="GPUAAS_NAMESPACE", field_path="metadata.namespace"),
                                 Env(name="GPUAAS_OUTPUTS_DIR", value=OUTPUTS_DIR),
                                 Env(name="GPUAAS_RUN_ID", value="{{workflow.uid}}"),
                                 Env(name="GPUAAS_RUN_NAME", value="{{workflow.name}}")]
    if retry:
        env += [Env(name="GPUAAS_ATTEMPT", value="{{retries}}"), Env(name="GPUAAS_RETRY_LIMIT", value=str(RETRY_LIMIT))]
    # Where Prometheus is (GPUAAS_PROMETHEUS_URL, ...) comes from ConfigMap PROMETHEUS_CONFIGMAP (envFrom), so a
    # platform's overlay changes one ConfigMap, not every template; without it the steps use PROMETHEUS_URL.
    return env


def output(name: str, default: str) -> Parameter:
    return Parameter(name=name, value_from=ValueFrom(path=f"{OUTPUTS_DIR}/{name}", default=default))


def script(name: str, reaction: str, inputs: Sequence[str], outputs: Sequence[tuple[str, str]], *,
           needs_prometheus: bool = False, retry: bool = True, synchronization: Synchronization | None = None,
           metrics: list | None = None) -> Script:
    """The script template of one reaction: `python -m steps <reaction> /argo/staging/script`."""
    return Script(
        name=name,
        image=IMAGE,
        image_pull_policy="IfNotPresent",
        command=["python", "-m", "steps", reaction],
        source="{{inputs.parameters}}",
        inputs=[Parameter(name=n) for n in inputs],
        outputs=[output(n, d) for n, d in outputs],
        env=step_env(needs_prometheus, retry),
        env_from=[ConfigMapEnvFrom(name=PROMETHEUS_CONFIGMAP, optional=True)],
        volume_mounts=[VolumeMount(name=PROMETHEUS_CA_VOLUME, mount_path=PROMETHEUS_CA_DIR, read_only=True)],
        security_context=restricted_security_context(),
        resources=Resources(cpu_request="50m", memory_request="128Mi", memory_limit="512Mi"),
        retry_strategy=transient_retry() if retry else None,
        synchronization=synchronization,
        metrics=metrics,
    )


def outcome_metric(reaction: str) -> Counter:
    """One count per reaction, not per attempt. Argo emits a retried template's metrics for every
    attempt it retries and again when the Retry node completes (v4 operator.go executeTemplate);
    `when` keeps only the final attempt, whose outputs the Retry node carries."""
    return Counter(name=OUTCOMES_METRIC, help="gpuaas reactions by recorded outcome (once per reaction)",
                   labels=[Label(key="reaction", value=reaction),
                           Label(key="outcome", value="{{outputs.parameters.outcome}}")],
                   when="{{outputs.parameters.final}} == true", value="1")


def amount_metric(name: str, help_text: str, output_name: str) -> Counter:
    """A counter incremented by a numeric step output (metrics' dashboard reads these)."""
    # The tenant label comes from the step's own `tenant` output (resolved from the Workload, default
    # "unknown"): the `tenant` input is only a hint, often empty, and Argo drops a metric with an empty label.
    return Counter(name=name, help=help_text, when="{{status}} == Succeeded",
                   labels=[Label(key="tenant", value="{{outputs.parameters.tenant}}")],
                   value=f"{{{{outputs.parameters.{output_name}}}}}")


def workflow_metrics(reaction: str, recordable: bool = False) -> list:
    metrics = [
        Counter(name=RUNS_METRIC, help="gpuaas reaction workflows by reaction and Argo status",
                labels=[Label(key="reaction", value=reaction), Label(key="status", value="{{workflow.status}}")],
                value="1"),
        Histogram(name=DURATION_METRIC, help="gpuaas reaction workflow duration in seconds",
                  labels=[Label(key="reaction", value=reaction)],
                  value="{{workflow.duration}}", buckets=[1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0]),
    ]
    if recordable:
        # A run the sweep recorded has no step whose outcome metric counts it: it is a no-op by construction.
        metrics.append(Counter(name=OUTCOMES_METRIC, help="gpuaas reactions by recorded outcome (once per reaction)",
                               labels=[Label(key="reaction", value=reaction), Label(key="outcome", value="no-op")],
                               when="'{{workflow.parameters.recorded-by}}' != ''", value="1"))
    return metrics


def exit_handler(reaction: str, inputs: Sequence[Input]) -> None:
    """`record-outcome` with the run's status and failures: a crashed step is still recorded.

    Defines two templates in the active WorkflowTemplate context: the `exit-handler` steps template
    (Argo's documented way to hand {{workflow.status}}/{{workflow.failures}} to a step) and the
    `record-outcome` script it calls."""
    names = [i.name for i in inputs]
    with Steps(name="exit-handler"):
        Step(name="record-outcome", template="record-outcome", when=EXIT_WHEN, arguments=[
            ModelParameter(name="reaction", value=reaction),
            *[ModelParameter(name=n, value=f"{{{{workflow.parameters.{n}}}}}") for n in names],
            ModelParameter(name="status", value="{{workflow.status}}"),
            ModelParameter(name="failures", value="{{workflow.failures}}"),
        ])
    script("record-outcome", "record-outcome", ["reaction", *names, "status", "failures"], STANDARD_OUTPUTS)


def workflow_arguments(names: Sequence[str]) -> list[ModelParameter]:
    return [ModelParameter(name=n, value=f"{{{{workflow.parameters.{n}}}}}") for n in names]


def assemble(spec: ReactionTemplate, body: Callable[[], None]) -> WorkflowTemplate:
    """A WorkflowTemplate with the shared shape; `body()` defines `main` and the reaction's script
    templates inside the template's context (Hera adds them in definition order)."""
    labels_from = None
    if spec.labels_from_workload:
        labels_from = {WORKLOAD_LABEL: LabelValueFrom(expression=label_value("workload")),
                       TENANT_LABEL: LabelValueFrom(expression=label_value("tenant"))}
    with WorkflowTemplate(
        name=spec.name,
        labels={"app.kubernetes.io/name": "gpuaas", "app.kubernetes.io/component": "reaction",
                REACTION_LABEL: spec.reaction},
        annotations={"workflows.argoproj.io/description": spec.description, **spec.extra_annotations},
        entrypoint="main",
        on_exit="exit-handler",
        service_account_name=spec.service_account or SERVICE_ACCOUNT,
        arguments=[i.argument() for i in spec.all_inputs],
        synchronization=mutex(spec.mutex) if spec.mutex else None,
        active_deadline_seconds=spec.active_deadline_seconds,
        pod_gc=PodGC(strategy="OnPodSuccess"),
        ttl_strategy=TTLStrategy(seconds_after_success=86400, seconds_after_failure=604800),
        workflow_metadata=WorkflowMetadata(labels={REACTION_LABEL: spec.reaction}, labels_from=labels_from),
        metrics=workflow_metrics(spec.reaction, spec.recordable),
        volumes=[Volume(name=PROMETHEUS_CA_VOLUME, config_map=ConfigMapVolumeSource(
            name=PROMETHEUS_CA_CONFIGMAP, optional=True))],
    ) as template:
        body()
        exit_handler(spec.reaction, spec.all_inputs)
    return template


def single_step(spec: ReactionTemplate) -> WorkflowTemplate:
    """A template whose `main` runs the reaction once (all but on-idle)."""
    names = [i.name for i in spec.inputs]
    metrics = [outcome_metric(spec.reaction)]
    outputs = list(STANDARD_OUTPUTS) + list(spec.extra_outputs)
    if spec.reclaimed_gpu_hours:
        outputs += [("gpu-hours-reclaimed", "0"), TENANT_OUTPUT]
        metrics.append(amount_metric(RECLAIMED_GPU_HOURS_METRIC,
                                     "GPU-hours reclaimed from idle workloads, counted when a release ends",
                                     "gpu-hours-reclaimed"))

    def body() -> None:
        with Steps(name="main"):
            Step(name=spec.reaction, template=spec.reaction, arguments=workflow_arguments(names),
                 when=STEP_WHEN if spec.recordable else None)
        script(spec.reaction, spec.reaction, names, outputs, needs_prometheus=spec.needs_prometheus, metrics=metrics)

    return assemble(spec, body)
