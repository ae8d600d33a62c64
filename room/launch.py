"""`make room`: check everything, then run JupyterHub for the course on this host (in the foreground).

Run by room/room.sh with the hub's own venv (build/room/venv). In order, and nothing is started
before every check has passed:

1. the ROOM_* settings (room/roomcheck.py); the room's lock (one hub per room name);
2. the ports: the public one (ROOM_PORT), the proxy's API (ROOM_API_PORT);
3. Docker answers; the NVIDIA Container Toolkit when ROOM_GPUS asks for GPUs;
4. the course image exists (else: how to build it); the room image (room/Dockerfile) is built on it
   when its tag is missing;
5. the room's Docker network (labelled), whose gateway is the one address the hub's API listens on;
6. the secrets: cookie secret, proxy token, room-ctl token and the admin's password, written (mode 600,
   random) into the state folder when absent, refused when empty, a default, or weak;
7. then it writes ROOM_STATE_DIR/room.json and execs `jupyterhub -f room/jupyterhub_config.py`,
   in the state folder, so its database and pid files land there and nowhere in the checkout.

Exit status 2 and one "room: ..." message for a refused setting.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
sys.path.insert(0, str(HERE))

import release  # noqa: E402
import roomcheck  # noqa: E402
from roomcheck import RoomError  # noqa: E402

LABEL = "org.rmsnorm.room"           # value: the room's name; on every container, volume, network of a room
ROOM_BUILD = Path(os.environ.get("ROOM_BUILD", CHECKOUT / "build" / "room")).resolve()


def say(msg: str) -> None:
    print(f"room: {msg}", flush=True)


def take_lock(state: Path, settings) -> int:
    """One hub per room: an flock on ROOM_STATE_DIR/room.lock, kept open through the exec."""
    path = state / "room.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise RoomError(
            f"the room {settings.name!r} is already running (pid {holder}, lock {path}). Stop it first (Ctrl-C in "
            f"its terminal, or room/roomctl down), or start a second room beside it: "
            f"make room ROOM_NAME={settings.name}-2 ROOM_PORT={settings.port + 10}"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    os.set_inheritable(fd, True)
    return fd


def docker_client():
    import docker  # the hub venv's docker SDK (dockerspawner's dependency)

    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any failure to reach the daemon is the same message
        raise RoomError(
            f"Docker does not answer ({type(e).__name__}: {str(e)[:160]}). Start it: `sudo systemctl start docker`, "
            "or without systemd `sudo dockerd > /var/log/dockerd.log 2>&1 &`; and run `make room` as a user who "
            "may use Docker (root, or a member of the docker group)."
        ) from None
    return client


def nvidia_toolkit(client) -> str | None:
    """What shows that Docker can hand out GPUs here, or None."""
    runtimes = client.info().get("Runtimes") or {}
    if "nvidia" in runtimes:
        return "the nvidia runtime in `docker info`"
    for exe in ("nvidia-container-runtime-hook", "nvidia-container-cli"):
        found = shutil.which(exe)
        if found:
            return found
    return None


def image_exists(client, image: str) -> bool:
    import docker

    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def room_image(client, settings) -> str:
    """The room image's tag for this course image and this recipe; built when missing."""
    given = os.environ.get("ROOM_HUB_IMAGE", "")
    if given:
        if not image_exists(client, given):
            raise RoomError(
                f"ROOM_HUB_IMAGE={given} is not in this host's Docker (room/Dockerfile says how to build it)."
            )
        return given
    course_id = client.images.get(settings.image).id.split(":")[-1]
    recipe = hashlib.sha256()
    for name in ("Dockerfile", "room-start", "room-release", "requirements.txt", "constraints.txt"):
        recipe.update((HERE / name).read_bytes())
    tag = f"rmsnorm-room:{course_id[:12]}-{recipe.hexdigest()[:8]}"
    if not image_exists(client, tag):
        log = ROOM_BUILD / "build-image.log"
        if subprocess.run(["bash", str(HERE / "build_image.sh"), settings.image, tag, str(log)]).returncode != 0:
            raise RoomError(f"the room image {tag} could not be built on {settings.image} (log: {log}).")
    return tag


def room_network(client, settings) -> tuple[str, str]:
    """The room's own bridge network (name, gateway address): created, labelled, once per room."""
    import docker

    name = f"rmsnorm-{settings.name}"
    try:
        net = client.networks.get(name)
    except docker.errors.NotFound:
        net = client.networks.create(name, driver="bridge", labels={LABEL: settings.name})
    if (net.attrs.get("Labels") or {}).get(LABEL) != settings.name:
        raise RoomError(
            f"a Docker network named {name} exists and is not this room's (no label {LABEL}={settings.name}); "
            "it is left alone. Choose another room name: make room ROOM_NAME=<name>"
        )
    configs = (net.attrs.get("IPAM") or {}).get("Config") or []
    gateway = next((c.get("Gateway") for c in configs if c.get("Gateway") and ":" not in c["Gateway"]), None)
    if not gateway:
        raise RoomError(
            f"the Docker network {name} has no IPv4 gateway; remove it (`docker network rm {name}`) and retry."
        )
    return name, gateway


def secret_file(state: Path, name: str, what: str, generate) -> Path:
    path = state / name
    if not path.exists():
        roomcheck.write_new_secret(path, generate())
        say(f"wrote a new random {what} to {path}")
    return path


def common_passwords() -> frozenset[str]:
    try:
        import nativeauthenticator

        listing = Path(nativeauthenticator.__file__).with_name("common-credentials.txt")
        return frozenset(listing.read_text(encoding="utf-8", errors="replace").split())
    except (ImportError, OSError):
        return frozenset()


def prepare(env: dict) -> tuple[dict, dict, int]:
    """Every check; returns (room.json's content, the hub's environment, the lock's fd)."""
    settings = roomcheck.settings_from_env(env, CHECKOUT)
    state = settings.state_dir
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(state, 0o700)
    # Every file the hub and its proxy write here (the database, pid files) is private too; a database
    # made by an older `make room` (mode 644) is made private.
    os.umask(0o077)
    for path in state.glob("jupyterhub.sqlite*"):
        os.chmod(path, 0o600)
    lock = take_lock(state, settings)

    port_hint = f"make room ROOM_PORT={settings.port + 10}"
    roomcheck.check_port_free(settings.ip, settings.port, "the room's address, ROOM_PORT", hint=port_hint)
    roomcheck.check_port_free("127.0.0.1", settings.api_port, "the proxy's API, ROOM_API_PORT",
                              hint=f"make room ROOM_API_PORT={settings.api_port + 10}")

    client = docker_client()
    if settings.gpus:
        roomcheck.check_gpus(settings.gpus, nvidia_toolkit(client))
    roomcheck.check_image(settings.image, lambda image: image_exists(client, image))
    hub_image = room_image(client, settings)
    network, gateway = room_network(client, settings)
    roomcheck.check_port_free(gateway, settings.hub_port,
                              f"the hub's API on the room's network {network}, ROOM_HUB_PORT",
                              hint=f"make room ROOM_HUB_PORT={settings.hub_port + 10}")

    hub_env = dict(env)
    cookie = secret_file(state, "jupyterhub_cookie_secret", "cookie secret", lambda: secrets.token_hex(32))
    roomcheck.check_secret("the cookie secret", roomcheck.read_secret_file(cookie, "the cookie secret"),
                           hint=f"(file {cookie}; delete it and `make room` writes a random one)")
    if "JPY_COOKIE_SECRET" in env:
        roomcheck.check_secret(
            "JPY_COOKIE_SECRET (environment)", env["JPY_COOKIE_SECRET"], hint="Unset it to use the file."
        )
    if "CONFIGPROXY_AUTH_TOKEN" in env:
        roomcheck.check_secret("CONFIGPROXY_AUTH_TOKEN (environment)", env["CONFIGPROXY_AUTH_TOKEN"],
                               hint="Unset it: `make room` keeps a random one in the state folder.")
    else:
        token = secret_file(state, "proxy_auth_token", "proxy token", lambda: secrets.token_hex(32))
        hub_env["CONFIGPROXY_AUTH_TOKEN"] = roomcheck.check_secret(
            "the proxy token", roomcheck.read_secret_file(token, "the proxy token"), hint=f"(file {token})")
    ctl = secret_file(state, "roomctl_token", "room-ctl token", lambda: secrets.token_hex(32))
    roomcheck.check_secret(
        "the room-ctl token", roomcheck.read_secret_file(ctl, "the room-ctl token"), hint=f"(file {ctl})"
    )
    pw_file = settings.admin_password_file or secret_file(
        state, "admin_password", f"password for the admin {settings.admin!r}", lambda: secrets.token_urlsafe(15))
    roomcheck.check_admin_password(settings.admin, roomcheck.read_secret_file(pw_file, "the admin password"),
                                   common_passwords(), source=f"the admin password (file {pw_file})")

    chp = ROOM_BUILD / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
    if not chp.exists():
        raise RoomError(f"{chp} is missing: run `make room` (room/setup.sh installs it), not this script alone.")
    room = {
        "name": settings.name, "url": settings.url, "ip": settings.ip, "port": settings.port,
        "api_port": settings.api_port, "hub_port": settings.hub_port, "gateway": gateway, "network": network,
        "course_image": settings.image, "hub_image": hub_image, "admin": settings.admin,
        "admin_password_file": str(pw_file), "idle_timeout": settings.idle_timeout, "mem": settings.mem,
        "cpus": settings.cpus, "gpus": settings.gpus, "cert": settings.cert, "key": settings.key,
        "signup": settings.signup, "proxy_command": str(chp), "label": LABEL, "checkout": str(CHECKOUT),
        "learner_passwords": str(state / "learner_passwords.tsv"),
    }
    if settings.solutions == "released":
        release.mark_released(state, "ROOM_SOLUTIONS=released")
    elif release.released(state):
        say(f"solutions/, INSTRUCTORS.md and tests/ were {release.released_note(state)} and stay released; "
            f"delete {state / release.RELEASED_FLAG} to withhold them from learners who have no volume yet")
    (state / "room.json").write_text(json.dumps(room, indent=2) + "\n", encoding="utf-8")
    hub_env["ROOM_STATE_DIR"] = str(state)
    return room, hub_env, lock


def main() -> int:
    try:
        room, hub_env, _lock = prepare(dict(os.environ))
    except RoomError as e:
        print(f"room: {e}", file=sys.stderr, flush=True)
        return 2
    if os.environ.get("ROOM_CHECK_ONLY") == "1":
        say("every check passed (ROOM_CHECK_ONLY=1: not starting the hub)")
        return 0
    state = Path(hub_env["ROOM_STATE_DIR"])
    gpus = f", GPUs: {room['gpus']}" if room["gpus"] else ", no GPUs (the kernels run in Triton's interpreter)"
    where = room["url"]
    if not roomcheck.is_loopback(room["ip"]):
        scheme = "https" if room["cert"] else "http"
        host = "<this host's name or address>" if room["ip"] in ("0.0.0.0", "::") else room["ip"]
        where = f"{scheme}://{host}:{room['port']}/ (listening on {room['ip']})"
    else:
        where += " (this host only; for learners on other machines see room/README.md, \"Reaching the room\")"
    say(f"room {room['name']!r}: {where}")
    say(f"admin {room['admin']!r}, password in {room['admin_password_file']}")
    say(f"each learner: {room['hub_image']}, {room['mem']} of memory, {room['cpus']:g} CPUs{gpus}; "
        f"idle servers stopped after {room['idle_timeout']} s")
    say(f"solutions/, INSTRUCTORS.md, tests/: {release.released_note(state)}"
        + ("" if release.released(state) else "; learners get them with room/roomctl release-solutions"))
    say(f"state (database, secrets): {state}; add learners: room/roomctl add NAME...; stop: Ctrl-C (volumes are kept)")
    hub = Path(sys.executable).with_name("jupyterhub")
    os.chdir(state)
    os.execve(str(hub), [str(hub), "-f", str(HERE / "jupyterhub_config.py")], hub_env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
