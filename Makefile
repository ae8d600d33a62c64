# RMSNorm in Triton, verified before it is accelerated: set-up, tests and notebook runs.
#
#   make lab     set up .venv if needed, then open JupyterLab on lesson 01 (notebooks/01_formula.ipynb)
#   make test    set up .venv if needed, then run tests/ and every notebook (nbval)
#   make test-browser   lessons 01, 05, 08 and exercise 01 in JupyterLab in a headless Chromium
#   make lint    set up .venv if needed, then ruff check (rules: pyproject.toml, [tool.ruff])
#   make help    list every target
#
# Variables (give them on the command line, e.g. `make test PYTHON=python3`):
#   PYTHON       An existing interpreter to use AS IS. When it is given, no .venv is made and
#                NOTHING is installed: that interpreter must already have torch, triton and
#                the tools of the target (pytest + nbval for test, ruff for lint,
#                jupyterlab for lab, nbconvert for run). This is how the GPU machine runs `make test PYTHON=python3`.
#                Only the command line counts: a PYTHON variable in the environment is ignored,
#                so a stray one cannot skip the set-up.
#   PYTHON_BOOT  Interpreter (3.10 or newer) that creates .venv when PYTHON is not given.
#                Default: python3.
#   VENV         Where the virtual environment goes. Default: .venv
#   CONSTRAINTS  Pin file applied to every pip install. Default: constraints.txt
#   PIP_ARGS     Extra pip arguments for the set-up, e.g. PIP_ARGS="--no-cache-dir".
#   JOBS         pytest-xdist workers for `make test`, a number or auto; 1 runs serially.
#                Used only when pytest-xdist is importable. Tests are handed out one by one
#                and each notebook whole (--dist load + conftest.py). Default: 2; measured on
#                the 2-core CI machine, 2 workers cut the full run by about 40 %.
#   PYTEST_ARGS  Extra pytest arguments, e.g. PYTEST_ARGS="-x -k forward".
#   TESTS        The test paths `make test` runs besides the notebooks. Default: tests
#   NOTEBOOKS    The notebooks `make test` runs (nbval). Default: every .ipynb under notebooks/,
#                solutions/ and exercises/. A part of the suite is e.g. `make test TESTS=tests/course
#                NOTEBOOKS=`; the GPU machine's 600-s calls run the whole suite as two such parts.
#   NB_TIMEOUT   Seconds one notebook cell may run, in `make test` and `make run`. Default: 1200.
#   LAB_ARGS     Extra `jupyter lab` arguments, e.g. LAB_ARGS="--no-browser --port 8890".
#   BUILD_DIR    Where `make run` writes executed notebooks and HTML. Default: build
#   FIGURES_DIR  Where notebooks save figures; exported to every kernel (test, run, lab).
#                Default: <repo>/build/figures. Notebooks read it with os.environ["FIGURES_DIR"].
#   CONFIRM      `make clean` only lists what it would delete; `make clean CONFIRM=1` deletes.
#   FORCE        `make exercises FORCE=1` regenerates exercises/ even over uncommitted changes there.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

PYTHON_BOOT ?= python3
VENV        ?= .venv
CONSTRAINTS ?= constraints.txt
PIP_ARGS    ?=
JOBS        ?= 2
PYTEST_ARGS ?=
TESTS       ?= $(wildcard tests)
NB_TIMEOUT  ?= 1200
LAB_ARGS    ?=
BUILD_DIR   ?= build
CONFIRM     ?=
FORCE       ?=

export FIGURES_DIR ?= $(CURDIR)/$(BUILD_DIR)/figures
# The notebooks' kernels start in the notebook's own folder: put the checkout on their path,
# so `import rmsnorm` and `import rmsnorm_course` work with PYTHON=... too (an editable install points to the same files).
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

STAMP := $(VENV)/.setup-done
ifeq ($(origin PYTHON),command line)
  PY    := $(PYTHON)
  SETUP :=
else
  PY    := $(VENV)/bin/python
  SETUP := $(STAMP)
  export VIRTUAL_ENV := $(abspath $(VENV))
  export PATH := $(abspath $(VENV))/bin:$(PATH)
endif

# Notebooks are found by globbing (any depth), so a folder that does not exist yet adds nothing.
NOTEBOOK_DIRS := notebooks solutions exercises
NOTEBOOKS := $(sort $(if $(wildcard $(NOTEBOOK_DIRS)),$(shell find $(wildcard $(NOTEBOOK_DIRS)) -name "*.ipynb" -not -path "*/.ipynb_checkpoints/*")))
EXECUTED  := $(patsubst %.ipynb,$(BUILD_DIR)/executed/%.ipynb,$(NOTEBOOKS))
HTML      := $(patsubst %.ipynb,$(BUILD_DIR)/html/%.html,$(NOTEBOOKS))
PACKAGE_SOURCES := $(wildcard rmsnorm/*.py rmsnorm/*/*.py rmsnorm_course/*.py rmsnorm_course/*/*.py)

# $(call require,module ...): stop with a clear message when $(PY) lacks a module.
define require
@$(PY) -c 'import importlib.util as u, sys; missing = [m for m in sys.argv[1:] if u.find_spec(m) is None]; sys.exit("$(PY) lacks: " + ", ".join(missing) + ". Run make without PYTHON= to set up $(VENV), or install the project extras into it." if missing else None)' $(1)
endef

.PHONY: help setup lab test lint test-browser test-docker run check-env clean exercises strip room test-hub

help:  ## List the targets and what they do.
	@echo "Usage: make <target> [VARIABLE=value ...]   (variables: see the top of the Makefile)"
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | sed -E 's/^([a-z-]+):.*## /  \1\t/' | expand -t 16

setup: $(SETUP)  ## Create .venv: pinned torch/triton (constraints.txt), then the project with [dev] extras (course included).
ifneq ($(SETUP),)
	@echo "$(VENV) is up to date ($(PY))."
else
	@echo "PYTHON=$(PY) given: nothing to set up, nothing installed."
endif

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@$(PYTHON_BOOT) -c 'import sys; sys.exit(None if sys.version_info >= (3, 10) else "Python 3.10+ is needed for $(VENV); $(PYTHON_BOOT) is " + sys.version.split()[0] + ". Try: make setup PYTHON_BOOT=python3.11")'
	$(PYTHON_BOOT) -m venv $(VENV)
	$(VENV)/bin/python -m pip install $(PIP_ARGS) -c $(CONSTRAINTS) torch "triton; platform_system == 'Linux'"
	$(VENV)/bin/python -m pip install $(PIP_ARGS) -c $(CONSTRAINTS) -e ".[dev]"
	@touch $@
	@echo "Set up $(VENV): $$($(VENV)/bin/python -c 'import torch, triton; print("torch", torch.__version__, "| triton", triton.__version__)')"

# Jupyter refuses to run as root unless told; root is the only user on many containers and VMs.
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
# The course's JupyterLab settings (lab-settings/overrides.json: no "official Jupyter news?"
# pop-up), read as defaults in place of the installation's app settings folder; and the
# course's own workspaces (the open tabs JupyterLab restores), so that tabs left open in
# another project or another clone do not reopen here, each starting a kernel.
LAB_SETTINGS := --LabApp.app_settings_dir="$(CURDIR)/lab-settings" --LabApp.workspaces_dir="$(CURDIR)/build/lab-workspaces"
# The browser opens on lesson 01; the file browser still shows the whole checkout.
LAB_FIRST := --LabApp.default_url=/lab/tree/notebooks/01_formula.ipynb
lab: $(SETUP)  ## Open JupyterLab on lesson 01, notebooks/01_formula.ipynb (LAB_ARGS=... for more options).
	$(call require,jupyterlab)
	@mkdir -p "$(FIGURES_DIR)"
	$(PY) -m jupyterlab --ServerApp.root_dir="$(CURDIR)" $(LAB_FIRST) $(LAB_SETTINGS) $(LAB_ROOT_FLAG) $(LAB_ARGS)

test: $(SETUP)  ## Run tests/ and every notebook under notebooks/ solutions/ exercises/ (nbval).
	$(call require,pytest nbval)
	@mkdir -p "$(FIGURES_DIR)"
	@xdist=""; \
	case "$(JOBS)" in 0|1) ;; *) if $(PY) -c 'import xdist' 2>/dev/null; then xdist="-n $(JOBS) --dist load"; fi;; esac; \
	set -x; \
	$(PY) -m pytest $$xdist $(TESTS) $(NOTEBOOKS) \
	  --nbval-lax --nbval-current-env --nbval-cell-timeout=$(NB_TIMEOUT) $(PYTEST_ARGS)

# ruff is a Python package (the dev extra, pinned in constraints.txt), so PYTHON=... finds it as `-m ruff`.
lint: $(SETUP)  ## Check every Python file with ruff (rules and exclusions: pyproject.toml, [tool.ruff]).
	@$(PY) -c 'import importlib.util as u, sys; sys.exit(None if u.find_spec("ruff") else "$(PY) lacks ruff: run make lint without PYTHON= to set up $(VENV), or: $(PY) -m pip install -c $(CONSTRAINTS) ruff")'
	$(PY) -m ruff check .

# tools/browser_deps.sh installs chromium, chromium-driver (apt-get) and selenium (pip, .venv only)
# where they are missing; where they cannot be installed it prints "skipped: <reason>" and the
# target succeeds. The test starts and stops its own JupyterLab (tests/browser/test_lab.py).
BROWSER_DIR := $(abspath $(BUILD_DIR))/browser
test-browser: $(SETUP)  ## Run lessons 01, 05, 08 and exercise 01 in JupyterLab in headless Chromium; screenshots in build/browser.
	@mkdir -p "$(FIGURES_DIR)" "$(BROWSER_DIR)"
	@status=0; tools/browser_deps.sh "$(PY)" "$(if $(SETUP),1,0)" "$(CONSTRAINTS)" "$(BROWSER_DIR)" || status=$$?; \
	if [ $$status = 3 ]; then exit 0; elif [ $$status != 0 ]; then exit $$status; fi; \
	set -x; \
	BROWSER_BUILD_DIR="$(BROWSER_DIR)" $(PY) -m pytest tests/browser -v $(PYTEST_ARGS)

# Needs no .venv: everything runs in the image. Exits 0 with "skipped: <reason>" where
# Docker cannot be installed or started; the steps are at the top of the script.
test-docker:  ## Build the Docker image on a stand-in base; run check_env, tests, lessons and JupyterLab in it.
	bash scripts/test_docker.sh

# A workshop room on this host: JupyterHub, one container of the course image per learner (room/).
# The hub gets its own venv and proxy under build/room (pins in room/); its database and secrets live
# in ~/.local/state/rmsnorm-room/<room>, outside the checkout. Settings: ROOM_* variables on the
# command line (room/README.md, "A room on JupyterHub"). Holds the terminal; Ctrl-C stops it, volumes are kept.
room:  ## Start a JupyterHub for a workshop room: a container and a volume per learner (ROOM_*=... settings).
	bash room/room.sh

# Needs no .venv. Reuses the image make test-docker built (TEST_DOCKER_IMAGE), or builds it the same way.
test-hub:  ## Test the room end to end on loopback: learners, 403s, withheld solutions, volumes, idle culler.
	bash room/test_hub.sh

run: $(HTML)  ## Execute every notebook headless into build/executed/, export HTML to build/html/.
	@echo "$(words $(HTML)) notebook(s) executed; HTML in $(BUILD_DIR)/html, figures in $(FIGURES_DIR)."

# Executed notebooks are kept (make would otherwise delete them as intermediate files).
.SECONDARY: $(EXECUTED)
$(BUILD_DIR)/executed/%.ipynb: %.ipynb $(PACKAGE_SOURCES) | $(SETUP)
	$(call require,nbconvert nbclient)
	@mkdir -p "$(@D)" "$(FIGURES_DIR)"
	$(PY) -m nbconvert --to notebook --execute --output-dir "$(@D)" \
	  --ExecutePreprocessor.timeout=$(NB_TIMEOUT) --ExecutePreprocessor.startup_timeout=300 \
	  --ExecutePreprocessor.kernel_name=python3 "$<"

$(BUILD_DIR)/html/%.html: $(BUILD_DIR)/executed/%.ipynb
	@mkdir -p "$(@D)"
	$(PY) -m nbconvert --to html --output-dir "$(@D)" "$<"

check-env: $(SETUP)  ## Say where the kernels run and prove it (python -m rmsnorm_course.check_env).
	$(PY) -m rmsnorm_course.check_env

# .gpu/ holds wheels for the GPU machine; it is ignored by git but is not ours to delete.
CLEAN_KEEP := -e '!.gpu/'
clean:  ## List ignored files (.venv, build/, caches) that CONFIRM=1 would delete.
ifeq ($(CONFIRM),1)
	git clean -fdX $(CLEAN_KEEP)
else
	@git clean -ndX $(CLEAN_KEEP)
	@echo "Nothing deleted. To delete the files listed above: make clean CONFIRM=1"
endif

exercises: $(SETUP)  ## Regenerate exercises/ from solutions/ (tools/make_exercises.py).
	@if [ "$(FORCE)" != 1 ] && [ -n "$$(git status --porcelain -- exercises 2>/dev/null)" ]; then \
	  echo "exercises/ has uncommitted changes (a filled-in copy?): not overwriting them." >&2; \
	  echo "Save or commit them, or run 'make exercises FORCE=1' to overwrite." >&2; exit 1; fi
	$(PY) tools/make_exercises.py

# --keep-id: nbstripout would otherwise renumber every cell id (0, 1, 2, ...), churning each
# notebook's diff and the ids that tools/make_exercises.py carries from solutions/ to exercises/.
strip: $(SETUP)  ## Remove outputs and execution counts from every notebook (nbstripout).
	$(call require,nbstripout)
ifneq ($(NOTEBOOKS),)
	$(PY) -m nbstripout --keep-id $(NOTEBOOKS)
else
	@echo "No notebooks found under $(NOTEBOOK_DIRS)."
endif
