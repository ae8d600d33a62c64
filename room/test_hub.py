"""`make test-hub` (run by room/test_hub.sh): a room of learners on this host, end to end, on loopback.

Every step prints one line with its time. Everything the test creates is named rmsnorm-hubtest-<pid>-*
and labelled org.rmsnorm.room=hubtest-<pid>; at the end it removes what carries that label, and
only that: a decoy container and volume named like the room's, but without its label, must survive
the clean-up (then the test removes them by their ids).

Steps:
 1. refusals of the launcher, before anything starts: GPUs asked for without the NVIDIA Container
    Toolkit; a course image that does not exist (the message says how to build it); a default admin
    password;
 2. the hub starts (room/launch.py, as `make room` runs it) on 127.0.0.1 and not on another address;
    a second launch of the same room is refused (already running), and another room on the same port
    is refused (port in use); `jupyterhub -f room/jupyterhub_config.py` run by hand on a state folder
    with an empty cookie secret refuses to start; every file of the state folder (the database too) is mode 600;
 3. the admin's password logs in; three learners are created through the REST API; each logs in with
    the initial password the hub recorded; two start their server through the REST API, the third
    through the login form as a browser does (cookies, _xsrf, OAuth redirects, JupyterLab's page); each
    container runs with no-new-privileges;
 4. the hub's login page (with sign-up) and JupyterLab's page through the hub; through each learner's
    own server, a kernel runs `python -m rmsnorm_course.check_env` (as that learner, in that learner's
    container, with its memory and CPU limits); solutions/, INSTRUCTORS.md and tests/ are withheld: not in
    the file browser's listing, 404 through the contents API, and a kernel walking the whole container
    finds no readable copy (the image's /opt/rmsnorm-withheld refuses it);
 5. learner A's token: 403 on learner B's server and on the admin API; five wrong passwords lock a
    learner out (the right one is refused too) and the hub logs it; a learner who signed up is a hub
    user (on /hub/admin) once the admin approves them at /hub/authorize, before their first login;
 6. a file A writes survives a restart of A's server (a new container, the same volume);
 7. a fourth learner whose volume is unreadable: the container stops during start-up (room/room-start),
    the hub reports it to that learner with the last lines of the container's log, and the other
    learners' servers keep working;
 8. room/roomctl release-solutions, with A's server running and B's stopped: A's JupyterLab shows the
    files and A's kernel reads them; a fifth learner, added after the release, starts with the course and
    the released files; B's volume has them (checked by collect in the next step);
 9. the hub stops (room/roomctl down): its containers go, the learners' volumes stay; room/roomctl
    collect copies A's work out of A's volume, and B's with the released solutions;
10. the hub restarts with a certificate (TLS on the room's port, plain HTTP no longer served) and a
    20 s idle timeout: A's work is still there, and the idle culler stops A's server once idle;
11. clean-up by label (room/roomctl purge --yes, then a sweep of what is left); the decoys are untouched.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker
import requests
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
WORK = CHECKOUT / "build" / "test-hub"
PY = sys.executable
LABEL = "org.rmsnorm.room"
ROOM = f"hubtest-{os.getpid()}"
COURSE_IMAGE = os.environ.get("TEST_DOCKER_IMAGE", "rmsnorm-triton:standin")
LEARNERS = ["alice", "bob", "carol"]
BROKEN = "dave"
LATE = "erin"      # added after the solutions are released
SIGNUP = "frank"   # signs up; approved by the admin
WITHHELD = ("solutions", "INSTRUCTORS.md", "tests")
T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"test-hub: {msg}", flush=True)


class Failed(Exception):
    pass


def check(cond, msg: str) -> None:
    if not cond:
        raise Failed(msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Step:
    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        self.t = time.monotonic()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            say(f"{self.name} ({time.monotonic() - self.t:.0f} s)")


class Hub:
    """The room's hub, started as `make room` starts it (room/launch.py), logging to a file."""

    def __init__(self, env: dict, log: Path):
        self.env, self.log = env, log
        self.proc = None

    def start(self, **overrides) -> None:
        env = {**self.env, **overrides}
        self.logf = open(self.log, "a", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        self.logf.write(f"\n===== hub start {time.strftime('%H:%M:%S')} {overrides}\n")
        self.logf.flush()
        self.proc = subprocess.Popen([PY, str(HERE / "launch.py")], env=env, cwd=CHECKOUT,
                                     stdout=self.logf, stderr=subprocess.STDOUT, start_new_session=True)
        scheme = "https" if env.get("ROOM_CERT") else "http"
        url = f"{scheme}://127.0.0.1:{env['ROOM_PORT']}/hub/api/"
        for _ in range(240):
            if self.proc.poll() is not None:
                raise Failed(f"the hub exited with status {self.proc.returncode} while starting:\n{self.tail()}")
            try:
                if requests.get(url, timeout=2, verify=env.get("ROOM_CERT") or True).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise Failed(f"the hub did not answer {url} within 120 s:\n{self.tail()}")

    def stop(self, roomctl_env: dict | None = None) -> None:
        """Stop the hub: with `room/roomctl down` (as an instructor would) when given its env, else SIGTERM."""
        if self.proc and self.proc.poll() is None:
            if roomctl_env is not None:
                r = subprocess.run([PY, str(HERE / "roomctl.py"), "down"], env=roomctl_env, capture_output=True,
                                   text=True, timeout=180)
                check(
                    r.returncode == 0 and "hub stopped" in r.stdout,
                    f"roomctl down: {r.returncode} {r.stdout} {r.stderr}",
                )
            else:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.proc:
            self.logf.close()
        self.proc = None

    def tail(self, n: int = 30) -> str:
        lines = [line for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines()
                 if not line.startswith("WARNING: Location")]
        return "\n".join(lines[-n:])

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


class Api:
    def __init__(self, base: str, token: str, verify: str | bool = True):
        self.base, self.token, self.verify = base, token, verify

    def __call__(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Authorization": f"token {self.token}", **kwargs.pop("headers", {})}
        return requests.request(method, self.base + path, headers=headers, timeout=kwargs.pop("timeout", 60),
                                verify=self.verify, **kwargs)


def login_token(base: str, name: str, password: str) -> str:
    """Log in through the hub's REST API with a password (NativeAuthenticator checks it): a new token."""
    r = requests.post(f"{base}hub/api/users/{name}/tokens", json={"auth": {"username": name, "password": password},
                                                                   "note": "make test-hub"}, timeout=30)
    check(r.status_code in (200, 201), f"{name} could not log in with the password: {r.status_code} {r.text[:200]}")
    return r.json()["token"]


def browser_login(base: str, name: str, password: str) -> None:
    """The login form with its _xsrf field and cookies, the spawn it starts, then /user/<name>/lab (OAuth)."""
    s = requests.Session()
    r = s.get(f"{base}hub/login", timeout=30)
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', r.text)
    check(r.status_code == 200 and xsrf, f"the login page: {r.status_code}")
    r = s.post(f"{base}hub/login", data={"username": name, "password": password, "_xsrf": xsrf.group(1)}, timeout=60)
    check(
        r.status_code == 200 and "/hub/" in r.url and "login" not in r.url,
        f"{name}'s login form: {r.status_code} {r.url}",
    )
    for _ in range(240):
        r = s.get(f"{base}user/{name}/lab", timeout=30)
        if r.status_code == 200 and "<title>JupyterLab</title>" in r.text:
            return
        time.sleep(0.5)
    raise Failed(f"{name}'s browser session did not reach JupyterLab: {r.status_code} {r.url}")


def form_session(base: str, name: str, password: str) -> requests.Session:
    """A browser's session logged in through the hub's login form (its _xsrf field and cookies)."""
    s = requests.Session()
    r = s.get(f"{base}hub/login", timeout=30)
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', r.text)
    check(r.status_code == 200 and xsrf, f"the login page: {r.status_code}")
    r = s.post(f"{base}hub/login?next=/hub/home", data={"username": name, "password": password,
                                                         "_xsrf": xsrf.group(1)}, timeout=60)
    check(r.status_code == 200 and "login" not in r.url, f"{name}'s login form: {r.status_code} {r.url}")
    return s


def wait_server(api: Api, name: str, *, running: bool, timeout: float = 150) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = api("GET", f"hub/api/users/{name}")
        check(r.status_code == 200, f"GET user {name}: {r.status_code} {r.text[:200]}")
        server = (r.json().get("servers") or {}).get("")
        if running and server and server.get("ready"):
            return server
        if not running and not server:
            return {}
        time.sleep(0.5)
    raise Failed(f"{name}'s server did not become {'ready' if running else 'stopped'} within {timeout:.0f} s")


def progress_events(api: Api, name: str, timeout: float = 150) -> list[dict]:
    """The spawn's progress stream (what the hub's spawn page shows), until its last event."""
    events = []
    with api("GET", f"hub/api/users/{name}/server/progress", stream=True, timeout=timeout,
             headers={"Accept": "text/event-stream"}) as r:
        check(r.status_code == 200, f"progress of {name}: {r.status_code} {r.text[:200]}")
        for line in r.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                event = json.loads(line[5:])
                events.append(event)
                if event.get("failed") or event.get("ready"):
                    break
    return events


async def _run_cell(port: int, user: str, token: str, code: str, timeout: float) -> tuple[str, str]:
    base = f"http://127.0.0.1:{port}/user/{user}/api"
    auth = {"Authorization": f"token {token}"}
    r = requests.post(f"{base}/kernels", json={"name": "python3"}, headers=auth, timeout=60)
    check(r.status_code == 201, f"{user}: starting a kernel: {r.status_code} {r.text[:200]}")
    kernel = r.json()["id"]
    try:
        ws = await websocket_connect(HTTPRequest(f"ws://127.0.0.1:{port}/user/{user}/api/kernels/{kernel}/channels",
                                                 headers=auth, connect_timeout=30))
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": user, "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }))
        out, status, idle = [], None, False
        deadline = time.monotonic() + timeout
        while not (status and idle):
            left = deadline - time.monotonic()
            check(left > 0, f"{user}: the cell did not finish within {timeout:.0f} s; output so far: {''.join(out)}")
            raw = await asyncio.wait_for(ws.read_message(), left)
            check(raw is not None, f"{user}: the kernel's websocket closed; output so far: {''.join(out)}")
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "stream":
                out.append(msg["content"]["text"])
            elif kind == "error":
                out.append("\n".join(msg["content"]["traceback"]))
            elif kind == "execute_reply":
                status = msg["content"]["status"]
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        ws.close()
        return status, "".join(out)
    finally:
        requests.delete(f"{base}/kernels/{kernel}", headers=auth, timeout=30)


def run_cell(port, user, token, code, timeout=240):
    return asyncio.run(_run_cell(port, user, token, code, timeout))


CHECK_ENV_CELL = """
import os, subprocess, sys
r = subprocess.run([sys.executable, "-m", "rmsnorm_course.check_env"], capture_output=True, text=True)
print(r.stdout + r.stderr)
print("user:", os.environ.get("JUPYTERHUB_USER"), "| exit:", r.returncode)
"""


WITHHELD_CELL = """
import os
found = []
for root, dirs, files in os.walk("/"):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    for n in files:
        if n == "INSTRUCTORS.md" or (os.path.basename(root) == "solutions" and n.endswith(".ipynb")):
            try:
                open(os.path.join(root, n), "rb").read(1)
                found.append(os.path.join(root, n))
            except OSError:
                pass
try:
    open("/opt/rmsnorm-withheld/INSTRUCTORS.md").read(1)
    print("withheld folder: READ")
except PermissionError:
    print("withheld folder: denied")
print("uid:", os.getuid(), "| readable:", found)
"""


def roomctl(env: dict, *args: str) -> str:
    r = subprocess.run([PY, str(HERE / "roomctl.py"), *args], env=env, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"room/roomctl {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    key.chmod(0o600)
    return cert, key


def launcher_refuses(env: dict, expected: list[str], **overrides) -> str:
    r = subprocess.run([PY, str(HERE / "launch.py")], env={**env, **overrides}, cwd=CHECKOUT,
                       capture_output=True, text=True, timeout=600)
    err = r.stderr.strip()
    for line in r.stdout.splitlines():
        if line.startswith("room: built"):
            say(f"   {line}")
    check(
        r.returncode == 2, f"the launcher with {overrides} exited {r.returncode}, not 2 (refused):\n{r.stdout}\n{err}"
    )
    for words in expected:
        check(words.lower() in err.lower(), f"the launcher's refusal with {overrides} lacks {words!r}:\n{err}")
    return err.splitlines()[0]


def main() -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    client = docker.from_env(timeout=120)
    state = Path(tempfile.mkdtemp(prefix=f"rmsnorm-{ROOM}-"))   # /tmp: outside the checkout
    other_state = Path(tempfile.mkdtemp(prefix=f"rmsnorm-{ROOM}-b-"))
    port, api_port, hub_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOM_")}
    env.update(ROOM_NAME=ROOM, ROOM_STATE_DIR=str(state), ROOM_PORT=str(port), ROOM_API_PORT=str(api_port),
               ROOM_HUB_PORT=str(hub_port), ROOM_IMAGE=COURSE_IMAGE, ROOM_IDLE_TIMEOUT="3600",
               ROOM_MEM="2G", ROOM_CPUS="1", ROOM_ADMIN="instructor")
    base = f"http://127.0.0.1:{port}/"
    log = WORK / "hub.log"
    log.write_text("", encoding="utf-8")
    hub = Hub(env, log)
    flt = {"label": f"{LABEL}={ROOM}"}
    decoy_labels = {"org.rmsnorm.test-hub.decoy": ROOM}
    decoy_volume = client.volumes.create(f"rmsnorm-{ROOM}-work-decoy", labels=decoy_labels)
    decoy = client.containers.create(COURSE_IMAGE, command=["true"], name=f"rmsnorm-{ROOM}-decoy",
                                     labels=decoy_labels, network_mode="none")
    status = 1
    try:
        with Step("1. refused before anything starts: GPUs without the NVIDIA Container Toolkit, a missing image, "
                  "a default admin password"):
            if "nvidia" in (client.info().get("Runtimes") or {}) or shutil.which("nvidia-container-runtime-hook"):
                say("   (this host has the NVIDIA Container Toolkit: the GPU refusal is not checked here)")
            else:
                launcher_refuses(env, ["NVIDIA Container Toolkit", "ROOM_GPUS"], ROOM_GPUS="all")
            launcher_refuses(env, ["not in this host's Docker", "make test-docker", "docker build"],
                             ROOM_IMAGE=f"rmsnorm-triton:no-such-tag-{os.getpid()}")
            weak = state / "weak-admin-password"
            weak.write_text("changeme\n", encoding="utf-8")
            weak.chmod(0o600)
            launcher_refuses(env, ["default or common password"], ROOM_ADMIN_PASSWORD_FILE=str(weak))

        with Step("2. the hub started on 127.0.0.1 only; a second `make room` refused: same room (running), "
                  "another room on the port (in use); the hub's config alone refuses an empty cookie secret"):
            hub.start()
            room = json.loads((state / "room.json").read_text(encoding="utf-8"))
            with socket.socket() as s:
                s.settimeout(2)
                check(s.connect_ex((room["gateway"], port)) != 0,
                      f"the room's port {port} answers on {room['gateway']}, not only on loopback")
            launcher_refuses(env, ["already running"])
            loose = {f.name: oct(f.stat().st_mode & 0o777) for f in state.iterdir()
                     if f.is_file() and f.stat().st_mode & 0o077}
            check((state / "jupyterhub.sqlite").exists() and not loose, f"state files others can read: {loose}")
            # The hub's config, run by hand on a state folder whose cookie secret is empty, refuses too.
            bad = Path(tempfile.mkdtemp(prefix=f"rmsnorm-{ROOM}-c-"))
            try:
                for name in ("room.json", "roomctl_token", "proxy_auth_token"):
                    shutil.copy2(state / name, bad / name)
                roomcheck_env = {**env, "ROOM_STATE_DIR": str(bad),
                                 "CONFIGPROXY_AUTH_TOKEN": (state / "proxy_auth_token").read_text().strip()}
                (bad / "jupyterhub_cookie_secret").write_text("\n")
                (bad / "jupyterhub_cookie_secret").chmod(0o600)
                r = subprocess.run([str(Path(PY).with_name("jupyterhub")), "-f", str(HERE / "jupyterhub_config.py")],
                                   cwd=bad, env=roomcheck_env, capture_output=True, text=True, timeout=120)
                check(r.returncode != 0 and "room: the cookie secret is empty" in r.stderr + r.stdout,
                      f"jupyterhub -f room/jupyterhub_config.py with an empty cookie secret: exit {r.returncode}\n"
                      f"{(r.stderr + r.stdout)[-800:]}")
            finally:
                shutil.rmtree(bad, ignore_errors=True)
            launcher_refuses(env, [f"port {port}", "already in use", "ROOM_PORT="],
                             ROOM_NAME=f"{ROOM}-b", ROOM_STATE_DIR=str(other_state))

        ctl = Api(base, (state / "roomctl_token").read_text(encoding="utf-8").strip())
        with Step("3. admin logged in with its password; three learners created through the REST API, each logged "
                  "in with its initial password; two started their servers through the API, "
                  "one through the login form; each container with no-new-privileges"):
            admin_pw = (state / "admin_password").read_text(encoding="utf-8").strip()
            admin = Api(base, login_token(base, "instructor", admin_pw))
            check(admin("GET", "hub/api/users").status_code == 200, "the admin's token cannot list users")
            r = requests.post(f"{base}hub/api/users/alice/tokens", json={"auth": {"username": "instructor",
                              "password": admin_pw + "x"}}, timeout=30)
            check(r.status_code == 403, f"a wrong password got {r.status_code}, not 403")
            r = ctl("POST", "hub/api/users", json={"usernames": LEARNERS})
            check(r.status_code == 201, f"creating learners: {r.status_code} {r.text[:200]}")
            passwords = dict(line.split("\t") for line in
                             Path(room["learner_passwords"]).read_text(encoding="utf-8").splitlines())
            tokens = {name: login_token(base, name, passwords[name]) for name in LEARNERS}
            learner = {name: Api(base, tokens[name]) for name in LEARNERS}
            for name in LEARNERS[:-1]:
                r = learner[name]("POST", f"hub/api/users/{name}/server")
                check(r.status_code in (201, 202), f"{name} starting a server: {r.status_code} {r.text[:200]}")
            # The last one as a browser does: the login form, its cookies, the OAuth redirects, JupyterLab.
            browser_login(base, LEARNERS[-1], passwords[LEARNERS[-1]])
            for name in LEARNERS:
                wait_server(learner[name], name, running=True)
                box = client.containers.get(f"rmsnorm-{ROOM}-{name}")
                labels, host = box.labels, box.attrs["HostConfig"]
                check(labels.get(LABEL) == ROOM and labels.get(f"{LABEL}.user") == name, f"{name}'s labels: {labels}")
                check(host["Memory"] == 2 * 1024**3 and host["CpuQuota"] == host["CpuPeriod"],
                      f"{name}'s limits: memory {host['Memory']}, cpu quota {host['CpuQuota']}/{host['CpuPeriod']}")
                check(host.get("Init") is True, f"{name}'s container runs without --init")
                check("no-new-privileges" in (host.get("SecurityOpt") or []), f"{name}: {host.get('SecurityOpt')}")
                check(not any(box.attrs["NetworkSettings"]["Ports"].values()), f"{name}'s container publishes a port")
                vol = client.volumes.get(f"rmsnorm-{ROOM}-work-{name}")
                check(vol.attrs["Labels"].get(LABEL) == ROOM, f"{name}'s volume is not labelled: {vol.attrs['Labels']}")

        with Step(
            "4. check_env run by a kernel in each learner's own server; JupyterLab's page served through the hub; "
            "solutions/, INSTRUCTORS.md, tests/ withheld (file browser, contents API, a kernel's open())"
        ):
            r = requests.get(f"{base}hub/login", timeout=30)
            check(r.status_code == 200 and 'name="password"' in r.text and "signup" in r.text,
                  f"the hub's login page (NativeAuthenticator, with sign-up): {r.status_code}")
            r = learner["alice"]("GET", "user/alice/lab")
            check(r.status_code == 200 and "<title>JupyterLab</title>" in r.text, f"alice's /lab: {r.status_code}")
            for name in LEARNERS:
                ok, out = run_cell(port, name, tokens[name], CHECK_ENV_CELL)
                check(ok == "ok" and "OK: canary" in out and f"user: {name} | exit: 0" in out,
                      f"check_env in {name}'s server:\n{out}")
            say(f"   {out.strip().splitlines()[1]}")
            r = learner["alice"]("GET", "user/alice/api/contents")
            names = {item["name"] for item in r.json()["content"]}
            check(r.status_code == 200 and {"exercises", "notebooks"} <= names and not names & set(WITHHELD),
                  f"alice's course folder as JupyterLab lists it: {sorted(names)}")
            for path in WITHHELD:
                r = learner["alice"]("GET", f"user/alice/api/contents/{path}")
                check(r.status_code == 404, f"alice's contents API on {path}: {r.status_code}, not 404")
            ok, out = run_cell(port, "alice", tokens["alice"], WITHHELD_CELL)
            check(ok == "ok" and "withheld folder: denied" in out and "uid: 10001 | readable: []" in out,
                  f"withheld files readable by alice's kernel:\n{out}")

        alice, bob = learner["alice"], learner["bob"]
        with Step("5. alice's token: 403 on bob's server and on the admin API; carol locked out after five wrong "
                  "passwords (logged); a sign-up approved at /hub/authorize is a hub user before logging in"):
            for path in ("user/bob/api/status", "user/bob/api/contents", "hub/api/users"):
                r = alice("GET", path, allow_redirects=False)
                check(r.status_code == 403, f"alice's token on {path}: {r.status_code}, not 403")
            r = alice("POST", "hub/api/users", json={"usernames": ["mallory"]})
            check(r.status_code == 403, f"alice's token creating a user: {r.status_code}, not 403")
            r = alice("DELETE", "hub/api/users/bob/server")
            check(r.status_code in (403, 404), f"alice's token stopping bob's server: {r.status_code}")
            check(bob("GET", "user/bob/api/status").status_code == 200, "bob's own token on his server")
            for _ in range(5):
                r = requests.post(f"{base}hub/api/users/carol/tokens",
                                  json={"auth": {"username": "carol", "password": "wrong-" + secrets.token_hex(4)}},
                                  timeout=30)
                check(r.status_code == 403, f"carol's wrong password: {r.status_code}")
            r = requests.post(f"{base}hub/api/users/carol/tokens",
                              json={"auth": {"username": "carol", "password": passwords["carol"]}}, timeout=30)
            check(r.status_code == 403, f"carol's right password while locked out: {r.status_code}, not 403")
            check("room: carol locked out" in hub.text() and "login of carol refused: locked out" in hub.text(),
                  "the hub's log does not say that carol is locked out")
            s = requests.Session()
            r = s.get(f"{base}hub/signup", timeout=30)
            xsrf = re.search(r'name="_xsrf" value="([^"]+)"', r.text)
            check(r.status_code == 200 and xsrf, f"the sign-up page: {r.status_code}")
            pw = secrets.token_urlsafe(12)
            r = s.post(f"{base}hub/signup", data={"username": SIGNUP, "signup_password": pw,
                                                   "signup_password_confirmation": pw, "_xsrf": xsrf.group(1)},
                       timeout=30)
            check(r.status_code == 200, f"{SIGNUP}'s sign-up: {r.status_code}")
            check(ctl("GET", f"hub/api/users/{SIGNUP}").status_code == 404, f"{SIGNUP} is a user before approval")
            r = form_session(base, "instructor", admin_pw).get(f"{base}hub/authorize/{SIGNUP}", timeout=30)
            check(r.status_code == 200, f"approving {SIGNUP}: {r.status_code} {r.url}")
            r = ctl("GET", f"hub/api/users/{SIGNUP}")
            check(r.status_code == 200, f"{SIGNUP}, approved, is not a hub user (not on /hub/admin): {r.status_code}")

        work = f"written by alice at {time.time()}"
        with Step("6. alice's work survives a restart of her server (a new container, the same volume)"):
            r = alice("PUT", "user/alice/api/contents/my-work.txt",
                      json={"type": "file", "format": "text", "content": work})
            check(r.status_code in (200, 201), f"writing alice's file: {r.status_code} {r.text[:200]}")
            first = client.containers.get(f"rmsnorm-{ROOM}-alice").id
            check(alice("DELETE", "hub/api/users/alice/server").status_code in (202, 204), "stopping alice's server")
            wait_server(alice, "alice", running=False)
            check(not client.containers.list(all=True, filters={"id": first}), "alice's stopped container was kept")
            check(alice("POST", "hub/api/users/alice/server").status_code in (201, 202), "restarting alice's server")
            wait_server(alice, "alice", running=True)
            check(client.containers.get(f"rmsnorm-{ROOM}-alice").id != first, "alice's server kept its container")
            r = alice("GET", "user/alice/api/contents/my-work.txt")
            check(
                r.status_code == 200 and r.json()["content"] == work, f"alice's file after the restart: {r.text[:200]}"
            )

        with Step("7. a learner whose container cannot start: the hub says why; the others keep working"):
            vol = f"rmsnorm-{ROOM}-work-{BROKEN}"
            client.volumes.create(vol, labels={LABEL: ROOM, f"{LABEL}.user": BROKEN})
            client.containers.run(room["hub_image"], ["sh", "-c", "touch /w/broken && chmod 000 /w"], user="0",
                                  remove=True, network_mode="none", labels={LABEL: ROOM},
                                  volumes={vol: {"bind": "/w", "mode": "rw"}})
            check(ctl("POST", "hub/api/users", json={"usernames": [BROKEN]}).status_code == 201, "creating dave")
            passwords = dict(line.split("\t") for line in
                             Path(room["learner_passwords"]).read_text(encoding="utf-8").splitlines())
            dave = Api(base, login_token(base, BROKEN, passwords[BROKEN]))
            r = dave("POST", f"hub/api/users/{BROKEN}/server")
            messages = []
            if r.status_code >= 400:   # it failed within the request: the answer carries the reason
                messages.append(r.json().get("message", r.text))
            else:
                check(r.status_code in (201, 202), f"dave's start: {r.status_code} {r.text[:200]}")
            # What the hub's spawn page shows: the progress stream's last event.
            events = progress_events(dave, BROKEN)
            check(events and events[-1].get("failed"), f"dave's broken server was not reported as failed: {events}")
            messages.append(events[-1]["message"])
            for message in messages:
                check(f"rmsnorm-{ROOM}-{BROKEN}" in message and "stopped during start-up" in message
                      and "cannot be read and written" in message,
                      f"the hub's message for dave does not say what went wrong: {message}")
            say(f"   the hub told dave: {' | '.join(messages[-1].splitlines()[:2])[:200]}")
            wait_server(ctl, BROKEN, running=False, timeout=60)
            check(alice("GET", "user/alice/api/contents/my-work.txt").status_code == 200, "alice's server after dave's")
            ok, out = run_cell(port, "bob", tokens["bob"], "print(6 * 7)", timeout=120)
            check(ok == "ok" and out.strip() == "42", f"a cell in bob's server after dave's failure: {ok} {out}")

        with Step("8. room/roomctl release-solutions: alice's running server shows and reads them, bob's stopped "
                  "one gets them, and erin, added after the release, starts with the course and them"):
            check(ctl("DELETE", "hub/api/users/bob/server").status_code in (202, 204), "stopping bob's server")
            wait_server(ctl, "bob", running=False)
            out = roomctl(env, "release-solutions")
            check("alice: " in out and "bob: " in out and "released" in out, f"roomctl release-solutions: {out}")
            check("released" in roomctl(env, "status"), "roomctl status does not say the solutions are released")
            r = alice("GET", "user/alice/api/contents")
            names = {item["name"] for item in r.json()["content"]}
            check(set(WITHHELD) <= names, f"alice's folder after the release: {sorted(names)}")
            # As a text file (jupytext, in the image, would otherwise serve a .md as a notebook).
            r = alice("GET", "user/alice/api/contents/INSTRUCTORS.md", params={"type": "file", "format": "text"})
            check(r.status_code == 200 and "Instructor" in r.json()["content"],
                  f"alice reading INSTRUCTORS.md: {r.text[:200]}")
            ok, out = run_cell(port, "alice", tokens["alice"],
                               "import glob; print(len(glob.glob('/home/learner/course/solutions/*.ipynb')) > 0)")
            check(ok == "ok" and out.strip() == "True", f"alice's kernel and the released solutions: {ok} {out}")
            check(ctl("POST", "hub/api/users", json={"usernames": [LATE]}).status_code == 201, f"creating {LATE}")
            check(ctl("POST", f"hub/api/users/{LATE}/server").status_code in (201, 202), f"starting {LATE}'s server")
            wait_server(ctl, LATE, running=True)
            late = Api(base, ctl("POST", f"hub/api/users/{LATE}/tokens", json={"note": "test"}).json()["token"])
            r = late("GET", f"user/{LATE}/api/contents")
            names = {item["name"] for item in r.json()["content"]}
            check({"exercises", "notebooks", *WITHHELD} <= names,
                  f"{LATE}'s folder, started after the release: {sorted(names)}")

        with Step("9. the hub stopped (room/roomctl down): its containers are gone, the five learners' volumes are "
                  "kept, and room/roomctl collect copies alice's work out of hers, bob's with the solutions"):
            hub.stop(roomctl_env=env)
            left = [c.name for c in client.containers.list(all=True, filters=flt)]
            check(not left, f"containers left after the hub stopped: {left}")
            vols = {v.name for v in client.volumes.list(filters=flt)}
            want = {f"rmsnorm-{ROOM}-work-{n}" for n in [*LEARNERS, BROKEN, LATE]}
            check(want <= vols, f"volumes lost when the hub stopped: {sorted(want - vols)}")
            collected = state / "collected"
            out = roomctl(env, "collect", "alice", "bob", "--to", str(collected))
            check((collected / "alice" / "my-work.txt").read_text(encoding="utf-8") == work,
                  f"room/roomctl collect did not bring alice's file back: {out}")
            check((collected / "alice" / "exercises").is_dir(), "room/roomctl collect did not copy alice's exercises/")
            check(any((collected / "bob" / "solutions").glob("*.ipynb")),
                  "bob's volume (his server stopped during the release) lacks solutions/")

        with Step("10. the hub restarted with a certificate (TLS) and ROOM_IDLE_TIMEOUT=20: alice's work is there, "
                  "plain HTTP is not served, and the idle culler stopped her server once idle"):
            cert, key = self_signed_cert(state)
            hub.start(ROOM_IDLE_TIMEOUT="20", ROOM_CERT=str(cert), ROOM_KEY=str(key))
            alice = Api(f"https://127.0.0.1:{port}/", tokens["alice"], verify=str(cert))
            try:
                requests.get(f"{base}hub/api/", timeout=5)
                raise Failed(f"plain HTTP is still served on {base} with a certificate given")
            except requests.ConnectionError:
                pass
            check(alice("POST", "hub/api/users/alice/server").status_code in (201, 202), "starting alice's server")
            wait_server(alice, "alice", running=True)
            r = alice("GET", "user/alice/api/contents/my-work.txt")
            check(r.status_code == 200 and r.json()["content"] == work, "alice's file after the hub's restart")
            idle_from = time.monotonic()
            wait_server(Api(alice.base, ctl.token, verify=str(cert)), "alice", running=False, timeout=150)
            idle_for = time.monotonic() - idle_from
            check("Culling server alice" in hub.text() or "culling server alice" in hub.text().lower(),
                  "alice's server stopped, but not by the idle culler (no 'Culling server alice' in the hub's log)")
            say(f"   culled after {idle_for:.0f} s of idleness")
        status = 0
    except Failed as e:
        say(f"FAILED: {e}")
        say(f"hub log: {log}\n{hub.tail(40)}")
    finally:
        t = time.monotonic()
        hub.stop()
        purge = subprocess.run([PY, str(HERE / "roomctl.py"), "purge", "--yes"], env=env, capture_output=True,
                               text=True, timeout=300)
        if purge.returncode != 0:
            say(f"room/roomctl purge --yes failed (exit {purge.returncode}): {purge.stderr.strip()[:300]}")
            status = 1
        removed = [line.split()[-1] for line in purge.stdout.splitlines() if line.startswith("deleting ")]
        for box in client.containers.list(all=True, filters=flt):
            box.remove(force=True)
            removed.append(box.name)
        for vol in client.volumes.list(filters=flt):
            vol.remove(force=True)
            removed.append(vol.name)
        for net in client.networks.list(filters=flt):
            net.remove()
            removed.append(net.name)
        for path in (state, other_state):
            shutil.rmtree(path, ignore_errors=True)
        try:
            decoy.reload()
            decoy_volume.reload()
            say(f"11. cleaned up by label {LABEL}={ROOM} (room/roomctl purge --yes, then a sweep): {len(removed)} "
                f"containers, volumes and networks; the decoys left alone ({time.monotonic() - t:.0f} s)")
        except docker.errors.NotFound as e:
            say(f"FAILED: the clean-up touched what it must not: {e}")
            status = 1
        finally:
            for item in (decoy, decoy_volume):
                try:
                    item.remove(force=True)
                except docker.errors.NotFound:
                    pass
    say(f"{'passed' if status == 0 else 'FAILED'} in {time.monotonic() - T0:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
