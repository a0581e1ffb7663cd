# Distributed Deep Learning: GPU System Topology
#
#   make lab    set everything up, then start JupyterLab on Start_Here.ipynb
#   make test   set everything up, then run the unit tests and every notebook (nbval)
#
# Both are idempotent: stamps under .venv/.stamps skip the steps whose inputs did not change.
# Other targets: setup deps horovod data kernel images p2p clean help.
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
# Containers and lab servers often run as root; Jupyter refuses that unless told.
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: help setup deps horovod data kernel lab test images p2p clean

help:
	@echo "make lab    - set up (venv, pinned dependencies, Horovod, Fashion-MNIST, kernel) and start JupyterLab"
	@echo "make test   - set up, then unit tests + every notebook under nbval"
	@echo "make setup | deps | horovod [PYTHON=...] | data | kernel | images | p2p | clean"

$(VPY):
	@$(BOOTSTRAP_PYTHON) -c 'import sys; v = sys.version_info[:2]; ok = (3, 10) <= v <= (3, 12); \
	print(f"Python {v[0]}.{v[1]}: " + ("ok" if ok else "the course supports Python 3.10-3.12; pass BOOTSTRAP_PYTHON=python3.11")); sys.exit(0 if ok else 1)'
	$(BOOTSTRAP_PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip

$(STAMPS)/deps: requirements.txt requirements-lock.txt | $(VPY)
	$(VPY) -m pip install --quiet -r requirements.txt -c requirements-lock.txt
	@mkdir -p $(STAMPS) && touch $@

deps: $(STAMPS)/deps

$(STAMPS)/horovod: $(STAMPS)/deps tools/build_horovod.sh source_code/patches/horovod-0.28.1-ddlab.patch
	PYTHON=$(abspath $(VPY)) bash tools/build_horovod.sh
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

$(STAMPS)/kernel: $(STAMPS)/ddlab
	$(VPY) -m ipykernel install --sys-prefix --name ddlab --display-name "Python (ddlab)" >/dev/null
	@mkdir -p $(STAMPS) && touch $@

kernel: $(STAMPS)/kernel

# Fashion-MNIST: verified in place when present (about a second); otherwise installed from
# Debian/Ubuntu's dataset-fashion-mnist package where apt can, else downloaded.
data: $(STAMPS)/ddlab
	@bash tools/get_data.sh $(VPY)

setup: $(STAMPS)/deps $(STAMPS)/horovod $(STAMPS)/kernel data

test: setup
	$(VPY) -m pytest --timeout=$(PYTEST_TIMEOUT) --nbval-lax --nbval-current-env tests Start_Here.ipynb notebooks

lab: setup
	@echo "Starting JupyterLab on http://$(LAB_IP):$(LAB_PORT) (token below; Ctrl-C stops it)"
	$(VENV)/bin/jupyter lab --no-browser --ip=$(LAB_IP) --port=$(LAB_PORT) $(LAB_ROOT_FLAG) Start_Here.ipynb

images: $(STAMPS)/ddlab
	$(VPY) tools/make_images.py

p2p:
	$(MAKE) -C source_code/p2p_bandwidth_latency

clean:
	rm -rf $(VENV) .cache/horovod
	-$(MAKE) -C source_code/p2p_bandwidth_latency clean
