# shellcheck shell=bash
# Sourced by scripts/test_docker.sh, room/test_hub.sh and room/build_image.sh: the Docker steps they share.
#
#   buildkit_cli        prints a docker CLI that can build with BuildKit (the buildx plugin, or a
#                       pre-23 CLI whose built-in BuildKit client DOCKER_BUILDKIT=1 switches on);
#                       $DOCKER first, then every docker on PATH; returns 1 when there is none
#   start_dockerd LOG   starts dockerd when no daemon answers (root only), waits for it, and sets
#                       STARTED_DOCKERD to its pid; calls `skip` (the caller's) when it cannot
#   stop_dockerd        stops the dockerd that start_dockerd started, if any (in the caller's cleanup)
#
# The caller defines `say MESSAGE` and `skip REASON` (print "skipped: REASON", exit 0).

buildkit_cli() {
  local cli dir version path_dirs
  IFS=: read -ra path_dirs <<<"$PATH"   # every docker on PATH (`type -aP` can show the hashed one only)
  for cli in ${DOCKER:-} $(for dir in "${path_dirs[@]}"; do [ -x "$dir/docker" ] && readlink -f "$dir/docker"; done | awk '!seen[$0]++'); do
    if "$cli" buildx version >/dev/null 2>&1; then echo "$cli"; return 0; fi
    version=$("$cli" version --format '{{.Client.Version}}' 2>/dev/null || true)
    if [ -n "$version" ] && [ "${version%%.*}" -lt 23 ] 2>/dev/null; then echo "$cli"; return 0; fi
  done
  return 1
}

STARTED_DOCKERD=${STARTED_DOCKERD:-}

start_dockerd() {  # $1: the daemon's log file
  local log=$1 t=$SECONDS
  docker info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null || skip "no Docker daemon answers and there is no dockerd to start"
  [ "$(id -u)" = 0 ] || skip "no Docker daemon answers, and starting dockerd needs root"
  dockerd >"$log" 2>&1 &
  STARTED_DOCKERD=$!
  for _ in $(seq 120); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$STARTED_DOCKERD" 2>/dev/null || break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    tail -n 5 "$log" >&2
    skip "dockerd did not start (log: $log)"
  fi
  say "started dockerd, pid $STARTED_DOCKERD ($((SECONDS - t)) s)"
}

stop_dockerd() {
  [ -n "$STARTED_DOCKERD" ] || return 0
  kill -TERM "$STARTED_DOCKERD" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$STARTED_DOCKERD" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$STARTED_DOCKERD" 2>/dev/null || true
  wait "$STARTED_DOCKERD" 2>/dev/null || true
  say "stopped the dockerd this run started (pid $STARTED_DOCKERD)"
  STARTED_DOCKERD=""
}
