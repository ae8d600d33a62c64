#!/usr/bin/env bash
# What `make test-browser` needs, installed where it is missing and can be:
#   Debian's chromium and chromium-driver (apt-get, as root or through `sudo -n`),
#   selenium (pip, into the project's .venv only; `make setup` already puts it there via [browser]).
# With PYTHON= (an interpreter used as is) nothing is pip-installed: a missing module is a skip.
#
# Usage: tools/browser_deps.sh PYTHON MAY_PIP CONSTRAINTS LOG_DIR
#   PYTHON       the interpreter the browser test runs with
#   MAY_PIP      1: PYTHON is the project's .venv, selenium may be pip-installed into it;
#                0: PYTHON= was given on the command line, which installs nothing
#   CONSTRAINTS  pin file for pip (constraints.txt)
#   LOG_DIR      where apt-get's log goes
# Exit 0: ready. Exit 3: they cannot be had here; one line "skipped: <reason>" was printed.
# Any other exit: a fault of this script.
set -uo pipefail
py=$1 may_pip=$2 constraints=$3 log_dir=$4

skip() { echo "skipped: $*"; exit 3; }

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 \
    || skip "chromium or chromedriver is missing and there is no apt-get to install them (install Chromium and its chromedriver)"
  if [ "$(id -u)" = 0 ]; then
    as_root=()
  elif sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    skip "chromium or chromedriver is missing and installing them needs root: sudo apt-get install chromium chromium-driver"
  fi
  mkdir -p "$log_dir"
  log="$log_dir/apt-get.log"
  echo "Installing chromium and chromium-driver with apt-get (log: $log) ..." >&2
  # Another apt-get (a second checkout's set-up, unattended upgrades) may hold dpkg's lock: wait for it, up to
  # five minutes, rather than giving up at once and skipping the browser tests.
  lock=(-o DPkg::Lock::Timeout=300)
  { "${as_root[@]}" apt-get "${lock[@]}" update \
    && "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y --no-install-recommends \
         chromium chromium-driver
  } >"$log" 2>&1 || skip "apt-get could not install chromium chromium-driver (see $log)"
fi

# Python side: what tests/browser imports (selenium comes with `make setup`'s [browser] extra).
missing=$("$py" -c 'import importlib.util as u, sys; print(" ".join(m for m in sys.argv[1:] if u.find_spec(m) is None))' \
          pytest jupyterlab ipywidgets psutil selenium) || { echo "$py does not run" >&2; exit 1; }
if [ -n "$missing" ]; then
  [ "$may_pip" = 1 ] || skip "$py lacks $missing, and PYTHON= installs nothing (pip install 'rmsnorm[course,test,browser]' into it)"
  if [ "$missing" != selenium ]; then
    echo "$py lacks $missing: the set-up of .venv is incomplete; run make setup (or make clean CONFIRM=1 first)" >&2
    exit 1
  fi
  echo "Installing selenium into $py ..." >&2
  "$py" -m pip install -q -c "$constraints" "selenium>=4.11" >&2 || skip "pip could not install selenium into $py"
fi
exit 0
