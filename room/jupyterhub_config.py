"""JupyterHub configuration of the course's room (`make room`): one container per learner, on this host.

Read by `jupyterhub -f room/jupyterhub_config.py`, which room/launch.py runs in the room's state
folder (ROOM_STATE_DIR) after its checks, with that folder's room.json describing the room. The
secrets are checked again here, so a hub started by hand refuses the same empty or default ones.

- Login: NativeAuthenticator. The admin (ROOM_ADMIN) is created at start-up with the password from
  its file; a learner is either added by the instructor (REST API, admin page or room/roomctl add:
  an initial random password is written to learner_passwords.tsv, mode 600, in the state folder) or
  signs up at /hub/signup and waits for the instructor's approval at /hub/authorize (ROOM_SIGNUP=1);
  approving a sign-up creates the hub's user too, so /hub/admin lists every learner who may log in.
  A name locked after five wrong passwords is logged ("room: NAME locked out ..."): its login page
  says only "Invalid username or password", as for one wrong password.
- Servers: DockerSpawner with the room image; per learner a container `rmsnorm-<room>-<user>` and
  a named volume `rmsnorm-<room>-work-<user>` on the course folder, memory and CPU limits, GPUs
  when asked for; every container and volume labelled org.rmsnorm.room=<room>. A container that
  fails to start is reported to that learner (and in the admin page) with Docker's error or the
  last lines of its log; the others are not touched. Containers run with no-new-privileges.
- Withheld files (solutions/, INSTRUCTORS.md, tests/; room/release.py): not in a learner's volume
  until released; once released (the state folder's flag), copied in before each server starts.
- The idle culler (a hub service) stops servers idle for ROOM_IDLE_TIMEOUT seconds.
- Addresses: the public one from room.json (loopback unless told otherwise; TLS with a cert); the
  hub's API only on the gateway of the room's own Docker network; the proxy's API on 127.0.0.1.
"""

# ruff: noqa: F821  (`c` and `get_config` are given by traitlets when it loads this file)

import asyncio
import json
import os
import secrets
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bcrypt  # noqa: E402
import docker  # noqa: E402
from dockerspawner import DockerSpawner  # noqa: E402
from nativeauthenticator import NativeAuthenticator  # noqa: E402
from nativeauthenticator.handlers import ToggleAuthorizationHandler  # noqa: E402
from nativeauthenticator.orm import UserInfo  # noqa: E402
from tornado import web  # noqa: E402

import release  # noqa: E402
import roomcheck  # noqa: E402

c = get_config()  # noqa: F821


def refuse(msg: str):
    # SystemExit passes through traitlets' config loader (it catches Exception only), so the hub stops.
    raise SystemExit(f"room: {msg}")


if not os.environ.get("ROOM_STATE_DIR"):
    refuse("ROOM_STATE_DIR is not set: start the room with `make room` (room/launch.py), which checks and prepares it.")
STATE = Path(os.environ["ROOM_STATE_DIR"])
try:
    ROOM = json.loads((STATE / "room.json").read_text(encoding="utf-8"))
except FileNotFoundError:
    refuse(f"{STATE}/room.json is missing: start the room with `make room`.")

LABEL = ROOM["label"]
NAME = ROOM["name"]
ADMIN = ROOM["admin"]


def _common_passwords():
    import nativeauthenticator

    listing = Path(nativeauthenticator.__file__).with_name("common-credentials.txt")
    return frozenset(listing.read_text(encoding="utf-8", errors="replace").split())


# --- secrets: refused when empty, a default, or weak (the same checks as room/launch.py) ---------
try:
    roomcheck.check_secret(
        "the cookie secret", roomcheck.read_secret_file(STATE / "jupyterhub_cookie_secret", "the cookie secret"))
    if "JPY_COOKIE_SECRET" in os.environ:
        roomcheck.check_secret("JPY_COOKIE_SECRET (environment)", os.environ["JPY_COOKIE_SECRET"])
    PROXY_TOKEN = roomcheck.check_secret("CONFIGPROXY_AUTH_TOKEN", os.environ.get("CONFIGPROXY_AUTH_TOKEN"))
    CTL_TOKEN = roomcheck.check_secret(
        "the room-ctl token", roomcheck.read_secret_file(STATE / "roomctl_token", "the room-ctl token"))
    ADMIN_PASSWORD = roomcheck.check_admin_password(
        ADMIN, roomcheck.read_secret_file(Path(ROOM["admin_password_file"]), "the admin password"),
        _common_passwords(), source=f"the admin password (file {ROOM['admin_password_file']})")
except roomcheck.RoomError as e:
    refuse(str(e))

# --- where things live and listen ----------------------------------------------------------------
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
scheme = "https" if ROOM["cert"] else "http"
c.JupyterHub.bind_url = f"{scheme}://{ROOM['ip']}:{ROOM['port']}/"
if ROOM["cert"]:
    c.JupyterHub.ssl_cert = ROOM["cert"]
    c.JupyterHub.ssl_key = ROOM["key"]
# The containers reach the hub's API at the gateway of the room's own network; nothing else does.
c.JupyterHub.hub_bind_url = f"http://{ROOM['gateway']}:{ROOM['hub_port']}"
c.JupyterHub.hub_connect_url = f"http://{ROOM['gateway']}:{ROOM['hub_port']}"
c.ConfigurableHTTPProxy.command = [ROOM["proxy_command"]]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{ROOM['api_port']}"
c.ConfigurableHTTPProxy.auth_token = PROXY_TOKEN
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")
# Stopping the hub stops (and removes) the learners' containers; their volumes stay.
c.JupyterHub.cleanup_servers = True
# How often the hub reads the proxy's record of each server's last request: the culler's clock.
c.JupyterHub.last_activity_interval = max(5, min(300, ROOM["idle_timeout"] // 3))


# --- login ----------------------------------------------------------------------------------------
def _hash(password: str) -> bytes:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt())


class RoomToggleAuthorizationHandler(ToggleAuthorizationHandler):
    """/hub/authorize/<name>: approving a sign-up also creates the hub's user, so that /hub/admin (and
    room/roomctl status) list the learner before their first login, as they list learners added by name."""

    async def get(self, slug):
        await super().get(slug)  # the admin check, then the toggle
        info = UserInfo.find(self.db, slug)
        if info is not None and info.is_authorized and self.find_user(slug) is None:
            self.user_from_username(slug)
            self.log.info("room: %s approved; added to the hub's users (listed on /hub/admin)", slug)


class RoomAuthenticator(NativeAuthenticator):
    """NativeAuthenticator, plus: the admin's password set at start-up; added learners get one at random;
    approved sign-ups become hub users at once; a lock-out is logged."""

    def get_handlers(self, app):
        return [(path, RoomToggleAuthorizationHandler if handler is ToggleAuthorizationHandler else handler)
                for path, handler in super().get_handlers(app)]

    def add_login_attempt(self, username):
        super().add_login_attempt(username)
        count = self.login_attempts[username]["count"]
        if count >= self.allowed_failed_logins:
            # The login page cannot tell the learner (it says "Invalid username or password" either way).
            self.log.warning(
                "room: %s locked out for %d s after %d wrong passwords in a row; their login page still says only "
                "'Invalid username or password'. Wait, or set a new password at /hub/change-password/%s",
                username, self.seconds_before_next_try, count, username)

    def is_blocked(self, username):
        blocked = super().is_blocked(username)
        if blocked:
            self.log.warning("room: login of %s refused: locked out (%d wrong passwords; the lock lasts %d s from the "
                             "last attempt)", username, self.login_attempts[username]["count"],
                             self.seconds_before_next_try)
        return blocked

    def add_user(self, user):
        super().add_user(user)
        info = UserInfo.find(self.db, user.name)
        if user.name == ADMIN:
            if info is None:
                self.db.add(UserInfo(username=ADMIN, password=_hash(ADMIN_PASSWORD), is_authorized=True))
            elif not info.is_authorized or not info.is_valid_password(ADMIN_PASSWORD):
                info.password, info.is_authorized = _hash(ADMIN_PASSWORD), True
            self.db.commit()
        elif info is None:
            # Added by the instructor (REST API, admin page, room/roomctl add), not signed up.
            password = secrets.token_urlsafe(9)
            self.db.add(UserInfo(username=user.name, password=_hash(password), is_authorized=True))
            self.db.commit()
            path = Path(ROOM["learner_passwords"])
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(f"{user.name}\t{password}\n")
            self.log.info("room: %s added with an initial password (in %s)", user.name, path)


c.JupyterHub.authenticator_class = RoomAuthenticator
c.Authenticator.admin_users = {ADMIN}
# NativeAuthenticator lets in only accounts it has authorized (the admin, added learners, approved
# sign-ups), so every account that passes its password check may use the hub.
c.Authenticator.allow_all = True
c.NativeAuthenticator.enable_signup = bool(ROOM["signup"])
c.NativeAuthenticator.open_signup = False
c.NativeAuthenticator.minimum_password_length = 8
c.NativeAuthenticator.check_common_password = True
c.NativeAuthenticator.allowed_failed_logins = 5
c.NativeAuthenticator.seconds_before_next_try = 120


# --- the learners' containers ----------------------------------------------------------------------
def _log_tail(text: str, lines: int = 12) -> str:
    tail = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return "\n".join(tail) if tail else "(the container printed nothing)"


class RoomFailure(web.HTTPError):
    """A spawn failure whose message the hub shows: in the REST API's answer (log_message), on the
    learner's spawn page and in the spawn's progress events (jupyterhub_message)."""

    def __init__(self, message: str):
        super().__init__(500, "%s", message)
        self.jupyterhub_message = message


class RoomSpawner(DockerSpawner):
    """DockerSpawner with labelled volumes, GPUs on request, and start-up failures told in full."""

    def _labels(self) -> dict:
        return {LABEL: NAME, f"{LABEL}.user": self.user.name}

    async def _ensure_volumes(self):
        for source in self.volume_binds:
            if source.startswith("/"):
                continue  # a host path, not a named volume
            try:
                vol = await self.docker("inspect_volume", source)
            except docker.errors.NotFound:
                await self.docker("create_volume", source, labels=self._labels())
                self.log.info("room: created volume %s for %s", source, self.user.name)
                continue
            owner = (vol.get("Labels") or {}).get(LABEL)
            if owner != NAME:
                raise RoomFailure(
                    f"A Docker volume named {source} exists and is not this room's (label {LABEL}={owner!r}); "
                    "it is left alone, and this server cannot start. Ask the instructor.")

    async def create_object(self):
        # Never take over a container of the same name that is not this room's.
        existing = await self.get_object()
        if existing is not None and (existing["Config"].get("Labels") or {}).get(LABEL) != NAME:
            raise RoomFailure(
                f"A container named {self.object_name} exists and is not this room's; it is left alone, "
                "and this server cannot start. Ask the instructor.")
        await self._ensure_volumes()
        if release.released(STATE):
            await self._release_withheld()
        return await super().create_object()

    async def _release_withheld(self):
        """Released: copy solutions/, INSTRUCTORS.md, tests/ into this learner's volume (room/release.py)."""
        volume = f"rmsnorm-{NAME}-work-{self.user.name}"
        try:
            said = await asyncio.to_thread(release.release_into, docker.from_env(timeout=120), ROOM["hub_image"],
                                           volume, {LABEL: NAME, f"{LABEL}.release": self.user.name})
        except docker.errors.DockerException as e:
            raise RoomFailure(f"Copying the released solutions into {volume} failed: {e}. Tell the instructor.") from e
        self.log.info("room: %s: %s", self.user.name, said)

    async def start(self):
        try:
            ip, port = await super().start()
        except RoomFailure:
            raise
        except docker.errors.APIError as e:
            await self._remove_failed()
            raise RoomFailure(
                f"Docker could not start your server's container {self.object_name}: "
                f"{e.explanation or e}. Tell the instructor; the other learners' servers are not affected.") from e
        await self._wait_listening(ip, port)
        return ip, port

    async def _remove_failed(self):
        """Remove a container that failed to start (the hub stops only a running one)."""
        if self.object_id:
            try:
                await self.remove_object()
            except docker.errors.APIError as e:
                self.log.warning("room: could not remove %s after its failed start: %s", self.object_name, e)
            self.object_id = ""

    async def _wait_listening(self, ip, port):
        """Until the server's port accepts, or its container has exited (then: its log, in the error)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.http_timeout
        while loop.time() < deadline:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), 2)
                writer.close()
                return
            except (OSError, asyncio.TimeoutError):
                pass
            state = (await self.docker("inspect_container", self.object_id))["State"]
            if not state["Running"]:
                logs = await self.docker("logs", self.object_id, tail=40)
                await self._remove_failed()
                raise RoomFailure(
                    f"Your server's container {self.object_name} stopped during start-up "
                    f"(exit code {state['ExitCode']}). Its last lines:\n{_log_tail(logs.decode(errors='replace'))}\n"
                    "Tell the instructor; the other learners' servers are not affected.")
            await asyncio.sleep(0.5)


def _host_config(spawner):
    config = {
        "init": True,            # reaps the checkers' child processes (room/README.md, Docker)
        "auto_remove": False,    # keep a crashed container until its log is read; stop() removes it
        "security_opt": ["no-new-privileges"],   # no set-uid program makes the learner root
    }
    gpus = ROOM["gpus"]
    if gpus:
        request = (docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]]) if gpus == "all" else
                   docker.types.DeviceRequest(device_ids=gpus.split(","), capabilities=[["gpu"]]))
        config["device_requests"] = [request]
    return config


c.JupyterHub.spawner_class = RoomSpawner
c.DockerSpawner.image = ROOM["hub_image"]
c.DockerSpawner.pull_policy = "never"          # the image is this host's own (checked by room/launch.py)
c.DockerSpawner.remove = True                  # a fresh container at every start; the work is in the volume
c.DockerSpawner.network_name = ROOM["network"]
# The proxy reaches the container on the room's network: no published port.
c.DockerSpawner.use_internal_ip = True
c.DockerSpawner.name_template = f"rmsnorm-{NAME}-{{username}}"
c.DockerSpawner.volumes = {f"rmsnorm-{NAME}-work-{{username}}": "/home/learner/course"}
c.DockerSpawner.notebook_dir = "/home/learner/course"
c.DockerSpawner.cmd = ["room-start"]           # room/room-start: the volume checked, then jupyterhub-singleuser
c.DockerSpawner.extra_create_kwargs = {"labels": {LABEL: NAME, f"{LABEL}.user": "{raw_username}"}}
c.DockerSpawner.extra_host_config = _host_config
c.DockerSpawner.mem_limit = ROOM["mem"]
c.DockerSpawner.cpu_limit = float(ROOM["cpus"])
c.Spawner.default_url = "/lab"
c.Spawner.args = ["--LabApp.app_settings_dir=/home/learner/course/lab-settings"]
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120

# --- services: the idle culler, and room/roomctl ----------------------------------------------------
cull_every = max(5, min(300, ROOM["idle_timeout"] // 4))
c.JupyterHub.services = [
    {
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler",
                    f"--timeout={ROOM['idle_timeout']}", f"--cull-every={cull_every}"],
    },
    {"name": "room-ctl", "api_token": CTL_TOKEN},
]
c.JupyterHub.load_roles = [
    {
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    },
    {
        # room/roomctl (and make test-hub): add and list learners, start and stop their servers.
        "name": "room-ctl",
        "scopes": ["admin:users", "admin:servers", "tokens", "list:users", "read:users", "read:users:activity"],
        "services": ["room-ctl"],
    },
]
