#!/usr/bin/env bash
# `make room`: the hub's venv and proxy (room/setup.sh), then room/launch.py, which checks everything
# and runs JupyterHub in the foreground (Ctrl-C stops it; the learners' volumes are kept).
# Settings: the ROOM_* variables, on make's command line or in the environment (room/README.md, "A room on JupyterHub").
set -euo pipefail
cd "$(dirname "$0")/.."
bash room/setup.sh
exec "${ROOM_BUILD:-build/room}/venv/bin/python" room/launch.py
