"""The checks `make room` makes before a hub starts, in plain Python (no jupyterhub, no Docker).

room/launch.py calls them before it starts anything, room/jupyterhub_config.py calls the secret
checks again (so that `jupyterhub -f room/jupyterhub_config.py` run by hand refuses the same
things), and tests/room/test_hub_config.py unit-tests every refusal in the course's own venv.

Every refusal is a RoomError whose message says what is wrong and what to do about it.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path


class RoomError(Exception):
    """A setting or a secret that the room refuses; str() is the whole message."""


# Values that come with examples, templates and tutorials, and so cannot be secrets. Compared
# case-insensitively with the whole value. NativeAuthenticator's own list of common passwords
# (about 10 000) is added by the hub's config when it is importable.
DEFAULT_SECRETS = frozenset(
    {
        "", "changeme", "change-me", "change_me", "changeit", "secret", "password", "passw0rd",
        "admin", "administrator", "root", "jupyter", "jupyterhub", "default", "test", "testing",
        "example", "letmein", "qwerty", "123456", "12345678", "123456789", "1234567890",
        "hunter2", "rmsnorm", "triton", "workshop", "instructor", "teacher", "learner",
        "your-secret-here", "replace-me", "todo", "xxx", "none", "null",
    }
)
MIN_SECRET_CHARS = 32      # cookie secret (hex), proxy token, service tokens: 16 random bytes at least
MIN_ADMIN_PASSWORD = 12    # the admin's password; learners' own are NativeAuthenticator's business
ROOM_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,29}$")
LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


def check_secret(what: str, value: str | None, *, hint: str = "") -> str:
    """Return ``value`` stripped, or refuse it: empty, a known default, too short, or one repeated character."""
    v = (value or "").strip()
    tail = f" {hint}" if hint else ""
    if not v:
        raise RoomError(f"{what} is empty: refusing to start with an empty secret.{tail}")
    if v.lower() in DEFAULT_SECRETS:
        raise RoomError(f"{what} is the well-known default {v!r}: refusing to start.{tail}")
    if len(v) < MIN_SECRET_CHARS:
        raise RoomError(
            f"{what} has {len(v)} characters; at least {MIN_SECRET_CHARS} are needed "
            f"(random, e.g. `openssl rand -hex 32`).{tail}"
        )
    if len(set(v)) < 8:
        raise RoomError(f"{what} uses fewer than 8 distinct characters: it is not random.{tail}")
    return v


def check_admin_password(username: str, password: str | None, common: frozenset[str] | set[str] = frozenset(),
                         *, source: str = "the admin password") -> str:
    """Return the password, or refuse it: empty, a default or common password, the user's name, too short."""
    pw = password if password is not None else ""
    pw = pw.rstrip("\r\n")
    fix = "Put a password of your own in that file, or delete the file and `make room` writes a random one."
    if not pw.strip():
        raise RoomError(f"{source} is empty: refusing to start. {fix}")
    low = pw.lower()
    if low in DEFAULT_SECRETS or pw in common:
        raise RoomError(f"{source} is a default or common password ({pw!r}): refusing to start. {fix}")
    if low == username.lower() or low.startswith(username.lower()) and len(pw) - len(username) < 4:
        raise RoomError(f"{source} is (nearly) the admin's user name {username!r}: refusing to start. {fix}")
    if len(pw) < MIN_ADMIN_PASSWORD:
        raise RoomError(f"{source} has {len(pw)} characters; the admin's needs at least {MIN_ADMIN_PASSWORD}. {fix}")
    return pw


def read_secret_file(path: Path, what: str) -> str:
    """The content of a secret file that must exist, belong to nobody else and be private (mode 600)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise RoomError(f"{what}: {path} does not exist.") from None
    if st.st_mode & 0o077:
        raise RoomError(
            f"{what}: {path} can be read by other users (mode {st.st_mode & 0o777:o}); `chmod 600 {path}` first."
        )
    return path.read_text(encoding="utf-8")


def write_new_secret(path: Path, value: str) -> None:
    """Create ``path`` with mode 600 holding ``value``; never overwrite an existing file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value + "\n")


def check_room_name(name: str) -> str:
    if not ROOM_NAME_RE.match(name or ""):
        raise RoomError(
            f"ROOM_NAME={name!r}: use 1-30 lower-case letters, digits and '-', starting with a letter or digit "
            "(it names the room's containers, volumes and network)."
        )
    return name


def is_loopback(ip: str) -> bool:
    if ip in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def check_bind(ip: str, tls: bool, insecure_http: bool) -> None:
    """Loopback is always allowed; another address needs TLS, or INSECURE_HTTP=1 said out loud."""
    if ip == "":
        raise RoomError("ROOM_IP is empty: give an address of this host (127.0.0.1 keeps the room to this machine).")
    if is_loopback(ip) or tls or insecure_http:
        return
    raise RoomError(
        f"ROOM_IP={ip} without a certificate would send the learners' passwords and the hub's cookies over the room's "
        "network in clear text. Give ROOM_CERT=<cert.pem> ROOM_KEY=<key.pem> (TLS), or add ROOM_INSECURE_HTTP=1 "
        "if you accept that (a closed classroom network you trust), or keep the default ROOM_IP=127.0.0.1 and "
        "reach it through an SSH tunnel."
    )


def check_tls(cert: str, key: str) -> bool:
    """True when TLS is asked for (both files given and readable); refuse half a pair or a missing file."""
    if not cert and not key:
        return False
    if not cert or not key:
        given, missing = ("ROOM_CERT", "ROOM_KEY") if cert else ("ROOM_KEY", "ROOM_CERT")
        raise RoomError(f"{given} is given but {missing} is not: TLS needs both the certificate and its key.")
    for var, path in (("ROOM_CERT", cert), ("ROOM_KEY", key)):
        p = Path(path)
        if not p.is_file():
            raise RoomError(f"{var}={path}: no such file.")
        if not os.access(p, os.R_OK):
            raise RoomError(f"{var}={path}: not readable by this user.")
    head = Path(cert).read_text(encoding="ascii", errors="replace")[:4096]
    if "BEGIN CERTIFICATE" not in head:
        raise RoomError(f"ROOM_CERT={cert} is not a PEM certificate (no 'BEGIN CERTIFICATE' line).")
    return True


def check_port_free(ip: str, port: int, what: str, *, hint: str = "") -> None:
    """Refuse a port something already listens on, naming it and the way out."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # As the proxy and the hub bind: connections of a hub just stopped (TIME_WAIT) do not count,
        # a process listening on the port does.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise RoomError(
                    f"port {port} on {ip} ({what}) is already in use: another `make room`, or another server. "
                    f"`ss -ltnp 'sport = :{port}'` shows which process holds it. Stop it, or choose another port: "
                    f"{hint or f'make room ROOM_PORT={port + 10}'}"
                ) from None
            if e.errno == errno.EADDRNOTAVAIL:
                raise RoomError(
                    f"{ip} ({what}) is not an address of this host: `ip -brief address` lists them."
                ) from None
            if e.errno == errno.EACCES:
                raise RoomError(f"port {port} ({what}) needs root on this system; use a port above 1023.") from None
            raise


def parse_port(var: str, value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise RoomError(f"{var}={value!r} is not a port number.") from None
    if not 1 <= port <= 65535:
        raise RoomError(f"{var}={port} is not a port number (1-65535).")
    return port


def parse_timeout(value: str) -> int:
    """ROOM_IDLE_TIMEOUT in seconds (a plain number, or with an s/m/h suffix); at least 10 s."""
    m = re.fullmatch(r"\s*(\d+)\s*([smh]?)\s*", value or "")
    if not m:
        raise RoomError(f"ROOM_IDLE_TIMEOUT={value!r}: give seconds, or a number with s, m or h (e.g. 90m).")
    seconds = int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    if seconds < 10:
        raise RoomError(f"ROOM_IDLE_TIMEOUT={value!r} is under 10 s: a server would be stopped while it starts.")
    return seconds


def parse_mem(value: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*(\.[0-9]+)?[KMGT]", value or ""):
        raise RoomError(f"ROOM_MEM={value!r}: give a size such as 4G or 1500M (per learner).")
    return value


def parse_cpus(value: str) -> float:
    try:
        cpus = float(value)
    except ValueError:
        raise RoomError(f"ROOM_CPUS={value!r} is not a number of CPUs (e.g. 2 or 0.5).") from None
    if not 0 < cpus <= 1024:
        raise RoomError(f"ROOM_CPUS={value!r}: give a positive number of CPUs (e.g. 2 or 0.5).")
    return cpus


def parse_gpus(value: str) -> str:
    """'' (none), 'all', or a comma list of device indices / UUIDs."""
    v = (value or "").strip()
    if v in ("", "0", "none", "no"):
        return ""
    if v == "all" or re.fullmatch(r"[0-9A-Za-z-]+(,[0-9A-Za-z-]+)*", v):
        return v
    raise RoomError(f"ROOM_GPUS={value!r}: give all, or device indices such as 0 or 0,1.")


def check_gpus(request: str, toolkit: str | None) -> None:
    """``toolkit`` is what found the NVIDIA Container Toolkit (a path, a runtime name), or None."""
    if request and not toolkit:
        raise RoomError(
            f"ROOM_GPUS={request} asks for GPUs, but this host has no NVIDIA Container Toolkit (no nvidia runtime in "
            "`docker info`, no nvidia-container-runtime-hook or nvidia-container-cli on PATH), so Docker cannot give a "
            "container a GPU. Install it (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/"
            "install-guide.html) and restart dockerd, or leave ROOM_GPUS out: the kernels then run on the CPU in "
            "Triton's interpreter, slower, same checks."
        )


def missing_image_message(image: str, *, standin: str = "rmsnorm-triton:standin") -> str:
    return (
        f"the course image {image} is not in this host's Docker. Build it first, from the repository root:\n"
        f"  DOCKER_BUILDKIT=1 docker build -t {image} .        # needs Docker Hub (PyTorch's CUDA base)\n"
        f"or, without a registry, on the stand-in base (CPU only):\n"
        f"  make test-docker && docker tag {standin} {image}\n"
        f"or point the room at an image you have: make room ROOM_IMAGE={standin}"
    )


def check_image(image: str, exists) -> None:
    """``exists(image) -> bool`` asks Docker; a missing image is refused with how to build it."""
    if not exists(image):
        raise RoomError(missing_image_message(image))


def check_state_dir(state: Path, checkout: Path) -> None:
    """The hub's database and secrets must live outside the checkout (no `docker build .` can copy them)."""
    s, c = state.resolve(), checkout.resolve()
    if s == c or c in s.parents:
        raise RoomError(
            f"ROOM_STATE_DIR={state} is inside the checkout {checkout}: the hub's database and secrets belong outside "
            "it, where no `docker build .` or `git add` can pick them up. Use a folder outside it (the default is "
            "~/.local/state/rmsnorm-room/<room>)."
        )


@dataclass
class Settings:
    """What `make room` runs with: the ROOM_* variables, parsed and checked (no Docker, no secrets yet)."""

    name: str
    ip: str
    port: int
    api_port: int
    hub_port: int
    image: str
    admin: str
    admin_password_file: Path | None
    state_dir: Path
    idle_timeout: int
    mem: str
    cpus: float
    gpus: str
    cert: str
    key: str
    tls: bool
    insecure_http: bool
    signup: bool
    solutions: str = "withheld"

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.ip in ("0.0.0.0", "::") else self.ip
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}/"


def default_state_dir(name: str, env: dict) -> Path:
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(base) / "rmsnorm-room" / name


def settings_from_env(env: dict, checkout: Path) -> Settings:
    """Parse and check every ROOM_* variable; the first bad one is refused with its fix."""
    name = check_room_name(env.get("ROOM_NAME", "room"))
    port = parse_port("ROOM_PORT", env.get("ROOM_PORT", "8000"))
    api_port = parse_port("ROOM_API_PORT", env.get("ROOM_API_PORT", str(port + 1)))
    hub_port = parse_port("ROOM_HUB_PORT", env.get("ROOM_HUB_PORT", "8081"))
    if api_port == port:
        raise RoomError(f"ROOM_API_PORT={api_port} is ROOM_PORT: the proxy's API needs a port of its own.")
    cert, key = env.get("ROOM_CERT", ""), env.get("ROOM_KEY", "")
    tls = check_tls(cert, key)
    ip = env.get("ROOM_IP", "127.0.0.1")
    insecure = env.get("ROOM_INSECURE_HTTP", "") == "1"
    check_bind(ip, tls, insecure)
    admin = env.get("ROOM_ADMIN", "instructor")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,31}", admin):
        raise RoomError(f"ROOM_ADMIN={admin!r}: use lower-case letters, digits, '.', '_' or '-'.")
    pw_file = env.get("ROOM_ADMIN_PASSWORD_FILE", "")
    state = Path(env["ROOM_STATE_DIR"]).expanduser() if env.get("ROOM_STATE_DIR") else default_state_dir(name, env)
    check_state_dir(state, checkout)
    signup = env.get("ROOM_SIGNUP", "1")
    if signup not in ("0", "1"):
        raise RoomError(f"ROOM_SIGNUP={signup!r}: 1 (learners may sign up, you approve them) or 0 (you add them).")
    solutions = env.get("ROOM_SOLUTIONS", "withheld")
    if solutions not in ("withheld", "released"):
        raise RoomError(
            f"ROOM_SOLUTIONS={solutions!r}: withheld (learners get solutions/, INSTRUCTORS.md and tests/ only when you "
            "run `room/roomctl release-solutions`) or released (every learner gets them from the start)."
        )
    return Settings(
        name=name, ip=ip, port=port, api_port=api_port, hub_port=hub_port,
        image=env.get("ROOM_IMAGE", "rmsnorm-triton") or "rmsnorm-triton",
        admin=admin, admin_password_file=Path(pw_file).expanduser() if pw_file else None,
        state_dir=state, idle_timeout=parse_timeout(env.get("ROOM_IDLE_TIMEOUT", "3600")),
        mem=parse_mem(env.get("ROOM_MEM", "4G")), cpus=parse_cpus(env.get("ROOM_CPUS", "2")),
        gpus=parse_gpus(env.get("ROOM_GPUS", "")), cert=cert, key=key, tls=tls, insecure_http=insecure,
        signup=signup == "1", solutions=solutions,
    )
