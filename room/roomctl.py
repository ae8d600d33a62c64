"""room/roomctl: the instructor's commands for a running room (`make room`), from a second terminal.

  room/roomctl status                 the room's address; each learner: server running?, last activity
  room/roomctl add NAME...            create learners; prints each one's initial password
  room/roomctl passwords [NAME...]    the initial passwords again (learner_passwords.tsv in the state folder)
  room/roomctl start|stop NAME...|--all   start or stop learners' servers (their work stays in their volume)
  room/roomctl collect [NAME...] [--to DIR]   copy each learner's course folder out of their volume
  room/roomctl release-solutions      copy solutions/, INSTRUCTORS.md and tests/ into every learner's folder
                                      (servers running or not; learners whose first start comes later get them then)
  room/roomctl down                   stop the hub (as Ctrl-C in its terminal does): servers stopped, volumes kept
  room/roomctl purge [--yes]          after `down`: list (or, with --yes, delete) the room's containers,
                                      volumes, network

Options before the command: --room NAME (default $ROOM_NAME or room), --state-dir DIR (default
$ROOM_STATE_DIR or ~/.local/state/rmsnorm-room/NAME). It talks to the hub's REST API with the
room-ctl service's token (the state folder's roomctl_token), at the hub's own address on the room's
network, and to Docker for collect, release-solutions and purge; purge deletes only what carries the room's label.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import os
import signal
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import release  # noqa: E402
import roomcheck  # noqa: E402


class Room:
    def __init__(self, state: Path):
        self.state = state
        try:
            self.info = json.loads((state / "room.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            sys.exit(
                f"roomctl: no room in {state} (no room.json): has `make room` run with this ROOM_NAME / ROOM_STATE_DIR?"
            )
        self.name = self.info["name"]
        self.label = self.info["label"]
        self.api = f"http://{self.info['gateway']}:{self.info['hub_port']}/hub/api"

    # --- the hub -----------------------------------------------------------------------------------
    def hub_pid(self) -> int | None:
        """The hub's pid while it holds the room's lock, else None."""
        path = self.state / "room.lock"
        if not path.exists():
            return None
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 64, 0).decode().strip()
            return int(text) if text.isdigit() else -1
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def request(self, method: str, path: str, **kwargs):
        import requests

        token = (self.state / "roomctl_token").read_text(encoding="utf-8").strip()
        try:
            r = requests.request(
                method, self.api + path, headers={"Authorization": f"token {token}"}, timeout=60, **kwargs
            )
        except requests.ConnectionError:
            sys.exit(f"roomctl: the hub of room {self.name!r} does not answer at {self.api}: is `make room` running?")
        return r

    def users(self) -> list[dict]:
        r = self.request("GET", "/users", params={"include_stopped_servers": "0"})
        r.raise_for_status()
        return r.json()

    # --- Docker ------------------------------------------------------------------------------------
    def docker(self):
        import docker

        return docker.from_env(timeout=120)

    def volume(self, user: str) -> str:
        return f"rmsnorm-{self.name}-work-{user}"


def cmd_status(room: Room, args) -> int:
    pid = room.hub_pid()
    print(f"room {room.name!r}: {room.info['url']}  hub {'running, pid ' + str(pid) if pid else 'NOT running'}")
    print(f"  image {room.info['hub_image']}; per learner {room.info['mem']}, {room.info['cpus']:g} CPUs, "
          f"GPUs: {room.info['gpus'] or 'none'}; idle servers stopped after {room.info['idle_timeout']} s")
    print(f"  solutions/, INSTRUCTORS.md, tests/: {release.released_note(room.state)}")
    if not pid:
        return 1
    users = room.users()
    print(f"  {'user':<16} {'admin':<6} {'server':<10} last activity (UTC)")
    for u in sorted(users, key=lambda u: u["name"]):
        server = (u.get("servers") or {}).get("")
        state = "-" if not server else ("ready" if server.get("ready") else (server.get("pending") or "pending"))
        print(f"  {u['name']:<16} {'yes' if u.get('admin') else '':<6} {state:<10} {u.get('last_activity') or '-'}")
    waiting = room.info["signup"] and "sign-ups wait for approval at " + room.info["url"] + "hub/authorize"
    if waiting:
        print(f"  ({waiting})")
    return 0


def read_passwords(room: Room) -> dict[str, str]:
    path = Path(room.info["learner_passwords"])
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "\t" in line:
            name, pw = line.split("\t", 1)
            out[name] = pw
    return out


def cmd_add(room: Room, args) -> int:
    r = room.request("POST", "/users", json={"usernames": args.names})
    if r.status_code == 409:
        sys.exit(f"roomctl: {r.json().get('message', r.text)} (nothing added; leave that name out)")
    if r.status_code >= 400:
        sys.exit(f"roomctl: the hub refused: {r.status_code} {r.text[:300]}")
    pw = read_passwords(room)
    print(f"added {len(args.names)} learner(s); hand each one the address {room.info['url']} and their password:")
    for name in args.names:
        print(f"  {name}\t{pw.get(name, '(no password recorded: see the hub log)')}")
    print("They can change it at " + room.info["url"] + "hub/change-password once logged in.")
    return 0


def cmd_passwords(room: Room, args) -> int:
    pw = read_passwords(room)
    for name in args.names or sorted(pw):
        print(f"{name}\t{pw.get(name, '(none recorded: signed up themselves, or not added)')}")
    return 0


def _targets(room: Room, args) -> list[str]:
    if args.all:
        return [u["name"] for u in room.users() if u["name"] != room.info["admin"]]
    if not args.names:
        sys.exit("roomctl: name the learners, or give --all")
    return args.names


def _hub_message(r) -> str:
    try:
        return r.json().get("message") or r.text
    except ValueError:
        return r.text


def cmd_start_stop(room: Room, args) -> int:
    status = 0
    words = {("start", 201): "started", ("start", 202): "starting (the hub is still waiting for it)",
             ("stop", 204): "stopped", ("stop", 202): "stopping"}
    for name in _targets(room, args):
        method = "POST" if args.command == "start" else "DELETE"
        r = room.request(method, f"/users/{name}/server")
        said = words.get((args.command, r.status_code))
        if said is None and r.status_code == 400:
            said = f"nothing to do ({_hub_message(r)})"
        if said is None:
            print(f"{name}: {args.command} failed ({r.status_code}):\n  " + _hub_message(r).replace("\n", "\n  "))
            status = 1
        else:
            print(f"{name}: {said}")
    return status


def cmd_collect(room: Room, args) -> int:
    client = room.docker()
    dest = Path(args.to or Path.home() / "rmsnorm-work" / f"{room.name}-{dt.date.today().isoformat()}").expanduser()
    try:
        roomcheck.check_state_dir(dest, Path(room.info["checkout"]))
    except roomcheck.RoomError:
        sys.exit(f"roomctl: {dest} is inside the checkout; collect the learners' work outside it (--to DIR)")
    names = args.names or sorted(
        v.attrs["Labels"][f"{room.label}.user"]
        for v in client.volumes.list(filters={"label": f"{room.label}={room.name}"})
        if f"{room.label}.user" in (v.attrs.get("Labels") or {}))
    status = 0
    for name in names:
        target = dest / name
        try:
            client.volumes.get(room.volume(name))
        except Exception:  # noqa: BLE001
            print(f"{name}: no volume {room.volume(name)}")
            status = 1
            continue
        target.mkdir(parents=True, exist_ok=True)
        # A container that never starts: Docker reads the volume through it (read-only).
        helper = client.containers.create(
            room.info["hub_image"], command=["true"], network_mode="none",
            labels={room.label: room.name, f"{room.label}.collect": name},
            volumes={room.volume(name): {"bind": "/work", "mode": "ro"}})
        try:
            stream, _ = helper.get_archive("/work/.")
            tmp = target.with_suffix(".tar")
            with open(tmp, "wb") as f:
                for chunk in stream:
                    f.write(chunk)
            with tarfile.open(tmp) as tar:
                tar.extractall(target, filter="data")
            tmp.unlink()
        finally:
            helper.remove(force=True)
        n = sum(1 for _ in target.rglob("*"))
        print(f"{name}: {n} files and folders in {target}")
    return status


def cmd_release(room: Room, args) -> int:
    # The flag first: a server that starts while this runs gets the files at its start.
    release.mark_released(room.state, "room/roomctl release-solutions")
    client = room.docker()
    volumes = sorted((v.attrs["Labels"][f"{room.label}.user"], v.name)
                     for v in client.volumes.list(filters={"label": f"{room.label}={room.name}"})
                     if f"{room.label}.user" in (v.attrs.get("Labels") or {}))
    status = 0
    for name, volume in volumes:
        try:
            said = release.release_into(client, room.info["hub_image"], volume,
                                        {room.label: room.name, f"{room.label}.release": name})
        except Exception as e:  # noqa: BLE001 - say which learner, go on with the others
            print(f"{name}: FAILED ({type(e).__name__}: {str(e)[:300]})")
            status = 1
            continue
        print(f"{name}: {said.removeprefix('room-release: ')}")
    print(f"released {', '.join(release.WITHHELD)} into {len(volumes)} learners' folders (a running JupyterLab "
          "shows them at its next refresh); learners whose server first starts later get them at that start.")
    return status


def cmd_down(room: Room, args) -> int:
    pid = room.hub_pid()
    if not pid or pid < 0:
        print(f"room {room.name!r}: the hub is not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    for _ in range(240):
        if room.hub_pid() is None:
            print(f"room {room.name!r}: hub stopped (its servers stopped; volumes kept: room/roomctl collect)")
            return 0
        time.sleep(0.5)
    print(f"room {room.name!r}: the hub (pid {pid}) is still stopping after 120 s", file=sys.stderr)
    return 1


def cmd_purge(room: Room, args) -> int:
    if room.hub_pid():
        sys.exit("roomctl: the hub is running; `room/roomctl down` first (and `collect` what you want to keep)")
    client = room.docker()
    flt = {"label": f"{room.label}={room.name}"}
    containers = client.containers.list(all=True, filters=flt)
    volumes = client.volumes.list(filters=flt)
    networks = client.networks.list(filters=flt)
    for kind, items in (("container", containers), ("volume", volumes), ("network", networks)):
        for item in items:
            print(f"{'deleting' if args.yes else 'would delete'} {kind} {item.name}")
    if not args.yes:
        print("Nothing deleted. Learners' volumes hold their work: `room/roomctl collect` first, then purge --yes.")
        return 0
    for item in containers:
        item.remove(force=True)
    for item in volumes:
        item.remove()
    for item in networks:
        item.remove()
    print(f"room {room.name!r}: purged. Its state folder {room.state} (database, secrets) is left; delete it by hand.")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="room/roomctl", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--room", default=os.environ.get("ROOM_NAME", "room"))
    p.add_argument("--state-dir", default=os.environ.get("ROOM_STATE_DIR", ""))
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("status")
    a = sub.add_parser("add")
    a.add_argument("names", nargs="+")
    a = sub.add_parser("passwords")
    a.add_argument("names", nargs="*")
    for name in ("start", "stop"):
        a = sub.add_parser(name)
        a.add_argument("names", nargs="*")
        a.add_argument("--all", action="store_true")
    a = sub.add_parser("collect")
    a.add_argument("names", nargs="*")
    a.add_argument("--to", default="")
    sub.add_parser("release-solutions")
    sub.add_parser("down")
    a = sub.add_parser("purge")
    a.add_argument("--yes", action="store_true")
    args = p.parse_args(argv)
    state = (
        Path(args.state_dir).expanduser()
        if args.state_dir
        else roomcheck.default_state_dir(args.room, dict(os.environ))
    )
    room = Room(state)
    handler = {"status": cmd_status, "add": cmd_add, "passwords": cmd_passwords, "start": cmd_start_stop,
               "stop": cmd_start_stop, "collect": cmd_collect, "release-solutions": cmd_release, "down": cmd_down,
               "purge": cmd_purge}[args.command]
    return handler(room, args)


if __name__ == "__main__":
    sys.exit(main())
