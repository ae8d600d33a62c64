#!/usr/bin/env bash
# room/build_image.sh COURSE_IMAGE ROOM_IMAGE [LOG]: build the room's image (room/Dockerfile) on
# the course image. Called by room/launch.py (`make room`) and room/test_hub.sh when ROOM_IMAGE is
# not there yet; the tag carries the course image's id and a hash of the recipe, so a rebuilt course
# image or a changed pin gives a new tag and a stale room image is never used.
#
# As scripts/test_docker.sh does for the course image: a docker CLI that can build with BuildKit
# (the Dockerfile mounts pip's CA bundle as a secret), and the host's CA bundle for pip, if any
# (PIP_CERT, `pip config`, SSL_CERT_FILE), passed as the BuildKit secret 'pipcert', in no layer.
# Every room image is labelled org.rmsnorm.room.image=1 and with the course image's id. Older room
# images are removed when they were built on the same course image (an older recipe) or on a course
# image that has no tag left (rebuilt since); one still used by a container is kept (plain `docker rmi`).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 COURSE_IMAGE ROOM_IMAGE [LOG]" >&2; exit 2; }
COURSE_IMAGE=$1 ROOM_IMAGE=$2 LOG=${3:-build/room/build-image.log}
mkdir -p "$(dirname "$LOG")"

# shellcheck source=scripts/docker_lib.sh
source scripts/docker_lib.sh  # buildkit_cli
if ! DOCKER_CLI=$(buildkit_cli); then
  echo "room: no docker CLI here can build with BuildKit (needs the buildx plugin, or docker.io < 23);" \
       "build the room image by hand (room/Dockerfile says how) and give it as ROOM_HUB_IMAGE=<tag>" >&2
  exit 1
fi
export DOCKER_BUILDKIT=1

cert=""
for candidate in "${PIP_CERT:-}" \
                 "$( { .venv/bin/python -m pip config get global.cert || python3 -m pip config get global.cert; } 2>/dev/null || true)" \
                 "${SSL_CERT_FILE:-}"; do
  if [ -n "$candidate" ] && [ -f "$candidate" ]; then cert=$candidate; break; fi
done
secret_args=()
[ -z "$cert" ] || secret_args=(--secret "id=pipcert,src=$cert")

course_id=$("$DOCKER_CLI" image inspect --format '{{.Id}}' "$COURSE_IMAGE")
t=$SECONDS
echo "room: building $ROOM_IMAGE on $COURSE_IMAGE (log: $LOG)"
if ! "$DOCKER_CLI" build --progress=plain --build-arg "COURSE_IMAGE=$COURSE_IMAGE" "${secret_args[@]}" \
       --label org.rmsnorm.room.image=1 --label "org.rmsnorm.room.course-image=$course_id" \
       -t "$ROOM_IMAGE" -f room/Dockerfile room >"$LOG" 2>&1; then
  tail -n 25 "$LOG" >&2
  echo "room: FAILED to build $ROOM_IMAGE (log: $LOG)" >&2
  exit 1
fi
new_id=$("$DOCKER_CLI" image inspect --format '{{.Id}}' "$ROOM_IMAGE")
for old in $("$DOCKER_CLI" images --filter label=org.rmsnorm.room.image=1 --format '{{.Repository}}:{{.Tag}}' | sort -u); do
  [ "$old" = "$ROOM_IMAGE" ] && continue
  old_id=$("$DOCKER_CLI" image inspect --format '{{.Id}}' "$old" 2>/dev/null || true)
  if [ -z "$old_id" ] || [ "$old_id" = "$new_id" ]; then continue; fi
  base=$("$DOCKER_CLI" image inspect --format '{{index .Config.Labels "org.rmsnorm.room.course-image"}}' "$old")
  base_tags=$("$DOCKER_CLI" image inspect --format '{{len .RepoTags}}' "$base" 2>/dev/null || echo 0)
  if [ "$base" = "$course_id" ] || [ "$base_tags" = 0 ]; then
    "$DOCKER_CLI" rmi "$old" >/dev/null 2>&1 || continue
    # A course image rebuilt since (scripts/test_docker.sh could not remove it while this one
    # was built on it) goes too, once nothing is built on it and it has no tag left.
    [ "$base_tags" != 0 ] || "$DOCKER_CLI" rmi "$base" >/dev/null 2>&1 || true
  fi
done
echo "room: built $ROOM_IMAGE ($((SECONDS - t)) s)"
