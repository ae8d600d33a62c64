"""The room's refusals (room/roomcheck.py, room/launch.py) and the Zero-to-JupyterHub values, without Docker.

`make room` checks its settings and secrets before it starts anything; these tests feed each check
what it must refuse and read the message it gives. No Docker, no jupyterhub (they run in the course's
venv); `make test-hub` runs the room itself.
"""

from __future__ import annotations

import copy
import os
import secrets
import socket
import sys
from pathlib import Path

import pytest

from checkout_scripts import ROOT, load

# As room/launch.py and room/jupyterhub_config.py import it (so that its RoomError is theirs too).
sys.path.insert(0, str(ROOT / "room"))
import roomcheck  # noqa: E402

RoomError = roomcheck.RoomError


# --- secrets ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, words", [
    ("", "is empty"),
    ("   \n", "is empty"),
    (None, "is empty"),
    ("changeme", "well-known default"),
    ("CHANGEME", "well-known default"),
    ("jupyterhub", "well-known default"),
    ("0123456789abcdef", "at least 32"),
    ("a" * 64, "fewer than 8 distinct"),
    ("ab" * 32, "fewer than 8 distinct"),
])
def test_a_weak_secret_is_refused(value, words):
    with pytest.raises(RoomError, match=words):
        roomcheck.check_secret("the cookie secret", value)


def test_a_random_secret_passes():
    value = secrets.token_hex(32)
    assert roomcheck.check_secret("the proxy token", value + "\n") == value


@pytest.mark.parametrize("password, words", [
    ("", "is empty"),
    ("\n", "is empty"),
    ("changeme", "default or common"),
    ("Password", "default or common"),
    ("instructor", "default or common"),       # in the list of defaults, and the user's name
    ("instructor12", "user name"),
    ("correct-horse-battery", "default or common"),  # from the given list of common passwords
    ("s3cr3t!", "at least 12"),
])
def test_a_weak_admin_password_is_refused(password, words):
    with pytest.raises(RoomError, match=words):
        roomcheck.check_admin_password("instructor", password, {"correct-horse-battery"})


def test_the_refusal_says_how_to_fix_the_password_file():
    with pytest.raises(RoomError) as err:
        roomcheck.check_admin_password("instructor", "changeme", source="the admin password (file /x/pw)")
    assert "/x/pw" in str(err.value) and "writes a random one" in str(err.value)


def test_a_generated_admin_password_passes():
    pw = secrets.token_urlsafe(15)
    assert roomcheck.check_admin_password("instructor", pw + "\n") == pw


def test_a_secret_file_readable_by_others_is_refused(tmp_path):
    path = tmp_path / "cookie"
    path.write_text(secrets.token_hex(32))
    path.chmod(0o644)
    with pytest.raises(RoomError, match="chmod 600"):
        roomcheck.read_secret_file(path, "the cookie secret")
    path.chmod(0o600)
    assert roomcheck.read_secret_file(path, "the cookie secret").strip()


def test_a_new_secret_file_is_private_and_never_overwritten(tmp_path):
    path = tmp_path / "token"
    roomcheck.write_new_secret(path, "x" * 40)
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        roomcheck.write_new_secret(path, "y" * 40)


# --- addresses and ports ------------------------------------------------------------------------------
def test_a_port_in_use_is_refused_with_the_way_out():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(RoomError) as err:
            roomcheck.check_port_free("127.0.0.1", port, "the room's address, ROOM_PORT")
    message = str(err.value)
    assert f"port {port} on 127.0.0.1" in message and "already in use" in message
    assert f"ROOM_PORT={port + 10}" in message and "ss -ltnp" in message


def test_a_free_port_passes():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    roomcheck.check_port_free("127.0.0.1", port, "ROOM_PORT")


def test_an_address_of_another_host_is_refused():
    with pytest.raises(RoomError, match="not an address of this host"):
        roomcheck.check_port_free("192.0.2.77", 8000, "ROOM_PORT")   # TEST-NET-1: never local


@pytest.mark.parametrize("ip", ["127.0.0.1", "::1", "localhost", "127.0.1.1"])
def test_loopback_needs_no_tls(ip):
    roomcheck.check_bind(ip, tls=False, insecure_http=False)


def test_another_address_without_tls_is_refused_unless_said_out_loud():
    with pytest.raises(RoomError) as err:
        roomcheck.check_bind("0.0.0.0", tls=False, insecure_http=False)
    assert "clear text" in str(err.value) and "ROOM_CERT" in str(err.value) and "ROOM_INSECURE_HTTP=1" in str(err.value)
    roomcheck.check_bind("0.0.0.0", tls=True, insecure_http=False)
    roomcheck.check_bind("0.0.0.0", tls=False, insecure_http=True)


def test_tls_needs_both_files(tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    key = tmp_path / "key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    assert roomcheck.check_tls("", "") is False
    with pytest.raises(RoomError, match="ROOM_CERT is given but ROOM_KEY is not"):
        roomcheck.check_tls(str(cert), "")
    with pytest.raises(RoomError, match="no such file"):
        roomcheck.check_tls(str(cert), str(tmp_path / "missing.pem"))
    with pytest.raises(RoomError, match="not a PEM certificate"):
        roomcheck.check_tls(str(key), str(key))
    assert roomcheck.check_tls(str(cert), str(key)) is True


# --- image, GPUs, state, values --------------------------------------------------------------------------
def test_a_missing_image_says_how_to_build_it():
    with pytest.raises(RoomError) as err:
        roomcheck.check_image("rmsnorm-triton", lambda image: False)
    message = str(err.value)
    assert "rmsnorm-triton is not in this host's Docker" in message
    assert "docker build -t rmsnorm-triton ." in message
    assert "make test-docker && docker tag rmsnorm-triton:standin rmsnorm-triton" in message
    assert "ROOM_IMAGE=" in message
    roomcheck.check_image("rmsnorm-triton", lambda image: True)


def test_gpus_without_the_toolkit_are_refused():
    with pytest.raises(RoomError) as err:
        roomcheck.check_gpus("all", None)
    assert "NVIDIA Container Toolkit" in str(err.value) and "leave ROOM_GPUS out" in str(err.value)
    roomcheck.check_gpus("all", "/usr/bin/nvidia-container-runtime-hook")
    roomcheck.check_gpus("", None)


@pytest.mark.parametrize("value, parsed", [("", ""), ("none", ""), ("all", "all"), ("0", ""), ("0,1", "0,1"),
                                           ("1", "1")])
def test_gpu_requests(value, parsed):
    assert roomcheck.parse_gpus(value) == parsed


def test_a_bad_gpu_request_is_refused():
    with pytest.raises(RoomError, match="ROOM_GPUS"):
        roomcheck.parse_gpus("all the GPUs")


def test_the_state_folder_must_be_outside_the_checkout(tmp_path):
    with pytest.raises(RoomError, match="inside the checkout"):
        roomcheck.check_state_dir(ROOT / "build" / "room-state", ROOT)
    roomcheck.check_state_dir(tmp_path / "state", ROOT)


@pytest.mark.parametrize("value, seconds", [("3600", 3600), ("90m", 5400), ("2h", 7200), ("20s", 20)])
def test_idle_timeouts(value, seconds):
    assert roomcheck.parse_timeout(value) == seconds


@pytest.mark.parametrize("var, value, words", [
    ("ROOM_IDLE_TIMEOUT", "5", "under 10 s"),
    ("ROOM_IDLE_TIMEOUT", "an hour", "give seconds"),
    ("ROOM_MEM", "4GB", "ROOM_MEM"),
    ("ROOM_CPUS", "0", "positive"),
    ("ROOM_PORT", "80000", "1-65535"),
    ("ROOM_NAME", "My Room", "lower-case"),
    ("ROOM_ADMIN", "Instructor!", "ROOM_ADMIN"),
    ("ROOM_SIGNUP", "yes", "ROOM_SIGNUP"),
    ("ROOM_SOLUTIONS", "hidden", "withheld"),
    ("ROOM_IP", "0.0.0.0", "clear text"),
])
def test_a_bad_setting_is_refused(var, value, words, tmp_path):
    with pytest.raises(RoomError, match=words):
        roomcheck.settings_from_env({var: value, "HOME": str(tmp_path)}, ROOT)


def test_the_defaults(tmp_path):
    s = roomcheck.settings_from_env({"HOME": str(tmp_path)}, ROOT)
    assert (s.url, s.api_port, s.hub_port, s.image, s.admin) == (
        "http://127.0.0.1:8000/", 8001, 8081, "rmsnorm-triton", "instructor")
    assert s.state_dir == tmp_path / ".local" / "state" / "rmsnorm-room" / "room"
    assert (s.idle_timeout, s.mem, s.cpus, s.gpus, s.tls, s.signup) == (3600, "4G", 2.0, "", False, True)
    assert s.solutions == "withheld"
    assert roomcheck.settings_from_env({"HOME": str(tmp_path), "ROOM_SOLUTIONS": "released"}, ROOT).solutions == (
        "released")


def test_the_release_flag_is_private_and_keeps_its_first_date(tmp_path):
    import release

    assert not release.released(tmp_path) and release.released_note(tmp_path) == "withheld"
    release.mark_released(tmp_path, "room/roomctl release-solutions")
    first = (tmp_path / release.RELEASED_FLAG).read_text()
    release.mark_released(tmp_path, "ROOM_SOLUTIONS=released")
    assert release.released(tmp_path) and (tmp_path / release.RELEASED_FLAG).read_text() == first
    assert (tmp_path / release.RELEASED_FLAG).stat().st_mode & 0o777 == 0o600
    assert release.released_note(tmp_path).startswith("released ") and "roomctl release-solutions" in first


def test_room_release_copies_what_is_missing_and_keeps_the_learners_own(tmp_path, monkeypatch):
    import runpy

    src, dst = tmp_path / "withheld", tmp_path / "course"
    (src / "solutions").mkdir(parents=True)
    (src / "solutions" / "01.ipynb").write_text("solved")
    (src / "INSTRUCTORS.md").write_text("notes")
    (dst / "solutions").mkdir(parents=True)
    (dst / "INSTRUCTORS.md").write_text("the learner's own")
    source = (ROOT / "room" / "room-release").read_text().replace('"/opt/rmsnorm-withheld"', repr(str(src)))
    script = tmp_path / "room-release.py"
    script.write_text(source.replace("os.chown(", "(lambda *a: None)(").replace("os.lchown(", "(lambda *a: None)("))
    monkeypatch.setattr(sys, "argv", ["room-release", str(dst)])
    runpy.run_path(str(script), run_name="__main__")
    assert (dst / "solutions" / "01.ipynb").read_text() == "solved"
    assert (dst / "INSTRUCTORS.md").read_text() == "the learner's own"


# --- the launcher itself, as far as it goes without Docker ------------------------------------------------
def room_env(tmp_path, port, name="unit"):
    return {"HOME": str(tmp_path), "ROOM_NAME": name, "ROOM_STATE_DIR": str(tmp_path / name),
            "ROOM_PORT": str(port), "ROOM_API_PORT": str(port + 1)}


def test_the_launcher_refuses_a_port_in_use_before_it_asks_docker(tmp_path):
    launch = load("room/launch.py")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(RoomError, match=f"port {port} on 127.0.0.1 .*already in use"):
            launch.prepare(room_env(tmp_path, port))
    assert (tmp_path / "unit").stat().st_mode & 0o777 == 0o700
    assert not (tmp_path / "unit" / "jupyterhub_cookie_secret").exists()   # nothing written before the checks


def test_a_second_launch_of_a_running_room_is_refused(tmp_path):
    launch = load("room/launch.py")
    state = tmp_path / "unit"
    state.mkdir(mode=0o700)
    settings = roomcheck.settings_from_env(room_env(tmp_path, 8000), ROOT)
    fd = launch.take_lock(state, settings)
    try:
        with pytest.raises(RoomError) as err:
            launch.take_lock(state, settings)
        assert f"already running (pid {os.getpid()}" in str(err.value) and "ROOM_NAME=unit-2" in str(err.value)
    finally:
        os.close(fd)
    os.close(launch.take_lock(state, settings))    # released with its holder


# --- the Zero-to-JupyterHub values ------------------------------------------------------------------------
yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")
z2jh = load("room/z2jh/validate.py")


def test_the_z2jh_values_validate_against_the_chart_schema():
    done = z2jh.validate()
    assert any("values.schema.json" in line for line in done)


def test_the_z2jh_values_set_what_the_room_needs():
    v = z2jh.load_values()
    su = v["singleuser"]
    assert su["cmd"] == "room-start" and su["uid"] == 10001 and su["storage"]["homeMountPath"] == "/home/learner/course"
    assert su["memory"]["limit"] and su["cpu"]["limit"]
    assert any("nvidia.com/gpu" in (p.get("kubespawner_override") or {}).get("extra_resource_limits", {})
               for p in su["profileList"])
    assert v["cull"]["enabled"] is True and v["cull"]["timeout"] > 0
    assert v["hub"]["config"]["JupyterHub"]["authenticator_class"] == "native"
    assert "cookieSecret" not in v["hub"] and "secretToken" not in v["proxy"]    # no secrets in the file


@pytest.mark.parametrize("path, value, words", [
    (("singleuser", "memmory"), {"limit": "4G"}, "Additional properties"),          # a misspelt key
    (("singleuser", "cpu", "limit"), "2", "is not of type"),                        # cpu must be a number
    (("cull", "timeout"), "1h", "is not of type"),
    (("proxy", "https", "type"), "letsencrpyt", "is not one of"),
    (("rmsnorm",), {"x": 1}, "Additional properties"),                              # an unknown top-level key
])
def test_the_schema_check_catches_a_mistake(path, value, words):
    v = copy.deepcopy(z2jh.load_values())
    node = v
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(z2jh.Invalid, match=words):
        z2jh.check_schema(v)


def test_the_init_container_must_run_the_servers_image():
    v = copy.deepcopy(z2jh.load_values())
    v["singleuser"]["image"]["tag"] = "other"
    with pytest.raises(z2jh.Invalid, match="the servers run"):
        z2jh.check_images(v)


def test_an_unknown_kubespawner_override_is_caught():
    v = copy.deepcopy(z2jh.load_values())
    v["singleuser"]["profileList"][1]["kubespawner_override"]["extra_resource_limit"] = {}
    with pytest.raises(z2jh.Invalid, match="extra_resource_limit"):
        z2jh.check_overrides(v)


def test_helm_merge():
    base = {"a": {"b": 1, "c": 2}, "d": [1], "e": 1}
    assert z2jh.helm_merge(base, {"a": {"b": 3}, "d": [2], "e": None}) == {"a": {"b": 3, "c": 2}, "d": [2]}


def test_the_vendored_chart_files_are_there():
    chart = Path(z2jh.CHART)
    assert {"values.yaml", "values.schema.json", "LICENSE", "SOURCE.md"} <= {p.name for p in chart.iterdir()}
