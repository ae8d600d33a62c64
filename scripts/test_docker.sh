#!/usr/bin/env bash
# `make test-docker`: build the course's Docker image and test it from the inside.
#
# No registry of container images is reachable where this runs (CI, the course's
# machines), so the image is built on a STAND-IN base instead of the real one
# (PyTorch's CUDA image, see the Dockerfile): a Debian bookworm rootfs made with
# debootstrap from Debian's packages (python3, python3-venv, ca-certificates), with
# a venv at /opt/venv first on PATH, as conda's python is in PyTorch's image. pip
# then installs torch from PyPI inside the build, exactly as the Dockerfile says.
#
# Steps (each prints one line with its time):
#   1. docker.io and debootstrap installed with apt-get where missing (root only);
#   2. dockerd started if none answers, and stopped at the end if this script started it;
#   3. the stand-in base built, or reused: it is tagged with a hash of its recipe;
#   4. the course image built with BASE_IMAGE=<stand-in>; the host's CA bundle for pip
#      (PIP_CERT, `pip config`, SSL_CERT_FILE), if any, goes in as a BuildKit secret;
#   5. in the image, as the non-root learner: python -m rmsnorm_course.check_env; pytest on
#      tests/ and the lesson notebooks (notebooks/, nbval); JupyterLab started by the
#      image's own CMD with a known token, /lab fetched over HTTP with and without it;
#      and, when a CA bundle was passed, a check that it is nowhere in the image.
# Containers this script starts are removed on every exit path.
#
# Exit status: 0 when every check passed, or with one line "skipped: <reason>" when
# Docker cannot be installed or started here; non-zero when a step or check fails.
#
# Variables: TEST_DOCKER_IMAGE (default rmsnorm-triton:standin), DEBIAN_MIRROR
# (default http://deb.debian.org/debian), JOBS (pytest-xdist workers in the image,
# default 2), DOCKER (a docker CLI to use before those on PATH), TEST_DOCKER_KEEP_CACHE
# (BuildKit cache kept after the build, default 12GB: about two versions of the image).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${TEST_DOCKER_IMAGE:-rmsnorm-triton:standin}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
JOBS=${JOBS:-2}
WORK=build/test-docker            # logs and the temporary rootfs (build/ is ignored by git)
NAME=rmsnorm-test-docker-$$       # prefix of every container this run starts
STANDIN_REPO=rmsnorm-standin-base
STANDIN_SUITE=bookworm
STANDIN_PACKAGES=python3,python3-venv,ca-certificates

T0=$SECONDS
STARTED_DOCKERD=""
ROOTFS=""
mkdir -p "$WORK"

say() { printf 'test-docker: %s\n' "$*"; }
# shellcheck source=scripts/docker_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/docker_lib.sh"
skip() { printf 'skipped: %s\n' "$*"; exit 0; }
elapsed() { printf '%d s' $((SECONDS - $1)); }

cleanup() {
  local status=$?
  if [ -n "${DOCKER_CLI:-}" ]; then
    local ids
    ids=$("$DOCKER_CLI" ps -aq --filter "name=${NAME}-" 2>/dev/null || true)
    if [ -n "$ids" ]; then
      # shellcheck disable=SC2086  # one id per word
      "$DOCKER_CLI" rm -f $ids >/dev/null 2>&1 || true
    fi
  fi
  if [ -n "$ROOTFS" ] && [ -d "$ROOTFS" ]; then rm -rf --one-file-system "$ROOTFS"; fi
  stop_dockerd
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

# --- 1. tools ------------------------------------------------------------------------
[ "$(uname -s)" = Linux ] || skip "not Linux ($(uname -s)): this test builds a Linux rootfs with debootstrap"
missing=()
command -v dockerd >/dev/null || docker info >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || skip "${missing[*]} not installed, and installing needs root"
  command -v apt-get >/dev/null || skip "${missing[*]} not installed, and there is no apt-get here"
  t=$SECONDS
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
           --no-install-recommends "${missing[@]}"; } >"$WORK/apt.log" 2>&1; then
    tail -n 5 "$WORK/apt.log" >&2
    skip "apt-get could not install ${missing[*]} (log: $WORK/apt.log)"
  fi
  say "installed ${missing[*]} with apt-get ($(elapsed $t))"
fi

# --- 2. a docker CLI with BuildKit, and a daemon -------------------------------------
# The Dockerfile mounts the CA bundle with RUN --mount=type=secret, which needs BuildKit:
# a CLI with the buildx plugin, or a pre-23 CLI (Debian bookworm's docker.io 20.10) whose
# built-in BuildKit client DOCKER_BUILDKIT=1 switches on.
DOCKER_CLI=$(buildkit_cli) || skip "no docker CLI here can build with BuildKit (needs the buildx plugin, or docker.io < 23)"
export DOCKER_BUILDKIT=1
docker() { "$DOCKER_CLI" "$@"; }

start_dockerd "$WORK/dockerd.log"
say "docker: CLI $DOCKER_CLI $(docker version --format '{{.Client.Version}}'), daemon $(docker version --format '{{.Server.Version}}')"

# --- 3. the stand-in base ------------------------------------------------------------
make_standin_rootfs() {  # $1: empty directory -> a bookworm rootfs with python3 and /opt/venv
  debootstrap --variant=minbase --include="$STANDIN_PACKAGES" "$STANDIN_SUITE" "$1" "$MIRROR"
  chroot "$1" /usr/bin/python3 -m venv /opt/venv
  chroot "$1" /opt/venv/bin/python -m pip --version
  rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*
}
STANDIN_PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The tag changes whenever the recipe does (function, suite, packages, PATH), so a stale
# base is never reused; the mirror is left out: any Debian mirror gives the same packages.
recipe_hash=$({ declare -f make_standin_rootfs; echo "$STANDIN_SUITE $STANDIN_PACKAGES $STANDIN_PATH"; } \
              | sha256sum | cut -c1-12)
BASE=$STANDIN_REPO:$STANDIN_SUITE-$recipe_hash
t=$SECONDS
if docker image inspect "$BASE" >/dev/null 2>&1; then
  say "stand-in base $BASE: cached"
else
  ROOTFS=$(mktemp -d "${TMPDIR:-/var/tmp}/rmsnorm-standin.XXXXXX")
  if ! make_standin_rootfs "$ROOTFS" >"$WORK/debootstrap.log" 2>&1; then
    tail -n 20 "$WORK/debootstrap.log" >&2
    say "FAILED: debootstrap of the stand-in base (log: $WORK/debootstrap.log)"; exit 1
  fi
  tar -C "$ROOTFS" --numeric-owner -c . \
    | docker import --change "ENV PATH=$STANDIN_PATH" --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
  rm -rf --one-file-system "$ROOTFS"; ROOTFS=""
  # Older stand-ins (other recipes) only take disk space.
  for old in $(docker images "$STANDIN_REPO" --format '{{.Repository}}:{{.Tag}}'); do
    [ "$old" = "$BASE" ] || docker rmi "$old" >/dev/null 2>&1 || true
  done
  say "stand-in base $BASE: built ($(elapsed $t))"
fi

# --- 4. the course image -------------------------------------------------------------
# pip's CA bundle, in pip's own order of precedence: PIP_CERT, then pip's config files
# (`pip config get` fails on some pip versions where `pip config list` works), then
# SSL_CERT_FILE. Behind a TLS-intercepting proxy it holds the proxy's CA.
pip_config_cert() {
  local py
  for py in .venv/bin/python python3; do
    "$py" -m pip --version >/dev/null 2>&1 || continue   # also when $py does not exist
    "$py" -m pip config get global.cert 2>/dev/null && return 0
    "$py" -m pip config list 2>/dev/null | sed -nE "s/^(global|install)\.cert='(.*)'$/\2/p" | tail -n 1
    return 0
  done
}
CERT="" CERT_FROM=""
for source in PIP_CERT "pip config" SSL_CERT_FILE; do
  case $source in
    "pip config") candidate=$(pip_config_cert) ;;
    *) candidate=${!source:-} ;;
  esac
  if [ -n "$candidate" ] && [ -f "$candidate" ]; then CERT=$candidate CERT_FROM=$source; break; fi
done
secret_args=()
if [ -n "$CERT" ]; then
  secret_args=(--secret "id=pipcert,src=$CERT")
  say "CA bundle for pip: $CERT (from $CERT_FROM), passed as the BuildKit secret 'pipcert'"
else
  say "CA bundle for pip: none configured on this host; pip in the build uses its own"
fi

t=$SECONDS
old_id=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
if ! docker build --progress=plain --build-arg "BASE_IMAGE=$BASE" "${secret_args[@]}" -t "$IMAGE" . \
      >"$WORK/build.log" 2>&1; then
  tail -n 30 "$WORK/build.log" >&2
  say "FAILED: docker build (log: $WORK/build.log)"; exit 1
fi
new_id=$(docker image inspect --format '{{.Id}}' "$IMAGE")
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then docker rmi "$old_id" >/dev/null 2>&1 || true; fi
# BuildKit keeps the layers of every earlier build; keep the most recent ones, within a bound.
docker builder prune -f --keep-storage "${TEST_DOCKER_KEEP_CACHE:-12GB}" >/dev/null
size=$(docker image inspect --format '{{.Size}}' "$IMAGE")
say "built $IMAGE on $BASE ($(elapsed $t); $(awk -v b="$size" 'BEGIN { printf "%.2f GB", b / 1e9 }'))"

# --- 5. checks inside the image --------------------------------------------------------
fail() { say "FAILED: $*"; exit 1; }

user=$(docker run --rm --name "$NAME-user" "$IMAGE" id -un)
[ "$user" = learner ] || fail "the image runs as '$user', not as learner"

if [ -n "$CERT" ]; then
  # No file of the image may be a copy of the bundle (same size and sha256) unless the base
  # already had it (a host without a proxy may use the very bundle Debian ships), and the
  # secret's mount point must be gone: BuildKit mounts it only while its RUN runs.
  copies_of_cert() {  # $1: image, $2: container name, stdin: a file to plant first -> paths
    docker run -i --rm --user 0 --name "$2" "$1" sh -c \
      'cat >/root/planted; [ -s /root/planted ] || rm /root/planted; ls -d /run/secrets/pipcert 2>/dev/null; find / -xdev -type f -size "$1"c -exec sha256sum {} + | sed -n "s|^$2  ||p"' \
      sh "$(stat -c %s "$CERT")" "$(sha256sum <"$CERT" | cut -d' ' -f1)" | sort
  }
  in_image=$(copies_of_cert "$IMAGE" "$NAME-cert" </dev/null) || fail "could not search $IMAGE for the CA bundle"
  in_base=$(copies_of_cert "$BASE" "$NAME-cert-base" </dev/null) || fail "could not search $BASE for the CA bundle"
  # The search must find the bundle where it is: planted in the base, it is found.
  planted=$(copies_of_cert "$BASE" "$NAME-cert-plant" <"$CERT") || fail "could not search $BASE for the CA bundle"
  [ "$(comm -23 <(echo "$planted") <(echo "$in_base"))" = /root/planted ] \
    || fail "the search for the CA bundle missed a copy planted in the base (found: $planted)"
  found=$(comm -23 <(echo "$in_image") <(echo "$in_base"))
  [ -z "$found" ] || fail "the CA bundle passed to the build is in the image: $found"
  say "the CA bundle is not in the image (no new file of its size and sha256, though a planted copy is found; no /run/secrets/pipcert)"
fi

t=$SECONDS
docker run --rm --init --name "$NAME-env" "$IMAGE" python -m rmsnorm_course.check_env | sed 's/^/  /'
say "check_env passed ($(elapsed $t))"

t=$SECONDS
# The same pytest options as `make test`; the image has no make (neither has PyTorch's).
# --init: an init process reaps what the checkers' child processes leave (without it pytest, as PID 1,
# once hung at the end of this run); timeout: a hang fails this step instead of eating CI's budget.
if ! timeout --kill-after=30 1800 "$DOCKER_CLI" run --rm --init --name "$NAME-tests" "$IMAGE" sh -c \
     'mkdir -p "$FIGURES_DIR" && exec python -m pytest -q -p no:cacheprovider -n "$1" --dist load tests notebooks --nbval-lax --nbval-current-env --nbval-cell-timeout=1200' \
     sh "$JOBS" >"$WORK/pytest.log" 2>&1; then
  tail -n 40 "$WORK/pytest.log" >&2
  fail "pytest tests notebooks in the image (log: $WORK/pytest.log)"
fi
say "pytest in the image: $(tail -n 1 "$WORK/pytest.log" | tr -d '=' | sed 's/^ *//; s/ *$//') ($(elapsed $t))"

t=$SECONDS
TOKEN=test-docker-$RANDOM$RANDOM
# The image's own CMD (jupyter lab on 0.0.0.0:8888); JUPYTER_TOKEN fixes the token.
docker run -d --init --name "$NAME-lab" -e "JUPYTER_TOKEN=$TOKEN" -p 127.0.0.1::8888 "$IMAGE" >/dev/null
port=$(docker port "$NAME-lab" 8888/tcp | head -n 1 | sed 's/.*://')
url=http://127.0.0.1:$port
code=000
for _ in $(seq 120); do
  code=$(curl -s -o "$WORK/lab.html" -w '%{http_code}' "$url/lab?token=$TOKEN" || true)
  [ "$code" = 200 ] && break
  [ "$(docker inspect -f '{{.State.Running}}' "$NAME-lab")" = true ] || break
  sleep 0.5
done
if [ "$code" != 200 ]; then
  docker logs "$NAME-lab" 2>&1 | tail -n 20 >&2
  fail "JupyterLab did not answer 200 on $url/lab?token=... (last HTTP status $code)"
fi
grep -q '<title>JupyterLab</title>' "$WORK/lab.html" || fail "$url/lab answered 200 without JupyterLab's page"
api=$(curl -s -o /dev/null -w '%{http_code}' "$url/api/contents" || true)
[ "$api" = 403 ] || fail "$url/api/contents without the token answered $api, not 403"
api=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: token $TOKEN" "$url/api/contents" || true)
[ "$api" = 200 ] || fail "$url/api/contents with the token answered $api, not 200"
docker rm -f "$NAME-lab" >/dev/null
say "JupyterLab answered /lab with the token, refused the API without it ($(elapsed $t))"

say "passed in $(elapsed $T0)"
