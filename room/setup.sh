#!/usr/bin/env bash
# room/setup.sh: the hub's own venv and proxy, from the pins in room/, under build/room/ (ignored by
# git, left out of every image by .dockerignore); nothing goes into the course's .venv.
#   build/room/venv   python -m venv, then pip install -r room/requirements.txt -c room/constraints.txt
#   build/room/proxy  npm ci of room/proxy/package-lock.json (configurable-http-proxy 5.2.0, needs Node >= 20)
# Each is redone only when its pin files change (a hash of them is kept beside it).
# Variables: PYTHON_BOOT (default python3, 3.10 or newer), ROOM_BUILD (default build/room), PIP_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOM_BUILD=${ROOM_BUILD:-build/room}
PYTHON_BOOT=${PYTHON_BOOT:-python3}
venv=$ROOM_BUILD/venv
proxy=$ROOM_BUILD/proxy
mkdir -p "$ROOM_BUILD"

want=$(cat room/requirements.txt room/constraints.txt | sha256sum | cut -c1-16)
if [ "$(cat "$venv/.room-pins" 2>/dev/null || true)" != "$want" ]; then
  "$PYTHON_BOOT" -c 'import sys; sys.exit(None if sys.version_info >= (3, 10) else "room: the hub needs Python 3.10 or newer; " + sys.executable + " is " + sys.version.split()[0] + ". Try: make room PYTHON_BOOT=python3.11")'
  t=$SECONDS
  rm -rf "$venv"
  "$PYTHON_BOOT" -m venv "$venv"
  # shellcheck disable=SC2086  # PIP_ARGS: several words
  if ! "$venv/bin/python" -m pip install ${PIP_ARGS:-} -r room/requirements.txt -c room/constraints.txt \
       >"$ROOM_BUILD/pip.log" 2>&1; then
    tail -n 20 "$ROOM_BUILD/pip.log" >&2; echo "room: pip could not install the hub (log: $ROOM_BUILD/pip.log)" >&2; exit 1
  fi
  echo "$want" >"$venv/.room-pins"
  echo "room: hub venv $venv ready ($((SECONDS - t)) s): $("$venv/bin/jupyterhub" --version | tail -n 1 | sed 's/^/jupyterhub /')"
fi

want=$(cat room/proxy/package.json room/proxy/package-lock.json | sha256sum | cut -c1-16)
if [ "$(cat "$proxy/.room-pins" 2>/dev/null || true)" != "$want" ]; then
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "room: Node.js and npm are needed for configurable-http-proxy (Node >= 20: nodejs.org, or NodeSource's packages)" >&2
    exit 1
  fi
  major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$major" -ge 20 ] || { echo "room: configurable-http-proxy 5.2.0 needs Node.js >= 20; this node is $(node --version)" >&2; exit 1; }
  t=$SECONDS
  rm -rf "$proxy"
  mkdir -p "$proxy"
  cp room/proxy/package.json room/proxy/package-lock.json "$proxy/"
  if ! (cd "$proxy" && npm ci --omit=dev --no-audit --no-fund) >"$ROOM_BUILD/npm.log" 2>&1; then
    tail -n 20 "$ROOM_BUILD/npm.log" >&2; echo "room: npm could not install configurable-http-proxy (log: $ROOM_BUILD/npm.log)" >&2; exit 1
  fi
  echo "$want" >"$proxy/.room-pins"
  echo "room: configurable-http-proxy $("$proxy/node_modules/.bin/configurable-http-proxy" --version) in $proxy ($((SECONDS - t)) s)"
fi
