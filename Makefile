# perfmodel: two commands do everything on a fresh machine.
#   make reproduce   set up .venv, run the pipeline on the data in the repo, regenerate
#                    figures, tables, numbers and the paper (QUICK=1: small parameters)
#   make test        set up .venv, run the test suite and validate the notebooks (nbval)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
QUICK ?=
# public datasets are read from this mirror when it exists (CI sets it too)
MIRROR_DEFAULT := $(abspath ../shared/data/external)
export PERFMODEL_DATA_MIRROR ?= $(if $(wildcard $(MIRROR_DEFAULT)),$(MIRROR_DEFAULT),)
export MPLBACKEND ?= Agg

.PHONY: all setup test test-unit test-notebooks reproduce fit-example lab bench clean-build

all: reproduce

setup: $(VENV_STAMP)

$(VENV_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

test: test-unit test-notebooks

test-unit: $(VENV_STAMP)
	$(PY) -m pytest tests -q

test-notebooks: $(VENV_STAMP)
	$(MAKE) --no-print-directory nbval

build:
	@mkdir -p build

# the example fit (the main job before the notebooks existed; still part of reproduce)
build/example_fit.json: $(VENV_STAMP) data/example/example_trace.csv perfmodel/*.py | build
	$(VENV)/bin/perfmodel fit data/example/example_trace.csv -o $@ --force > build/example_fit_report.txt
	@echo "wrote $@ and build/example_fit_report.txt"

fit-example: build/example_fit.json

include notebooks/pipeline.mk

reproduce: $(VENV_STAMP) fit-example paper
	@echo "reproduce: done"

lab: $(VENV_STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks --no-browser \
	  $(if $(filter 0,$(shell id -u)),--allow-root,) $(LAB_ARGS)

bench: $(VENV_STAMP)
	$(PY) benchmarks/bench_fit.py

clean-build:
	rm -rf build
