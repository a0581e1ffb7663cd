# Distributed Deep Learning: GPU System Topology
#
#   make lab            set everything up, then start JupyterLab on Start_Here.ipynb
#   make test           set everything up, then run the unit tests and every notebook (nbval)
#   make browser-test   every notebook run in JupyterLab in a real browser (Chromium), with screenshots
#
# Both are idempotent: stamps under .venv/.stamps skip the steps whose inputs did not change.
# Other targets: setup deps horovod data kernel lab-settings chromium lab-command images p2p clean help.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
BOOTSTRAP_PYTHON ?= python3
VPY := $(VENV)/bin/python
STAMPS := $(VENV)/.stamps
# `make horovod PYTHON=/path/to/python` builds Horovod against another Python (a lab
# server's or a framework container's) that already has torch.
PYTHON ?= $(VPY)
# JupyterLab listens on loopback with a token. Remote use is an explicit opt-in:
#   make lab LAB_IP=0.0.0.0   (the token stays on; use an SSH tunnel where you can)
LAB_IP ?= 127.0.0.1
LAB_PORT ?= 8888
PYTEST_TIMEOUT ?= 1200
# make test and make browser-test run in this many processes (pytest-xdist; 0: one process). In
# make test each notebook's cells and each test module stay in one process, in order (--dist
# loadscope), the notebooks first, in the order given, so the longest scopes do not start last; the
# browser test gives each process its own JupyterLab and Chromium.
TEST_WORKERS ?= 2
# Offline: `make setup WHEELHOUSE=DIR` installs every wheel (Horovod's too) and the data from a
# folder that `make wheelhouse` filled; pip then never asks an index.
WHEELHOUSE ?=
PIP_FROM := $(if $(WHEELHOUSE),--no-index --find-links $(abspath $(WHEELHOUSE)),)
BYTECODE ?= 1
# Containers and lab servers often run as root; Jupyter refuses that unless told.
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# With a desktop (a display, or macOS) JupyterLab opens the course in the default browser;
# on a headless machine it only prints the address to open (with its token).
LAB_BROWSER_FLAG := $(if $(or $(DISPLAY),$(WAYLAND_DISPLAY),$(filter Darwin,$(shell uname -s))),,--no-browser)
# The one JupyterLab command line: `make lab` runs it, the browser test starts it too.
LAB_HINT_DESKTOP := Your browser opens the course. If it does not: open the address below that ends in ?token=...
LAB_HINT_HEADLESS := No desktop here: open the address below that ends in ?token=... in a browser (through an SSH tunnel from a remote machine) and then Start_Here.ipynb in the file list on the left.
LAB_CMD = $(VENV)/bin/jupyter lab $(LAB_BROWSER_FLAG) --ip=$(LAB_IP) --port=$(LAB_PORT) $(LAB_ROOT_FLAG) Start_Here.ipynb
# JupyterLab defaults for this environment (no news pop-up); overrides.json and a learner's own
# settings still win.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.d/ddlab.json
# The browser test drives Debian's Chromium (Playwright's own browser download is not used).
CHROMIUM ?= /usr/bin/chromium
CHROMIUM_PACKAGES := chromium fonts-noto-color-emoji fonts-dejavu-core
BROWSER_TEST_TIMEOUT ?= 3600
# make test keeps the training runs its notebooks make (ddlab.training.kept_runs); the browser test,
# which checks what a learner sees, shows a kept run again where a notebook makes the same launch with
# the same code (BROWSER_REUSE_RUNS=0: every run runs again).
KEPT_RUNS := $(abspath .cache/kept-runs)
BROWSER_REUSE_RUNS ?= 1
# Horovod's version, named once: source_code/patches/HOROVOD_VERSION (build_horovod.sh, wheelhouse.sh
# and the recording scripts read it too); its patch is named after it.
HOROVOD_VERSION := $(shell cat source_code/patches/HOROVOD_VERSION)
HOROVOD_PATCH := source_code/patches/horovod-$(HOROVOD_VERSION)-ddlab.patch

.PHONY: help setup deps horovod data kernel lab-settings lab lab-command test browser-test chromium images p2p clean
.PHONY: wheelhouse wheelhouse-test slurm-test bench-doctor teardown-loop

help:
	@echo "make lab    - set up (venv, pinned dependencies, Horovod, Fashion-MNIST, kernel) and start JupyterLab"
	@echo "make test   - set up, then unit tests + every notebook under nbval"
	@echo "make browser-test - set up (and Chromium), then every notebook in JupyterLab in a real browser"
	@echo "make setup | deps | horovod [PYTHON=...] | data | kernel | lab-settings | chromium | images | p2p | clean"
	@echo "make wheelhouse [WHEELHOUSE=dir] | setup WHEELHOUSE=dir | wheelhouse-test | slurm-test | bench-doctor | teardown-loop"

# The supported Pythons: pyproject.toml's requires-python, the one range (tools/check_python.py reads it).
$(VPY):
	@$(BOOTSTRAP_PYTHON) tools/check_python.py
	$(BOOTSTRAP_PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade $(PIP_FROM) pip

# pip would compile every installed module to bytecode on one core, before anything else can start.
# It installs without, and the bytecode stamp compiles them with compileall on every core, at low
# priority beside the Horovod build (setup runs the two together: the build leaves a core idle while
# it configures and while it compiles its last files). As with pip, a module that does not compile
# on this Python (a file meant for a newer one) is left without bytecode. BYTECODE=0 leaves it to
# Python (a throwaway venv: the wheelhouse test).
$(STAMPS)/deps: requirements.txt requirements-lock.txt | $(VPY)
	$(VPY) -m pip install --quiet --no-compile $(PIP_FROM) -r requirements.txt -c requirements-lock.txt
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/bytecode: $(STAMPS)/deps
ifneq ($(BYTECODE),0)
	nice -n 10 $(VPY) -c 'import compileall, sysconfig; compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=2, workers=0)'
	@touch $@
endif

deps: $(STAMPS)/deps

$(STAMPS)/horovod: $(STAMPS)/deps tools/build_horovod.sh source_code/patches/HOROVOD_VERSION $(HOROVOD_PATCH)
ifeq ($(WHEELHOUSE),)
	PYTHON=$(abspath $(VPY)) bash tools/build_horovod.sh
else
	$(VPY) -m pip install --quiet --no-deps --only-binary=horovod $(PIP_FROM) horovod==$(HOROVOD_VERSION)
	$(VPY) tools/check_horovod.py
endif
	@mkdir -p $(STAMPS) && touch $@

ifeq ($(PYTHON),$(VPY))
horovod: $(STAMPS)/horovod
else
horovod:
	PYTHON=$(PYTHON) bash tools/build_horovod.sh
endif

$(STAMPS)/ddlab: pyproject.toml $(STAMPS)/deps
	$(VPY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@mkdir -p $(STAMPS) && touch $@

# The course's kernel "Python (ddlab)" (source_code/ddlab/course/kernel.py says why it is not plain ipykernel's).
$(STAMPS)/kernel: $(STAMPS)/ddlab source_code/ddlab/course/kernel.py
	$(VPY) -m ddlab.course.kernel >/dev/null
	@mkdir -p $(STAMPS) && touch $@

kernel: $(STAMPS)/kernel

# Fashion-MNIST: verified in place when present (about a second); otherwise installed from
# Debian/Ubuntu's dataset-fashion-mnist package where apt can, else downloaded.
data: $(STAMPS)/ddlab
	@bash tools/get_data.sh $(VPY) $(if $(WHEELHOUSE),$(abspath $(WHEELHOUSE))/fashion-mnist,)

$(LAB_SETTINGS): tools/jupyterlab-overrides.json | $(STAMPS)/deps
	install -D -m 644 $< $@

lab-settings: $(LAB_SETTINGS)

# The course's own modules compiled to bytecode, as pip does for installed packages (only changed
# files are compiled again): where PYTHONDONTWRITEBYTECODE is set (containers, CI) Python would
# otherwise compile them in every process it starts.
setup: $(STAMPS)/deps
	@$(MAKE) --no-print-directory -j2 $(STAMPS)/bytecode $(STAMPS)/horovod
	@$(MAKE) --no-print-directory $(STAMPS)/kernel $(LAB_SETTINGS) data
	@$(VPY) -m compileall -q source_code tests > /dev/null

# tests/browser is the browser test: `make browser-test` runs it, on its own.
# lint-imports checks the package's layers (contracts in pyproject.toml) before any test runs.
# Both test targets end with the 15 slowest tests (or notebook cells), where CI's time goes.
test: setup
	cd source_code && $(abspath $(VENV))/bin/lint-imports --config ../pyproject.toml --no-cache
	rm -rf $(KEPT_RUNS)
	DDLAB_KEPT_RUNS=$(KEPT_RUNS) $(VPY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --timeout=$(PYTEST_TIMEOUT) --durations=15 --ignore=tests/browser --nbval-lax --nbval-current-env Start_Here.ipynb notebooks tests

lab: setup
	@echo "Starting JupyterLab on http://$(LAB_IP):$(LAB_PORT) (Ctrl-C stops it)."
	@echo "$(if $(LAB_BROWSER_FLAG),$(LAB_HINT_HEADLESS),$(LAB_HINT_DESKTOP))"
	$(LAB_CMD)

# The command `make lab` runs, printed (the browser test starts the same server on another port).
lab-command:
	@echo '$(LAB_CMD)'

# Debian's Chromium and the fonts the notebooks need (emoji, DejaVu), installed when missing
# (tools/apt_install.sh: one install at a time, so the Slurm test's beside it waits its turn).
chromium:
	@missing=$$(for p in $(CHROMIUM_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -x "$(CHROMIUM)" ] && { [ "$(CHROMIUM)" != /usr/bin/chromium ] || [ -z "$$missing" ]; }; then echo "chromium: $(CHROMIUM)"; exit 0; fi; \
	if ! command -v apt-get >/dev/null; then echo "no apt-get here: install Chromium and pass CHROMIUM=/path/to/chromium"; exit 1; fi; \
	bash tools/apt_install.sh $$missing

# Start_Here and every notebook in JupyterLab in Chromium; screenshots in results/browser/
# (or BROWSER_SCREENSHOTS=...). A timeout bounds the whole run.
browser-test: setup chromium
	CHROMIUM=$(CHROMIUM) DDLAB_KEPT_RUNS=$(KEPT_RUNS) DDLAB_REUSE_KEPT_RUNS=$(BROWSER_REUSE_RUNS) timeout --kill-after=60 $(BROWSER_TEST_TIMEOUT) \
	  $(VPY) -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=15 tests/browser

images: $(STAMPS)/ddlab
	$(VPY) tools/make_images.py

p2p:
	$(MAKE) -C source_code/p2p_bandwidth_latency

clean:
	rm -rf $(VENV) .cache/horovod
	-$(MAKE) -C source_code/p2p_bandwidth_latency clean

# ---- offline install and cluster tests
# make wheelhouse [WHEELHOUSE=dir]: every wheel, Horovod's, its sdist and the data in one folder.
WHEELHOUSE_OUT := $(or $(WHEELHOUSE),wheelhouse)
# (WHEELHOUSE names the folder to fill here: the course's own set-up runs online.)
wheelhouse:
	$(MAKE) --no-print-directory setup WHEELHOUSE=
	bash tools/wheelhouse.sh build $(WHEELHOUSE_OUT) $(VPY)

# A fresh venv from the wheelhouse alone (no index, no network), then a smoke test.
wheelhouse-test: wheelhouse
	bash tools/wheelhouse.sh test $(WHEELHOUSE_OUT)

# The Slurm batch scripts on a one-node Slurm started on this machine (root; installs
# Debian's slurmctld, slurmd and munge when missing).
slurm-test: setup
	DDLAB_SLURM_TESTS=1 $(VPY) -m pytest -q --timeout=$(PYTEST_TIMEOUT) tests/slurm

# How long `ddlab doctor` takes here (a benchmark: prints a table, writes results/bench_doctor.json).
bench-doctor: $(STAMPS)/ddlab
	$(VPY) tools/bench_doctor.py --runs 5

# 2-process DDP runs on the CPU under torchrun, 50 of each script: none may abort at teardown
# (prints a table, writes results/teardown_loop.json; about 6 s a run on 2 cores).
teardown-loop: $(STAMPS)/ddlab
	$(VPY) tools/teardown_loop.py --runs 50 --out results/teardown_loop.json
