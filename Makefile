# Two entry points for a fresh clone (see README Quickstart):
#   make bench   benchmark this commit with asv and publish the HTML site
#   make test    run the tests (Triton interpreter on CPU when there is no GPU)
# Both create .venv from requirements-dev.txt on first use. On a GPU host whose
# torch lives in another environment, point PYTHON at that interpreter and set
# VENV= (empty) to use it as is: make bench PYTHON=/opt/torch/.venv/bin/python3 VENV=

PYTHON ?= python3
VENV ?= .venv
PY := $(if $(VENV),$(VENV)/bin/python,$(PYTHON))
TORCH := $(shell sed -n 's/^torch==//p' requirements-dev.txt)

.PHONY: bench test
bench: $(if $(VENV),$(VENV)/.installed)
	$(PY) tools/bench.py run HEAD
	$(PY) tools/bench.py publish

test: $(if $(VENV),$(VENV)/.installed)
	$(PY) -m pytest -q

# pip shows what it downloads and installs (the first install takes minutes).
# Without a GPU (no nvidia-smi), torch's CPU build first: PyPI's torch is the
# multi-GB CUDA build, and requirements-dev.txt's pin accepts either.
$(VENV)/.installed: requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	command -v nvidia-smi >/dev/null || $(VENV)/bin/python -m pip install --progress-bar off --retries 1 \
		--timeout 15 --extra-index-url https://download.pytorch.org/whl/cpu torch==$(TORCH)
	$(VENV)/bin/python -m pip install --progress-bar off -r requirements-dev.txt
	$(VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@
