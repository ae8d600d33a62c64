"""Withheld files (solutions/, INSTRUCTORS.md, tests/) and their release, shared by the hub and room/roomctl.

The room image keeps them in /opt/rmsnorm-withheld, which only root can read (room/Dockerfile), so a
learner's volume starts without them. Released, they are copied into a learner's volume by
room-release, run as root in a throwaway container of the room image with that volume on the course
folder: at once into every existing volume (`room/roomctl release-solutions`), and at each server's
start into that learner's volume while the state folder holds the flag file RELEASED_FLAG (a new
learner's volume is filled from the image first, since the helper mounts it where the course is).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

RELEASED_FLAG = "solutions_released"   # in the state folder: when, and by what, the files were released
WITHHELD = ("solutions/", "INSTRUCTORS.md", "tests/")
COURSE = "/home/learner/course"


def released(state: Path) -> bool:
    return (state / RELEASED_FLAG).exists()


def released_note(state: Path) -> str:
    """'released <when> (<how>)', or 'withheld'."""
    path = state / RELEASED_FLAG
    return "released " + path.read_text(encoding="utf-8").strip() if path.exists() else "withheld"


def mark_released(state: Path, how: str) -> None:
    """Write the flag (mode 600) once; a later call keeps the first date."""
    path = state / RELEASED_FLAG
    if path.exists():
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC ({how})\n")


def release_into(client, image: str, volume: str, labels: dict) -> str:
    """Copy the withheld files into one learner's volume; room-release's line (how many files)."""
    out = client.containers.run(
        image, ["python", "/usr/local/bin/room-release", COURSE], user="0", network_mode="none", remove=True,
        labels=labels, volumes={volume: {"bind": COURSE, "mode": "rw"}}, stdout=True, stderr=True)
    return out.decode(errors="replace").strip().splitlines()[-1]
