#!/usr/bin/env bash
# `make test-hub`: the course's JupyterHub room, tested end to end on this host, on loopback.
#
#   1. the hub's venv and configurable-http-proxy from the pins in room/ (room/setup.sh);
#   2. a Docker daemon: dockerd started if none answers (root), and stopped at the end if this
#      script started it, as scripts/test_docker.sh does;
#   3. the course image `make test-docker` built (TEST_DOCKER_IMAGE, default rmsnorm-triton:standin),
#      reused; where it is missing, scripts/test_docker.sh builds it the same way (and tests it);
#   4. room/z2jh/validate.py --traits: the Kubernetes values, hub.config checked against the classes
#      installed in the hub's venv (make test checks the rest of that file without them);
#   5. room/test_hub.py: the room's steps, each printed with its time (its docstring lists them).
#
# Exit status: 0 when every check passed, or with one line "skipped: <reason>" when Docker cannot be
# started here (as make test-docker); non-zero when a step fails. Logs: build/test-hub/.
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=build/test-hub
mkdir -p "$WORK"
T0=$SECONDS
STARTED_DOCKERD=""
say() { printf 'test-hub: %s\n' "$*"; }
skip() { printf 'skipped: %s\n' "$*"; exit 0; }
# shellcheck source=scripts/docker_lib.sh
source scripts/docker_lib.sh

cleanup() {
  local status=$?
  stop_dockerd
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

[ "$(uname -s)" = Linux ] || skip "not Linux ($(uname -s))"

t=$SECONDS
bash room/setup.sh
say "hub venv and proxy ready ($((SECONDS - t)) s)"

# --- a Docker daemon ---------------------------------------------------------------------------
if ! docker info >/dev/null 2>&1 && ! command -v dockerd >/dev/null; then
  # scripts/test_docker.sh installs docker.io where it can; without a daemon there is no room.
  skip "no Docker daemon answers and there is no dockerd (make test-docker installs docker.io)"
fi
start_dockerd "$WORK/dockerd.log"

# --- the course image --------------------------------------------------------------------------
IMAGE=${TEST_DOCKER_IMAGE:-rmsnorm-triton:standin}
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "$IMAGE is not built yet: building it as make test-docker does (bash scripts/test_docker.sh)"
  bash scripts/test_docker.sh
  docker image inspect "$IMAGE" >/dev/null 2>&1 || skip "$IMAGE could not be built here (see make test-docker's line above)"
fi
say "course image $IMAGE: $(docker image inspect --format '{{.Id}}' "$IMAGE" | cut -c8-19)"

# --- the Zero-to-JupyterHub values, with the hub's own classes ---------------------------------
build/room/venv/bin/python room/z2jh/validate.py --traits | sed 's/^/test-hub: /'

# --- the room ----------------------------------------------------------------------------------
status=0
TEST_DOCKER_IMAGE=$IMAGE build/room/venv/bin/python room/test_hub.py || status=$?
say "make test-hub: $([ $status = 0 ] && echo passed || echo FAILED) in $((SECONDS - T0)) s"
exit $status
