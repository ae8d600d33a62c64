"""The course in JupyterLab, in a real headless Chromium: what a learner clicks, run and checked.

Lessons 01, 05 and 08 are opened in JupyterLab and run with Run ▸ Run All Cells; any error output
fails. Then every widget is driven like a learner would: each slider is dragged with the mouse and
a value is typed into its readout, another option of each dropdown is clicked, and after each
action the widget's output must change. Exercise 01 is run as handed out (the checker must say "not done
yet"), then a solution is typed into its stub cell and the checker must say "passed".
Screenshots go to build/browser/ (BROWSER_BUILD_DIR), with the server's and chromedriver's logs.

The server is started here, on a free port with its own token, in a copy of notebooks/ and
exercises/ (so running cells never writes into the checkout), with the course's JupyterLab settings
(lab-settings/overrides.json: no news pop-up) and empty Jupyter config, runtime and workspace
folders. Only that server and the kernels it started are stopped, whatever happens.

Run by ``make test-browser``, which installs Debian's chromium and chromium-driver and selenium
where they are missing (or prints "skipped: <reason>"). ``make test`` and a bare ``pytest`` leave
this folder out (``collect_ignore`` in tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed: run `make test-browser`")
psutil = pytest.importorskip("psutil")  # comes with ipykernel
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("BROWSER_BUILD_DIR", REPO / "build" / "browser"))
LESSONS = ["notebooks/01_formula.ipynb", "notebooks/05_gamma_reduction.ipynb", "notebooks/08_n_vs_block_exercise.ipynb"]
EXERCISE = "exercises/ex01_formula.ipynb"
SOLUTION_01 = "return [1, 7], [2, 0.5], 0.2, [0.4, 0.7]"  # mean(x²) = 25, r = 0.2: worked by hand
RUN_ALL_TIMEOUT_S = int(os.environ.get("BROWSER_RUN_TIMEOUT", "900"))  # one notebook, Run All to idle
WIDGET_TIMEOUT_S = 60  # one widget action until its output changes (08 runs two kernels per change)
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
# Flags that work headless as root on a machine with no display and no network beyond localhost.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000"]
WIDGET_CALL = re.compile(r"\binteract(ive)?\(")

if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip(
        "chromium or chromedriver not found: run `make test-browser`, which installs them", allow_module_level=True
    )

# The open notebook as JupyterLab's model sees it (window.jupyterapp: --LabApp.expose_app_in_browser).
NOTEBOOK_STATE_JS = """
const app = window.jupyterapp, panel = app && app.shell.currentWidget;
if (!panel || !panel.content || !panel.sessionContext || !panel.context.isReady) return null;
const session = panel.sessionContext.session, kernel = session && session.kernel;
const cells = panel.content.widgets.filter(c => c.model.type === 'code');
const prompt = c => (c.node.querySelector('.jp-InputPrompt') || {}).textContent || '';
return {
  path: panel.context.path,
  kernel: kernel ? kernel.status : null,
  cells: cells.length,
  running: cells.filter(c => c.model.executionState === 'running' || prompt(c).includes('*')).length,
  unrun: cells.filter(c => c.model.executionCount === null).length,
  errors: cells.flatMap((c, i) => c.model.outputs.toJSON().filter(o => o.output_type === 'error')
                                      .map(o => `code cell ${i + 1}: ${o.ename}: ${o.evalue}`)),
};
"""
# Text of the outputs of the first code cell whose source contains arguments[0].
CELL_OUTPUT_JS = """
const panel = window.jupyterapp.shell.currentWidget;
const cell = panel.content.widgets.find(
  c => c.model.type === 'code' && c.model.sharedModel.getSource().includes(arguments[0]));
return cell ? cell.node.querySelector('.jp-Cell-outputWrapper').textContent : null;
"""


@dataclass
class Lab:
    url: str
    token: str
    root: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"


def _api(lab_url: str, token: str, path: str, method: str = "GET") -> int:
    request = urllib.request.Request(f"{lab_url}{path}", method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def _stop(server: subprocess.Popen, url: str, token: str) -> None:
    """Stop the server started by the fixture and the kernels it started; no other process."""
    try:
        children = psutil.Process(server.pid).children(recursive=True)  # its kernels
    except psutil.NoSuchProcess:
        children = []
    if server.poll() is None:
        with contextlib.suppress(OSError):
            _api(url, token, "/api/shutdown", method="POST")  # shuts its kernels down too
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    for child in children:  # a kernel that outlived its server (psutil refuses a reused pid)
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on a free port with its own token, serving a copy of notebooks/ and exercises/."""
    root = tmp_path_factory.mktemp("course")
    for folder in ("notebooks", "exercises"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    home = tmp_path_factory.mktemp("jupyter")
    env = dict(os.environ,
               JUPYTER_CONFIG_DIR=str(home / "config"),  # no ~/.jupyter config
               JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(home / "user-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               FIGURES_DIR=os.environ.get("FIGURES_DIR", str(REPO / "build" / "figures")))
    port, token = _free_port(), secrets.token_hex(24)
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={root}", f"--LabApp.app_settings_dir={REPO / 'lab-settings'}",
               "--LabApp.expose_app_in_browser=True"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    BUILD.mkdir(parents=True, exist_ok=True)
    log_path = BUILD / "jupyterlab.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while True:
                if server.poll() is not None:
                    pytest.fail(f"JupyterLab exited with {server.returncode}:\n{_log_tail(log_path)}")
                with contextlib.suppress(OSError):
                    if _api(url, token, "/api/status") == 200:
                        break
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer on {url} within 120 s:\n{_log_tail(log_path)}")
                time.sleep(0.5)
            yield Lab(url, token, root)
        finally:
            _stop(server, url, token)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium through chromedriver, with a new empty profile."""
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(flag)
    BUILD.mkdir(parents=True, exist_ok=True)
    service = Service(executable_path=CHROMEDRIVER, log_output=str(BUILD / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, seconds: float, condition, message: str):
    try:
        return WebDriverWait(driver, seconds, poll_frequency=0.5).until(lambda d: condition())
    except TimeoutException:
        pytest.fail(f"{message} (waited {seconds:.0f} s)")


def open_notebook(driver, lab: Lab, path: str) -> None:
    """Open `path` in a workspace of its own and wait for its kernel to be idle."""
    workspace = re.sub(r"\W", "-", path)  # notebooks/01_formula.ipynb and exercises/ex01_formula.ipynb differ
    driver.get(f"{lab.url}/lab/workspaces/{workspace}/tree/{path}?token={lab.token}")

    def ready():
        state = driver.execute_script(NOTEBOOK_STATE_JS)
        if state is None:
            # Chromium 150's headless window never has focus (document.hasFocus() is false), so JupyterLab's
            # current widget stays unset until the notebook is clicked: click its tab, as a learner does.
            for tab in driver.find_elements(By.CSS_SELECTOR, ".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current"):
                tab.click()
        return state if state and state["path"] == path and state["kernel"] == "idle" else None

    _wait(driver, 180, ready, f"{path}: the notebook did not open with an idle kernel")


def news_popups(driver) -> list[str]:
    """JupyterLab's "notified about official Jupyter news?" toast; lab-settings/overrides.json turns it off."""
    toasts = [_text(driver, t) for t in driver.find_elements(By.CSS_SELECTOR, ".Toastify__toast")]
    return [t for t in toasts if "news" in t.lower()]


def click_menu(driver, menu: str, item: str) -> None:
    """Click a menu of the menu bar, then one of its items, as a learner does."""
    driver.find_element(By.XPATH, f"//li[contains(@class,'lm-MenuBar-item')][.//div[text()='{menu}']]").click()
    xpath = f"//li[contains(@class,'lm-Menu-item')][.//div[text()='{item}']]"
    entry = _wait(driver, 10, lambda: [e for e in driver.find_elements(By.XPATH, xpath) if e.is_displayed()],
                  f"menu {menu} has no item {item!r}")
    entry[0].click()


def run_all(driver, path: str) -> dict:
    """Run ▸ Run All Cells, then wait until the kernel is idle with no cell running or queued."""
    click_menu(driver, "Run", "Run All Cells")
    started = time.monotonic()
    settled = []

    def finished():
        state = driver.execute_script(NOTEBOOK_STATE_JS)
        if state["kernel"] in ("dead", "unknown"):
            pytest.fail(f"{path}: the kernel died during Run All ({state})")
        # bool(): `errors` is a list, and a non-empty list would never equal True below, so a run that stopped
        # at an error would wait out the whole timeout instead of reporting the error
        done = bool(state["kernel"] == "idle" and state["running"] == 0 and (state["unrun"] == 0 or state["errors"]))
        settled.append(done)
        return state if done and settled[-3:] == [True] * 3 else None  # idle for three polls in a row

    state = _wait(driver, RUN_ALL_TIMEOUT_S, finished, f"{path}: Run All did not finish")
    state["seconds"] = round(time.monotonic() - started, 1)
    return state


def _text(driver, element) -> str:
    return driver.execute_script("return arguments[0].textContent;", element).strip()


def _changed(driver, output, before: str, action: str) -> str:
    """Wait until the widget's output differs from `before`; it must not be a traceback or other stderr."""
    text = _wait(driver, WIDGET_TIMEOUT_S, lambda: (text := _text(driver, output)) != before and text,
                 f"{action}: the widget's output did not change from {before!r}")
    stderr = output.find_elements(By.CSS_SELECTOR, '[data-mime-type="application/vnd.jupyter.stderr"]')
    assert not stderr, f"{action}: the widget shows an error: {_text(driver, stderr[0])[:500]}"
    return text


def _number(readout_text: str) -> float:
    return float(readout_text.replace("\u2212", "-").replace(",", ""))  # ipywidgets writes "−2.00" (U+2212)


def _drive_slider(driver, control, output, name: str) -> list[str]:
    """Drag the handle a quarter of the track towards the middle, then type a value into the readout."""
    handle = control.find_element(By.CSS_SELECTOR, ".noUi-handle")
    track = control.find_element(By.CSS_SELECTOR, ".noUi-target")
    readout = control.find_element(By.CSS_SELECTOR, ".widget-readout")
    low, high = (float(handle.get_attribute(a)) for a in ("aria-valuemin", "aria-valuemax"))
    towards_middle = 1 if handle.location["x"] < track.location["x"] + track.size["width"] / 2 else -1
    before, value_before = _text(driver, output), _text(driver, readout)
    offset = towards_middle * track.size["width"] // 4
    ActionChains(driver).click_and_hold(handle).move_by_offset(offset, 0).release().perform()
    dragged = _changed(driver, output, before, f"dragging {name} from {value_before}")
    value_dragged = _text(driver, readout)
    assert value_dragged != value_before, f"dragging {name}: the readout stayed at {value_before}"

    is_int = "." not in value_before
    typed = low + 0.3 * (high - low)
    typed = round(typed) if is_int else round(typed * 4) / 4  # ints, or quarters (01's step)
    if typed == _number(value_dragged):
        typed = round(low + 0.7 * (high - low)) if is_int else round((low + 0.7 * (high - low)) * 4) / 4
    typed = f"{typed:g}"
    readout.click()
    (ActionChains(driver).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL)
     .send_keys(typed, Keys.ENTER).perform())
    _changed(driver, output, dragged, f"typing {typed} into {name}'s readout")
    assert _number(_text(driver, readout)) == float(typed), (
        f"typed {typed} into {name}, readout shows {_text(driver, readout)}"
    )
    return [f"{name}: dragged {value_before} → {value_dragged}, typed {typed}"]


def _drive_dropdown(driver, control, output, name: str) -> list[str]:
    """Pick another option of the dropdown with the mouse (selenium's Select clicks the <option>)."""
    select = control.find_element(By.TAG_NAME, "select")
    options = [o.text for o in select.find_elements(By.TAG_NAME, "option")]
    current = driver.execute_script("return arguments[0].selectedOptions[0].text;", select)
    choice = options[(options.index(current) + max(1, len(options) // 2)) % len(options)]
    before = _text(driver, output)
    Select(select).select_by_visible_text(choice)
    _changed(driver, output, before, f"choosing {choice} in {name}")
    chosen = driver.execute_script("return arguments[0].selectedOptions[0].text;", select)
    assert chosen == choice, f"chose {choice} in {name}, it shows {chosen}"
    return [f"{name}: {current} → {choice}"]


def drive_widget(driver, interact, stem: str, k: int) -> list[str]:
    """Drive every control of one `interactive`; each action must change its output."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", interact)
    output = interact.find_element(By.CSS_SELECTOR, ".widget-output")
    _wait(
        driver, WIDGET_TIMEOUT_S, lambda: _text(driver, output), f"{stem} widget {k}: shows no output before any change"
    )
    controls = interact.find_elements(By.CSS_SELECTOR, ":scope > .widget-slider, :scope > .widget-dropdown")
    assert controls, f"{stem} widget {k}: no slider or dropdown found"
    done, driven = [], set()
    for control in controls:  # in order: a dropdown first may show sliders that were hidden (01's x2, g2)
        if not control.is_displayed():
            continue
        name = _text(driver, control.find_element(By.CSS_SELECTOR, ".widget-label")) or f"control {len(driven)}"
        kind = _drive_dropdown if "widget-dropdown" in control.get_attribute("class") else _drive_slider
        done += kind(driver, control, output, name)
        driven.add(control.id)
    never_shown = [c for c in controls if c.id not in driven]
    assert not never_shown, f"{stem} widget {k}: {len(never_shown)} control(s) never shown, so never driven"
    interact.screenshot(str(BUILD / f"{stem}-widget{k}.png"))
    return done


def _expected_widgets(lab: Lab, path: str) -> int:
    cells = json.loads((lab.root / path).read_text())["cells"]
    return sum(len(WIDGET_CALL.findall("".join(c["source"]))) for c in cells if c["cell_type"] == "code")


@pytest.fixture(autouse=True)
def _one_kernel_at_a_time(lab):
    """After each test, shut down the kernels it started on this server (the next notebook gets the CPU)."""
    yield
    request = urllib.request.Request(f"{lab.url}/api/kernels", headers={"Authorization": f"token {lab.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        kernels = json.load(response)
    for kernel in kernels:
        with contextlib.suppress(OSError):
            _api(lab.url, lab.token, f"/api/kernels/{kernel['id']}", method="DELETE")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: Path(p).stem)
def test_lesson_runs_clean_and_every_widget_answers(lab, browser, path):
    stem = Path(path).stem
    open_notebook(browser, lab, path)
    state = run_all(browser, path)
    browser.save_screenshot(str(BUILD / f"{stem}-ran.png"))
    assert not news_popups(browser), f"{path}: JupyterLab asks about news: {news_popups(browser)}"
    assert not state["errors"], f"{path}: error output after Run All: {state['errors']}"
    assert state["unrun"] == 0, f"{path}: {state['unrun']} of {state['cells']} code cells never ran"
    print(f"{path}: {state['cells']} code cells ran in {state['seconds']} s")

    interacts = browser.find_elements(By.CSS_SELECTOR, ".jp-Notebook .widget-interact")
    expected = _expected_widgets(lab, path)
    assert len(interacts) == expected, (
        f"{path}: {expected} interact(ive) call(s) in the source, {len(interacts)} widget(s) shown"
    )
    for k, interact in enumerate(interacts, start=1):
        for line in drive_widget(browser, interact, stem, k):
            print(f"  widget {k}: {line}")
    browser.save_screenshot(str(BUILD / f"{stem}-widgets.png"))


def test_exercise_feedback_turns_to_passed_when_solved(lab, browser):
    stem = Path(EXERCISE).stem
    open_notebook(browser, lab, EXERCISE)
    state = run_all(browser, EXERCISE)
    assert not state["errors"], f"{EXERCISE}: error output after Run All: {state['errors']}"
    assert state["unrun"] == 0, f"{EXERCISE}: {state['unrun']} of {state['cells']} code cells never ran"
    feedback = browser.execute_script(CELL_OUTPUT_JS, "check_by_hand(my_row)")
    assert "not done yet" in feedback, f"{EXERCISE}, as handed out: {feedback!r}"

    stub = [c for c in browser.find_elements(By.CSS_SELECTOR, ".jp-CodeCell")
            if "raise NotImplementedError()" in _text(browser, c.find_element(By.CSS_SELECTOR, ".jp-InputArea"))]
    assert len(stub) == 1, f"{EXERCISE}: {len(stub)} stub cells"
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", stub[0])
    stub[0].find_element(By.CSS_SELECTOR, ".cm-content").click()
    (ActionChains(browser).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL)
     .send_keys("def my_row():", Keys.ENTER, SOLUTION_01)  # the editor indents the body itself
     .key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT)  # run it; the checker cell is next
     .key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform())  # run the checker
    passed = _wait(browser, WIDGET_TIMEOUT_S,
                   lambda: ((text := browser.execute_script(CELL_OUTPUT_JS, "check_by_hand(my_row)"))
                            and "passed" in text and text),
                   f"{EXERCISE}: the checker did not say 'passed' after the solution was typed")
    browser.save_screenshot(str(BUILD / f"{stem}-solved.png"))
    assert "r = 0.2 and y = [0.4, 0.7]" in passed, passed
    state = browser.execute_script(NOTEBOOK_STATE_JS)
    assert not state["errors"], f"{EXERCISE}: error output after typing the solution: {state['errors']}"
