"""Resubmission in the real Argo UI, in headless Chromium (issue 9 part 5).

What an admin does by hand, done by a browser against the real UI: the Argo Workflows UI built from
the pinned module's own `ui/` source (`gpuaas cluster build --argo-ui`, gpuaas.cluster.argo_ui) and
embedded in the `argo` binary, served by an `argo server` this module starts itself on a free port,
against the Argo cluster's kube-apiserver and its workflow archive (the same ConfigMap the stack's
server reads), so it shows the same live and archived runs. The browser is Debian's Chromium, driven
through Debian's chromedriver by Selenium (PyPI): the test stays one Python process, with the
Kubernetes client that judges the outcome beside the browser, and no npm package in the project.

1. A finished `gpuaas-on-idle` run, submitted with the real argo CLI (a resolved Alertmanager group:
   harmless, nothing is released), is opened from the Workflows list and resubmitted with RESUBMIT;
   the new Workflow carries the original's parameters, finishes Succeeded with the same recorded
   outcome (no-op), and reaches the archive.
2. Workflow Templates -> gpuaas-resume-workers -> Submit: the parameters show their descriptions
   (the rendered template's) and `dry-run` its enum; the fields are filled for a Workload of this
   test's own Job and submitted; the run is Succeeded, records no-op (nothing was released) for that
   Workload, and reaches the archive.

Marker `argo_ui`; in `make test` (its real tier's Argo shard), and alone with `make test-ui`. The UI is
built by `make test` before the tests (`gpuaas cluster build --argo-ui`); its yarn.lock fetches argo-ui
from GitHub, or from GPUAAS_ARGO_UI_GIT (CI: a git bundle in ../shared/mirrors). Without either the
UI build fails, `argo` keeps upstream's placeholder page, and this module fails saying what to provide.
Screenshots go to $GPUAAS_ARGO_UI_SCREENSHOTS (docs/images refreshes the README's), else tmp_path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from engine import ports
from gpuaas.cluster.argo_ui import WHAT_TO_PROVIDE
from gpuaas.cluster.argo_workflows import CONFIGMAP, NAMESPACE
from gpuaas.cluster.binaries import program, ui_build_failure
from gpuaas.cluster.readiness import http_status
from tests.realstack.argo_product import PRODUCT_NAMESPACE, install
from tests.support.real_cluster import RealCluster, eventually

pytestmark = pytest.mark.argo_ui

TENANT = "team-a"
RUN = uuid.uuid4().hex[:6]
TEST_LABEL = ("gpuaas.io/test", f"argo-ui-{RUN}")
"""On every object this module makes, so a shared cluster's other runs are never mistaken for ours."""
SCREENSHOTS_ENV = "GPUAAS_ARGO_UI_SCREENSHOTS"
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                  "--no-first-run", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--window-size=1440,960")
"""As root on a closed network: without the background-networking flags Chromium keeps dialling out."""
FINISHED = ("Succeeded", "Failed", "Error")
PREVIOUS_RUN_LABEL = "workflows.argoproj.io/resubmitted-from-workflow"


@pytest.fixture(scope="module")
def product(argo_cluster: RealCluster) -> RealCluster:
    return install(argo_cluster)


@pytest.fixture(scope="module")
def ui_server(product: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`argo server` (the UI-embedded binary) on a free port, as the stack runs it but with the admin's kubeconfig."""
    port = ports.free_port()
    log = tmp_path_factory.mktemp("argo-ui-server") / "argo-server.log"
    with log.open("wb") as out:
        process = subprocess.Popen([
            str(program("argo-workflows", "argo")), "server", f"--kubeconfig={product.kubeconfig}",
            "--namespace", NAMESPACE, "--port", str(port), "--secure=false", "--auth-mode", "server",
            "--configmap", CONFIGMAP, "--loglevel", "info"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def answers() -> bool:
            assert process.poll() is None, f"argo server exited {process.returncode}: {log.read_text()[-2000:]}"
            try:
                return http_status(f"{url}/api/v1/version", timeout=5)[0] == 200
            except OSError:  # not listening yet
                return False
        eventually(answers, timeout_s=120, what=f"argo server answering on {url}")
        code, page = http_status(f"{url}/workflows", timeout=30)
        failure = ui_build_failure()
        assert code == 200 and "<title>Argo</title>" in page, (
            f"expected the Argo UI's index.html at {url}/workflows, found HTTP {code} {page[:120]!r}: the argo binary "
            f"was built without the UI; {WHAT_TO_PROVIDE}, then `gpuaas cluster build --argo-ui argo-workflows` "
            f"(`make test` does)" + (f". The last UI build failed: {failure}" if failure else ""))
        yield url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, ("expected Debian's chromium and chromedriver on PATH (apt-get install chromium "
                                 f"chromium-driver; `make setup` installs them), found {chromium=} {driver=}")
    profile = tempfile.mkdtemp(prefix="gpuaas-argo-ui-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    session = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    try:
        yield session
    finally:
        session.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    configured = os.environ.get(SCREENSHOTS_ENV)
    folder = Path(configured) if configured else tmp_path_factory.mktemp("argo-ui-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Ui:
    """The few things the test does in the Argo UI, with explicit waits (never sleeps for the page)."""

    def __init__(self, driver, url: str, screenshots: Path) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver, self.url, self.screenshots = driver, url, screenshots
        from selenium.common.exceptions import StaleElementReferenceException

        # React re-renders often: an element found a moment ago may be gone; the next poll finds it again.
        self.wait = WebDriverWait(driver, 60, ignored_exceptions=(StaleElementReferenceException,))
        self.modals_closed = 0
        self.intercepted = ""

    def open(self, path: str) -> None:
        self.driver.get(f"{self.url}{path}")

    def element(self, xpath: str):
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions

        try:
            return self.wait.until(expected_conditions.visibility_of_element_located((By.XPATH, xpath)),
                                   message=f"no visible element {xpath} on {self.driver.current_url}")
        except TimeoutException:
            self.driver.save_screenshot(str(self.screenshots / "failed-argo-ui.png"))  # what the page showed
            raise

    def click(self, xpath: str) -> None:
        """Click the element; a modal of the UI's own in the way (first-time-user survey, new version) is
        closed with its x first, as a user would."""
        from selenium.common.exceptions import ElementClickInterceptedException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions

        def clicked(driver) -> bool:
            target = expected_conditions.element_to_be_clickable((By.XPATH, xpath))(driver)
            if not target:
                return False
            try:
                target.click()
            except ElementClickInterceptedException as error:
                self.intercepted = error.msg.split("(Session info")[0]
                closers = [c for c in driver.find_elements(By.CSS_SELECTOR, "div.modal span.modal-close")
                           if c.is_displayed()]
                if closers:
                    closers[0].click()
                    self.modals_closed += 1
                return False
            return True
        from selenium.common.exceptions import TimeoutException

        try:
            self.wait.until(clicked, message=f"no clickable element {xpath} on {self.driver.current_url} "
                                             f"(last: {self.intercepted or 'not clickable'})")
        except TimeoutException:
            self.driver.save_screenshot(str(self.screenshots / "failed-argo-ui.png"))
            raise

    def path_becomes(self, prefix: str, other_than: str = "") -> str:
        """Wait until the browser's path starts with `prefix` (and is not `other_than`); return the path."""
        from urllib.parse import urlparse

        def moved(driver) -> str | bool:
            path = urlparse(driver.current_url).path
            return path if path.startswith(prefix) and path != other_than else False
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.common.by import By

        try:
            return self.wait.until(moved, message=f"expected the UI to navigate to {prefix}...")
        except TimeoutException as error:
            self.driver.save_screenshot(str(self.screenshots / "failed-argo-ui.png"))
            notices = [n.text for n in self.driver.find_elements(By.CSS_SELECTOR, ".sliding-panel, .error-notice")]
            raise AssertionError(f"{error.msg}; still on {self.driver.current_url}, showing {notices}") from None

    def in_view(self, xpath: str) -> None:
        """Wait until the element is wholly inside the window: side panels slide in from the right."""
        self.wait.until(lambda driver: driver.execute_script(
            "const r = arguments[0].getBoundingClientRect(); return r.width > 0 && r.left >= 0 && "
            "r.right <= window.innerWidth;", self.element(xpath)), message=f"{xpath} never came wholly into view")

    def shot(self, name: str) -> Path:
        path = self.screenshots / f"argo-ui-{name}.png"
        self.driver.save_screenshot(str(path))
        assert path.stat().st_size > 10_000, f"{path} is {path.stat().st_size} bytes: a blank page?"
        return path


def _button(text: str, inside: str = "") -> str:
    return f"{inside}//button[contains(@class, 'argo-button') and normalize-space()='{text}']"


SIDE_PANEL = "//div[contains(@class, 'sliding-panel--opened')]"
OPTION = "//div[contains(concat(' ', normalize-space(@class), ' '), ' select__option ')]"
"""One option of argo-ui's Select (not its `select__options` list)."""


def _workflow(custom: client.CustomObjectsApi, name: str) -> dict:
    return custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", name)


def _finished(custom: client.CustomObjectsApi, name: str, timeout_s: float = 300) -> dict:
    return eventually(lambda: (w := _workflow(custom, name)).get("status", {}).get("phase") in FINISHED and w,
                      timeout_s=timeout_s, what=f"Workflow {name} finished")


def _outputs(workflow: dict, template: str) -> dict[str, str]:
    node = next(n for n in workflow["status"]["nodes"].values()
                if n.get("templateName") == template and n["type"] == "Pod")
    return {p["name"]: p.get("value") for p in node["outputs"]["parameters"]}


def _parameters(workflow: dict) -> dict[str, str]:
    return {p["name"]: p.get("value") for p in workflow["spec"]["arguments"]["parameters"]}


def _archived(url: str, name: str) -> dict:
    def found() -> dict | None:
        code, body = http_status(f"{url}/api/v1/archived-workflows?namespace={PRODUCT_NAMESPACE}"
                                 f"&listOptions.labelSelector={TEST_LABEL[0]}%3D{TEST_LABEL[1]}", timeout=30)
        assert code == 200, body[:300]
        return next((i for i in json.loads(body).get("items") or [] if i["metadata"]["name"] == name), None)
    return eventually(found, timeout_s=120, what=f"Workflow {name} in the archive")


RESOLVED_GROUP = {
    "version": "4", "status": "resolved", "receiver": "gpuaas", "groupKey": f"{{}}:{{alertname=\"GPUWorkloadIdle\"}}-{RUN}",
    "groupLabels": {"alertname": "GPUWorkloadIdle"},
    "commonLabels": {"alertname": "GPUWorkloadIdle", "namespace": TENANT, "pod": f"ui-test-{RUN}-0"},
    "commonAnnotations": {}, "externalURL": "http://alertmanager.invalid", "truncatedAlerts": 0,
    "alerts": [{"status": "resolved", "labels": {"alertname": "GPUWorkloadIdle", "namespace": TENANT,
                                                  "pod": f"ui-test-{RUN}-0"},
                "annotations": {}, "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2026-01-01T00:10:00Z",
                "generatorURL": "", "fingerprint": RUN}],
}
"""An Alertmanager webhook group (version 4) whose only GPUWorkloadIdle alert is resolved: on-idle releases nothing."""


def test_resubmit_a_finished_on_idle_run_in_the_argo_ui(product: RealCluster, ui_server: str, browser,
                                                        screenshots: Path) -> None:
    custom = client.CustomObjectsApi(product.admin)
    submitted = subprocess.run([
        str(program("argo-workflows", "argo")), f"--kubeconfig={product.kubeconfig}", "-n", PRODUCT_NAMESPACE,
        "submit", "--from", "workflowtemplate/gpuaas-on-idle", "--generate-name", f"ui-on-idle-{RUN}-",
        "-l", f"{TEST_LABEL[0]}={TEST_LABEL[1]}", "-p", f"namespace={TENANT}",
        "-p", f"event={json.dumps(RESOLVED_GROUP)}", "-o", "name"], check=False, capture_output=True, text=True, timeout=120)
    assert submitted.returncode == 0, submitted.stderr
    original_name = submitted.stdout.strip().split("/")[-1]
    original = _finished(custom, original_name)
    assert original["status"]["phase"] == "Succeeded", original["status"].get("message")
    assert _outputs(original, "idle-alerts")["outcome"] == "no-op"

    ui = Ui(browser, ui_server, screenshots)
    ui.open(f"/workflows/{PRODUCT_NAMESPACE}")
    ui.click(f"//a[contains(@href, '/workflows/{PRODUCT_NAMESPACE}/{original_name}')]")
    ui.path_becomes(f"/workflows/{PRODUCT_NAMESPACE}/{original_name}")
    ui.element(_button("RESUBMIT"))
    ui.element("//*[normalize-space()='idle-alerts']")  # the graph's step node
    ui.shot("on-idle-run")
    ui.click(_button("RESUBMIT"))
    ui.element(f"{SIDE_PANEL}//h4[normalize-space()='Resubmit Workflow']")
    ui.in_view(f"{SIDE_PANEL}//h5")
    ui.shot("resubmit")
    ui.click(_button("Resubmit", SIDE_PANEL))
    new_path = ui.path_becomes(f"/workflows/{PRODUCT_NAMESPACE}/", other_than=f"/workflows/{PRODUCT_NAMESPACE}/{original_name}")
    resubmitted_name = new_path.rstrip("/").split("/")[-1]

    resubmitted = _finished(custom, resubmitted_name)
    assert resubmitted["metadata"]["labels"][PREVIOUS_RUN_LABEL] == original_name
    assert resubmitted["metadata"]["labels"][TEST_LABEL[0]] == TEST_LABEL[1]
    assert resubmitted["spec"]["workflowTemplateRef"] == {"name": "gpuaas-on-idle"}
    assert _parameters(resubmitted) == _parameters(original)
    assert resubmitted["status"]["phase"] == "Succeeded", resubmitted["status"].get("message")
    assert _outputs(resubmitted, "idle-alerts")["outcome"] == "no-op"
    assert _archived(ui_server, resubmitted_name)["status"]["phase"] == "Succeeded"
    browser.refresh()  # the finished run, as an admin coming back to it sees it
    ui.element(_button("RESUBMIT"))
    ui.element("//*[normalize-space()='idle-alerts']")
    ui.shot("resubmitted-run")
    # Back in the Workflows list (its first-time modal closed by the click above): both runs, Succeeded.
    ui.open(f"/workflows/{PRODUCT_NAMESPACE}")
    for name in (original_name, resubmitted_name):
        ui.element(f"//a[contains(@href, '/workflows/{PRODUCT_NAMESPACE}/{name}')]")
    ui.shot("workflows")


def test_submit_resume_workers_from_its_template_in_the_argo_ui(product: RealCluster, ui_server: str,
                                                                browser, screenshots: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    custom = client.CustomObjectsApi(product.admin)
    batch = client.BatchV1Api(product.admin)
    job_name = f"ui-test-{RUN}"
    batch.create_namespaced_job(TENANT, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name, "labels": {"kueue.x-k8s.io/queue-name": TENANT, TEST_LABEL[0]: TEST_LABEL[1]}},
        "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.invalid/train:1",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}})
    try:
        uid = batch.read_namespaced_job(job_name, TENANT).metadata.uid
        workload = eventually(lambda: next(iter(custom.list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", TENANT, "workloads",
            label_selector=f"kueue.x-k8s.io/job-uid={uid}")["items"]), None),
            timeout_s=60, what=f"Kueue's Workload for Job {job_name}")["metadata"]["name"]
        template = custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE,
                                                       "workflowtemplates", "gpuaas-resume-workers")
        described = {p["name"]: p for p in template["spec"]["arguments"]["parameters"]}

        ui = Ui(browser, ui_server, screenshots)
        ui.open(f"/workflow-templates/{PRODUCT_NAMESPACE}")
        ui.click(f"//a[contains(@href, '/workflow-templates/{PRODUCT_NAMESPACE}/gpuaas-resume-workers')]")
        ui.path_becomes(f"/workflow-templates/{PRODUCT_NAMESPACE}/gpuaas-resume-workers")
        ui.click(_button("Submit"))
        ui.element(f"{SIDE_PANEL}//h4[normalize-space()='Submit Workflow']")
        ui.in_view(f"{SIDE_PANEL}//h5")

        def field(name: str) -> str:
            return f"{SIDE_PANEL}//div[label[normalize-space()='{name}']]"
        # Every parameter is there, its description (the rendered template's) in the tooltip of its question mark.
        def tooltip_shows(name: str, text: str):
            def check(driver) -> bool:
                icon = driver.find_elements("xpath", f"{field(name)}//i[contains(@class, 'fa-question-circle')]")
                if not icon:
                    return False
                ActionChains(driver).move_to_element(icon[0]).perform()  # again each poll: the panel slides in
                return any(text in " ".join((tip.get_attribute("textContent") or "").split())
                           for tip in driver.find_elements("css selector", ".tippy-popper"))
            return check
        for name, parameter in described.items():
            ui.wait.until(tooltip_shows(name, " ".join(parameter["description"].split())),
                          message=f"expected the tooltip of parameter {name} to show {parameter['description']!r}")
        ActionChains(browser).move_to_element(ui.element(f"{SIDE_PANEL}//h4")).perform()  # tooltips away
        for name, value in (("namespace", TENANT), ("workload", workload), ("tenant", TENANT)):
            box = ui.element(f"{field(name)}//textarea")
            box.clear()
            box.send_keys(value)
        # dry-run is an enum: a select whose options are exactly the template's enum.
        ui.click(f"{field('dry-run')}//div[contains(@class, 'select__value')]")
        options = [o.get_attribute("textContent").strip() for o in browser.find_elements(
            "xpath", f"{field('dry-run')}{OPTION}")]
        assert sorted(options) == sorted(described["dry-run"]["enum"]), options
        ui.click(f"{field('dry-run')}{OPTION}[normalize-space()='true']")
        # Labels: a tags input (submit-from-ui=true already); this test's label is typed in, Enter adds it.
        ui.click(f"{SIDE_PANEL}//div[label[normalize-space()='Labels']]//div[contains(@class, 'tags-input')]")
        browser.switch_to.active_element.send_keys(f"{TEST_LABEL[0]}={TEST_LABEL[1]}\n")
        ui.element(f"{SIDE_PANEL}//span[contains(@class, 'tags-input__tag') and "
                   f"normalize-space()='{TEST_LABEL[0]}={TEST_LABEL[1]}']")
        # Leave the tags input first: on blur its empty input row folds away and the Submit button moves up,
        # so a click that blurs it lands where the button was (seen: nothing submitted).
        ui.click(f"{SIDE_PANEL}//label[normalize-space()='Labels']")
        ui.element(f"{SIDE_PANEL}//div[contains(@class, 'tags-input') and not(contains(@class, 'tags-input--focused'))]")
        ui.shot("submit-resume-workers")
        ui.click(_button("Submit", SIDE_PANEL))
        run_path = ui.path_becomes(f"/workflows/{PRODUCT_NAMESPACE}/")
        run_name = run_path.rstrip("/").split("/")[-1]

        run = _finished(custom, run_name)
        assert run["spec"]["workflowTemplateRef"] == {"name": "gpuaas-resume-workers"}
        assert run["metadata"]["labels"]["submit-from-ui"] == "true"
        assert run["metadata"]["labels"][TEST_LABEL[0]] == TEST_LABEL[1]
        parameters = _parameters(run)
        assert {k: parameters[k] for k in ("namespace", "workload", "dry-run", "tenant", "event", "target")} == {
            "namespace": TENANT, "workload": workload, "dry-run": "true", "tenant": TENANT, "event": "", "target": ""}
        assert run["status"]["phase"] == "Succeeded", run["status"].get("message")
        outputs = _outputs(run, "resume-workers")
        assert outputs["outcome"] == "no-op", outputs  # nothing gpuaas released: no record to resume from
        assert workload in outputs["record"]
        # No exit-handler pod: a run that succeeded recorded itself (record-outcome runs only on failure).
        assert not [n for n in run["status"]["nodes"].values() if n.get("templateName") == "record-outcome"
                    and n["type"] == "Pod"], run["status"]["nodes"]
        assert _archived(ui_server, run_name)["status"]["phase"] == "Succeeded"
        browser.refresh()
        ui.element(_button("RESUBMIT"))
        ui.element("//*[normalize-space()='resume-workers']")
        ui.shot("resume-workers-run")
    finally:
        batch.delete_namespaced_job(job_name, TENANT, propagation_policy="Background")
