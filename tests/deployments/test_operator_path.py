"""The operator path: a real Prefect server, the deployments of prefect.yaml, a worker, the UI.

One stack per module (``deployments/server.py``, as ``make server`` starts
it) on a free loopback port with its own PREFECT_HOME. The nightly
deployment runs one night of the demo's series; regrades are started through the API and
through the UI in Debian's chromium (no browser download), and each must
land a new grader generation in the registry.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from deployments.server import operator_stack
from registry import Registry, Role
from tests.helpers import DEMO, copy_demo, install_grader

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOT_ENV = "TRIBUNAL_SCREENSHOTS"
"""The folder where the browser tests save their screenshots; unset, a temporary one (`make screenshot`: docs/)."""
RUN_TIMEOUT = 300
STACK_ATTEMPTS = 3


@contextmanager
def started_stack(home: Path, target: dict[str, str]) -> Iterator[str]:
    """``operator_stack`` on a port the kernel picked; if another process takes it before the server binds it
    (``prefect server start`` cannot be handed a bound socket), start again on another port."""
    for attempt in range(STACK_ATTEMPTS):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        with ExitStack() as stack:
            try:
                url = stack.enter_context(operator_stack(home / f"try-{attempt}", port, target, poll_seconds=1))
            except (SystemExit, RuntimeError):
                continue
            yield url
            return
    raise RuntimeError(f"the Prefect server found no free port in {STACK_ATTEMPTS} tries")


def api_call(api: str, call: Any) -> Any:
    """Run ``call(client)`` against this module's server, whatever Prefect API the session uses elsewhere."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def go() -> Any:
        async with get_client() as client:
            return await call(client)

    with temporary_settings(updates={PREFECT_API_URL: api}):
        return asyncio.run(go())


def run_deployment(api: str, name: str, parameters: dict[str, Any] | None = None) -> Any:
    """Start a deployment run through the Prefect client and wait for its final state."""
    from prefect.deployments import run_deployment as start
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api}):
        return start(name, parameters=parameters, timeout=RUN_TIMEOUT, poll_interval=1)


NIGHT = "2026-12-03"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Server + work pool + deployments + worker, and one night of the demo run by the nightly deployment.

    The night is given as a parameter (not waited for): the request carries every
    field, since Prefect merges parameters only at the top level.
    """
    root = tmp_path_factory.mktemp("operator")
    spec = copy_demo(root / "exp")
    registry = str(root / "registry")
    plans = root / "plans"
    plan = plans / f"demo-{NIGHT}.json"
    config = spec.parent / "tribunal.toml"
    target = {"TRIBUNAL_EXPERIMENT": str(spec), "TRIBUNAL_PLAN": str(plan), "TRIBUNAL_REGISTRY": registry,
              "TRIBUNAL_CONFIG": str(config)}
    with started_stack(root / "prefect-home", target) as url:
        request = {"experiment_path": str(spec), "registry_url": registry, "config_path": str(config),
                   "date": NIGHT, "concurrency": 2, "plan_dir": str(plans)}
        nightly = run_deployment(f"{url}/api", "nightly/nightly", {"request": request})
        assert nightly.state.is_completed(), nightly.state
        yield {"url": url, "api": f"{url}/api", "plan": str(plan), "registry": registry, "config": config,
               "after_nightly": generations(registry), "nightly": nightly}


def generations(registry: str) -> list[tuple[int, str]]:
    """(generation, grader version) of every grader result, in manifest order."""
    return [(e.generation or 0, e.grader_version or "")
            for e in Registry.open(registry).entries(role=Role.GRADER_RESULT)]


def own_copy(stack: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The demo and the stack's registry copied for one test, so that test may change its grader or config and
    no other test sees it, whatever the order."""
    spec = copy_demo(tmp_path / "exp")
    registry = tmp_path / "registry"
    shutil.copytree(stack["registry"], registry)
    return {"spec": spec, "config": spec.parent / "tribunal.toml", "registry": str(registry)}


def next_grader(config: Path, registry: str, label: str) -> tuple[int, str]:
    """Install a grader with new bytes and a new version; return the generation and version a regrade must add.

    ``label`` keeps each test's version, and so its run's name, its own.
    """
    generation = max(g for g, _ in generations(registry)) + 1
    version = f"{label}-{generation}"
    source = (DEMO / "graders" / "run_tests.py").read_text() + f"\n# {version}\n"
    install_grader(config, source, version)
    return generation, version


def test_the_nightly_schedule_is_on_the_server(stack: dict[str, Any]) -> None:
    deployment = api_call(stack["api"], lambda c: c.read_deployment_by_name("nightly/nightly"))
    [schedule] = deployment.schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone, schedule.active) == ("0 2 * * *", "UTC", True)
    assert deployment.parameters["request"]["registry_url"] == stack["registry"]
    assert deployment.parameters["request"]["experiment_path"].endswith("experiment.toml")
    assert "date" not in deployment.parameters["request"]  # a scheduled run is the night it was scheduled for
    assert len(stack["after_nightly"]) == 10 and {g for g, _ in stack["after_nightly"]} == {1}  # as the fixture saw it
    run = api_call(stack["api"], lambda c: c.read_flow_run(stack["nightly"].id))
    assert run.name == f"nightly-demo-{NIGHT}"
    keys = {a.key for a in api_call(stack["api"], lambda c: c.read_artifacts()) if a.flow_run_id == run.id}
    assert {"night-demo", "pass-rates-demo", "report-demo"} <= keys
    assert Registry.open(stack["registry"]).entries(role="series-record")


def test_regrade_started_through_the_api_lands_a_generation(stack: dict[str, Any], tmp_path: Path) -> None:
    """An operator regrades through the API: a new grader version lands one generation per attempt."""
    own = own_copy(stack, tmp_path)
    generation, version = next_grader(own["config"], own["registry"], "api")
    request = {"plan_path": stack["plan"], "registry_url": own["registry"], "config_path": str(own["config"]),
               "profile": "unit-tests", "concurrency": 2}
    run = run_deployment(stack["api"], "regrade/regrade", {"request": request})
    assert run.state.is_completed(), run.state
    assert generations(own["registry"]).count((generation, version)) == 10
    assert api_call(stack["api"], lambda c: c.read_flow_run(run.id)).name == f"regrade-demo-{version}"
    keys = {a.key for a in api_call(stack["api"], lambda c: c.read_artifacts())
            if a.flow_run_id == run.id}
    assert {"regrade-demo", "pass-rates-demo", "report-demo"} <= keys


def test_a_bad_parameter_is_refused_by_the_server(stack: dict[str, Any]) -> None:
    """A request complete in every field but ``concurrency = 0`` is refused by the server, naming that bound.

    Prefect merges parameters only at the top level, so the request must carry
    every field for the bound to be what fails (it answers 409, not 422).
    """
    from prefect.exceptions import PrefectHTTPStatusError

    request = {"plan_path": stack["plan"], "registry_url": stack["registry"], "config_path": str(stack["config"]),
               "profile": "unit-tests", "concurrency": 0}
    with pytest.raises(PrefectHTTPStatusError, match=r"Validation failed for field 'request\.concurrency'\. "
                       r"Failure reason: 0 is less than the minimum of 1"):
        run_deployment(stack["api"], "regrade/regrade", {"request": request})


def appear(page: Any, locator: Any) -> Any:
    """Wait for ``locator`` to show, reloading the page as an operator would; return its first match."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while not locator.first.is_visible():
        assert time.monotonic() < deadline, f"{locator} did not appear on {page.url}"
        page.wait_for_timeout(2000)
        page.reload()
        page.wait_for_load_state("networkidle")
    return locator.first


def show_tab(page: Any, tab: str, locator: Any) -> None:
    """Open a tab of the run page until ``locator`` shows there.

    The page keeps what it fetched while the run was still going; reloading
    before each try shows what the run wrote when it finished.
    """
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        page.reload()
        page.wait_for_load_state("networkidle")
        page.get_by_text(tab, exact=True).first.click()
        page.wait_for_timeout(2000)
        if locator.first.is_visible():
            return
        assert time.monotonic() < deadline, f"{locator} did not appear in tab {tab} of {page.url}"


@contextmanager
def browser_page() -> Iterator[Any]:
    """A page of Debian's chromium, as an operator's browser."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "chromium is missing: `make test` installs Debian's chromium and chromium-driver"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1100})
        finally:
            browser.close()


def screenshot(page: Any, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / name))


def test_regrade_started_from_the_ui_lands_a_generation(stack: dict[str, Any], tmp_path: Path) -> None:
    """An operator regrades from the UI's custom-run form: a new grader version lands one generation per attempt."""
    own = own_copy(stack, tmp_path)
    generation, version = next_grader(own["config"], own["registry"], "ops")
    with browser_page() as page:
        page.goto(f"{stack['url']}/deployments")
        page.get_by_role("link", name="regrade", exact=True).first.click()
        page.wait_for_url("**/deployments/deployment/**")
        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_text("Custom run", exact=True).click()
        page.wait_for_url("**/run**")
        fill = {"plan.json written by": stack["plan"], "A directory or s3://bucket/prefix.": own["registry"],
                "tribunal.toml; empty:": str(own["config"])}
        for description, value in fill.items():
            page.get_by_text(description).first.locator("xpath=following::textarea[1]").fill(value)
        profile = page.get_by_text("Grade every attempt with this profile")
        profile.locator("xpath=following::button[normalize-space(.)='str'][1]").click()
        profile.locator("xpath=following::textarea[1]").fill("unit-tests")
        page.get_by_role("button", name="Submit", exact=True).click()
        page.wait_for_url("**tab=Runs")
        appear(page, page.get_by_role("link", name=f"regrade-demo-{version}")).click()
        page.wait_for_url("**/runs/flow-run/**")
        appear(page, page.get_by_text("Completed", exact=True))
        show_tab(page, "Artifacts", page.get_by_text("pass-rates-demo"))
        screenshot(page, tmp_path, "operator-regrade.png")
    assert generations(own["registry"]).count((generation, version)) == 10


def test_a_nightly_run_page_shows_the_pipeline_stages(stack: dict[str, Any], tmp_path: Path) -> None:
    """The operator opens last night's run: its task runs are the night's stages, named as the design names them."""
    with browser_page() as page:
        page.goto(f"{stack['url']}/runs/flow-run/{stack['nightly'].id}")
        appear(page, page.get_by_text(f"nightly-demo-{NIGHT}"))
        for name in ("freeze-night", "execute-candidates", "grade", "seal", "compare-nights"):
            show_tab(page, "Task Runs", page.get_by_text(f"{name}-", exact=False))
        assert not page.get_by_text("evaluate-attempts", exact=False).first.is_visible()
        screenshot(page, tmp_path, "nightly-run.png")


def test_a_regression_night_fails_its_run_and_the_alert_automation_fires(
        stack: dict[str, Any], listener: tuple[int, list[bytes]], tmp_path: Path) -> None:
    """The operator's alert path: a notification block, the automation of ``deployments/alerts.py``, a night
    whose candidate broke a canary case -> the deployment run is Failed and the block's webhook is called."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from deployments.alerts import AUTOMATION_NAME, install_alert

    port, reached = listener
    with temporary_settings(updates={PREFECT_API_URL: stack["api"]}):
        CustomWebhookNotificationBlock(name="nightly", url=f"http://127.0.0.1:{port}/nightly-failed").save(
            "nightly-alerts", overwrite=True)
        install_alert("custom-webhook/nightly-alerts")
        install_alert("custom-webhook/nightly-alerts")  # again: replaces, never duplicates
    assert len(api_call(stack["api"], lambda c: c.read_automations_by_name(AUTOMATION_NAME))) == 1
    own = own_copy(stack, tmp_path)
    config, spec = own["config"], own["spec"]
    config.write_text(config.read_text() + '\n[series.regression]\ncanaries = ["off-by-one"]\n')
    fixer = spec.parent / "agents" / "fixer.py"
    broken = {"import CORRECT, apply": "import CORRECT, WRONG, apply",
              "apply(CORRECT)": "apply({**CORRECT, 'mathutil.py': WRONG['mathutil.py']})"}  # off-by-one breaks
    source = fixer.read_text()
    for old, new in broken.items():
        source = source.replace(old, new)
    fixer.write_text(source)
    request = {"experiment_path": str(spec), "registry_url": own["registry"], "config_path": str(config),
               "date": "2026-12-04", "concurrency": 2, "plan_dir": None}
    night = run_deployment(stack["api"], "nightly/nightly", {"request": request})
    assert night.state.is_failed(), night.state
    assert "canary off-by-one: agent-fixer #0 went resolved -> grader_failure" in (night.state.message or "")
    deadline = time.monotonic() + 120
    while not any(b"/nightly-failed" in first for first in reached):
        assert time.monotonic() < deadline, f"the automation sent nothing (saw {reached})"
        time.sleep(1)
