# perfmodel: two commands do everything on a fresh machine.
#   make reproduce   set up .venv, run the pipeline on the data in the repo, regenerate
#                    figures, tables, numbers and the paper (QUICK=1: small parameters)
#   make test        set up .venv, lint, run the test suite and validate the notebooks (nbval)
#                    under two BLAS kernels
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
# every package source, at any depth of the layout (perfmodel/<layer>/<package>/*.py)
PKG_SOURCES := $(wildcard perfmodel/*.py perfmodel/*/*.py perfmodel/*/*/*.py)
QUICK ?=
# public datasets are read from this mirror when it exists (CI sets it too)
MIRROR_DEFAULT := $(abspath ../shared/data/external)
export PERFMODEL_DATA_MIRROR ?= $(if $(wildcard $(MIRROR_DEFAULT)),$(MIRROR_DEFAULT),)
# figures are files, never windows (`make lab` unsets it for inline figures)
export MPLBACKEND ?= Agg
# Numerical settings of every command below (not of `make lab`): one BLAS/OpenMP thread, so a
# result never depends on the core count (README, "Reproducibility").  The BLAS kernel is NOT
# pinned: results are printed at a precision that does not move with it, and `make test`
# checks that under two kernels (BLAS_KERNELS).
export OMP_NUM_THREADS ?= 1
export OPENBLAS_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
# OpenBLAS kernels `make test` and `make check-blas` compare: `default` = what OpenBLAS picks
# for this CPU (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset), anything else = OPENBLAS_CORETYPE.
# A kernel that runs the same OpenBLAS core as one before it (`default` IS Haswell on an AVX2
# CPU without AVX-512) or that the CPU cannot run is replaced by the first BLAS_FALLBACK that
# gives a core of its own (python -m perfmodel.report.blas_kernels; it says what it left out)
BLAS_KERNELS ?= default Haswell
BLAS_FALLBACK ?= Sandybridge Nehalem
# (shell text: the resolved kernel list, for a recipe run after $(VENV_STAMP))
# (before .venv exists, e.g. under `make -n` on a fresh clone: the list as given)
BLAS_RESOLVED = $$(if [ -x $(PY) ]; then \
  $(PY) -m perfmodel.report.blas_kernels $(BLAS_KERNELS) --fallback $(BLAS_FALLBACK); \
  else echo $(BLAS_KERNELS); fi)
# (the notebooks' paper outputs under nbval, one folder per kernel: NBVAL_OUT, pipeline.mk)
# (shell text: the `env ...` prefix for the kernel named by the loop variable $$k of a recipe;
# the same variables as perfmodel.report.blas_kernels.kernel_env, which a test checks)
BLAS_ENV_K = $$(if [ "$$k" = default ]; then echo env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE; \
               else echo env OPENBLAS_CORETYPE=$$k; fi)

.PHONY: all setup test test-unit test-notebooks lint reproduce fit-example lab bench clean-build \
        check-outputs check-blas

all: reproduce

setup: $(VENV_STAMP)

# editable install through a path (.pth) entry: a script next to a checkout folder named
# `perfmodel` then still imports the installed package (README, "Install")
$(VENV_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	@touch $@

test: lint test-unit test-notebooks

lint: $(VENV_STAMP)
	$(PY) -m ruff check perfmodel tests scripts benchmarks

test-unit: $(VENV_STAMP)
	$(PY) -m pytest tests -q

# the notebooks' checked outputs must not depend on the BLAS kernel: validate under each, and
# compare the paper numbers and tables the notebooks wrote under nbval (quick parameters).
# The kernels run at the same time (each process has one BLAS thread, so results do not move;
# on the 2-core host this halves the wall time); each output line is prefixed with [kernel].
# (The line that calls $(MAKE) runs even under `make -n`: it only probes and recurses.)
test-notebooks: $(VENV_STAMP)
	@ks="$(BLAS_RESOLVED)" && test -n "$$ks" || exit 1; \
	pids=""; for k in $$ks; do \
	  echo "nbval with BLAS kernel: $$k"; \
	  ( set -o pipefail; $(BLAS_ENV_K) $(MAKE) --no-print-directory nbval \
	      NBVAL_OUT=$(NBVAL_OUT)/$$k 2>&1 | sed -u "s/^/[$$k] /" ) & pids="$$pids $$!"; \
	done; \
	failed=0; for p in $$pids; do wait $$p || failed=1; done; \
	if [ $$failed = 1 ]; then echo "nbval failed under a BLAS kernel (see the [kernel] lines)" >&2; \
	  exit 1; fi
	@ks="$(BLAS_RESOLVED)"; set -- $$ks; if [ $$# -ge 2 ]; then \
	  $(PY) -m perfmodel.report.pipeline compare $$(for k in $$ks; do echo $(NBVAL_OUT)/$$k; done); \
	fi

build:
	@mkdir -p build

# the example fit (the main job before the notebooks existed; still part of reproduce)
build/example_fit.json: $(VENV_STAMP) data/example/example_trace.csv $(PKG_SOURCES) | build
	$(VENV)/bin/perfmodel fit data/example/example_trace.csv --model seed_id -o $@ --force \
	  > build/example_fit_report.txt
	@echo "wrote $@ and build/example_fit_report.txt"

fit-example: build/example_fit.json

include notebooks/pipeline.mk

# a paper output changed outside the pipeline (e.g. a notebook run by hand with the output
# folder pointed at the repository) makes its notebook rerun
reproduce: $(VENV_STAMP)
	@$(PY) -m perfmodel.report.pipeline stale --build $(NB_BUILD)
	@$(MAKE) --no-print-directory fit-example paper
	@echo "reproduce: done"

# generated outputs differ from what the pipeline last wrote: exit 1 naming them
check-outputs: $(VENV_STAMP)
	@$(PY) -m perfmodel.report.pipeline stale --build $(NB_BUILD) --check

# the paper's numbers and tables are identical under each BLAS kernel (reruns every notebook
# per kernel into build/blas-check/<kernel>; QUICK=1 for small parameters)
check-blas: $(VENV_STAMP)
	@ks="$(BLAS_RESOLVED)" && test -n "$$ks" || exit 1; \
	for k in $$ks; do \
	  echo "pipeline outputs with BLAS kernel: $$k"; \
	  $(BLAS_ENV_K) $(MAKE) --no-print-directory PAPER_OUT=build/blas-check/$$k \
	      NB_BUILD=build/blas-check/$$k/notebooks build/blas-check/$$k/paper/numbers.tex \
	    || exit 1; \
	done; \
	$(PY) -m perfmodel.report.pipeline compare $$(for k in $$ks; do echo build/blas-check/$$k; done)

# JupyterLab on the project's environment, rooted at the repository, with inline figures.
# Notebooks run here write their figures/tables/numbers to build/scratch (never to the
# paper's committed outputs).  As root it adds --allow-root.
lab: $(VENV_STAMP)
	env -u MPLBACKEND $(VENV)/bin/jupyter lab --notebook-dir=. --no-browser \
	  $(if $(filter 0,$(shell id -u)),--allow-root,) $(LAB_ARGS)

bench: $(VENV_STAMP)
	$(PY) benchmarks/bench_fit.py

clean-build:
	rm -rf build
