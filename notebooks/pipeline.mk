# notebooks/pipeline.mk -- the paper pipeline: notebooks -> figures/tables/numbers -> paper/main.pdf
#
# Included by the top-level Makefile (`include notebooks/pipeline.mk`); run from the repository root.
#
# Variables this file EXPECTS the including Makefile to define:
#   PY          the project's Python, e.g. `.venv/bin/python` (papermill, jupyter, perfmodel installed)
#   VENV_STAMP  a file target whose rule creates/updates the venv, e.g. `.venv/.installed`
# Variables this file DEFINES (override on the command line):
#   QUICK       QUICK=1 (or yes/true) runs notebooks with notebooks/params/quick/*.yaml (small n_boot,
#               fewer starts); empty/0 uses notebooks/params/*.yaml (the full run)
#   PYTHON3     a plain Python >= 3.11 for the dependency scan (stdlib only; default python3)
#   NB_BUILD    executed notebooks (default build/notebooks)
#   PAPER_OUT   root under which figures/, paper/tables/, paper/numbers/ and paper/numbers.tex
#               are written (default: the repository; `make check-blas` uses build/blas-check/K)
#   LATEXMK     path of latexmk (default: found on PATH; empty = not installed)
# Targets:
#   notebooks       run every notebook whose inputs changed (papermill, --cwd notebooks)
#   nb-<name>       run one notebook, e.g. `make nb-02_fit_and_identifiability`
#   paper           notebooks + paper/numbers.tex + latexmk -pdf paper/main.tex (when latexmk exists)
#   paper-check     every file paper/main.tex includes exists and is newer than build/pipeline.stamp
#   notebooks-store re-execute the committed notebooks in place with their default (= quick)
#                   parameters and strip run noise: the stored outputs nbval compares against
#   nbval           pytest --nbval-lax on the committed notebooks (what `make test` should call)
#   paper-clean     remove what the pipeline rebuilds (figures, notebook tables, numbers,
#                   build/notebooks, LaTeX aux files); tables written by scripts/ stay
#
# Each executed notebook depends on: the notebook, its params file, the perfmodel sources it
# imports (transitively; generated into $(NB_BUILD)/deps.mk by `python -m perfmodel.report.paperio deps`),
# the data files listed below, and the run mode (quick/full): only what changed reruns.

QUICK   ?=
PYTHON3 ?= python3
NB_BUILD ?= build/notebooks
PAPER_OUT ?= .
LATEXMK ?= $(shell command -v latexmk 2>/dev/null)

NB_MODE       := $(if $(filter 1 yes true YES TRUE,$(QUICK)),quick,full)
NB_PARAMS     := $(if $(filter quick,$(NB_MODE)),notebooks/params/quick,notebooks/params)
NB_SOURCES    := $(sort $(wildcard notebooks/*.ipynb))
NB_NAMES      := $(notdir $(basename $(NB_SOURCES)))
NB_OUTPUTS    := $(NB_NAMES:%=$(NB_BUILD)/%.ipynb)
NB_MODE_FILE  := $(NB_BUILD)/.mode
NB_DEPS_FILE  := $(NB_BUILD)/deps.mk
PIPELINE_STAMP := build/pipeline.stamp
PAPER_PDF     := paper/main.pdf
PAPER_NUMBERS := $(patsubst ./%,%,$(PAPER_OUT)/paper/numbers.tex)
# notebook runs write their outputs under PAPER_OUT and list them (with sha256) in a manifest
# beside the executed notebook: `make reproduce` reruns a notebook whose outputs changed since
PIPELINE_ENV   = PERFMODEL_PAPER_OUTPUT=$(abspath $(PAPER_OUT)) \
                 PERFMODEL_OUTPUT_MANIFEST=$(abspath $(NB_BUILD))/$*.outputs.json
# ipykernel warns on every start that its local TCP sockets are unencrypted: not news here
QUIET_KERNEL   = 2> >(grep -v 'Kernel is running over TCP without encryption' >&2)
NBVAL_ARGS    := --nbval-lax --nbval-sanitize-with notebooks/nbval_sanitize.cfg -p no:cacheprovider

# data each notebook reads besides the public mirror (pinned, immutable)
$(NB_BUILD)/01_data_overview.ipynb: $(wildcard data/vllm-cpu/* data/gpu/*)
$(NB_BUILD)/10_gpu_datasets.ipynb: $(wildcard data/gpu/*)
$(NB_BUILD)/14_confirmation.ipynb: $(wildcard data/vllm-cpu-confirmation/*/*)
$(NB_BUILD)/15_gpu_confirmation.ipynb: $(wildcard data/gpu-confirmation/*/* data/gpu-confirmation-h200/*/* data/gpu-confirmation-h200-lease*/*/*)
# 20_step_peers: the H200 trace, the GPU confirmation traces, the vLLM-CPU mixed runs and the
# peers' stated accuracies (data/literature/peer_claims.csv)
$(NB_BUILD)/20_step_peers.ipynb: $(wildcard data/gpu/* data/gpu-confirmation/*/* data/vllm-cpu/*/* \
  data/literature/*)
$(NB_BUILD)/03_residual_diagnostics.ipynb $(NB_BUILD)/06_cross_validation.ipynb \
  $(NB_BUILD)/09_capacity_simulation.ipynb $(NB_BUILD)/11_vllm_cpu_comparison.ipynb: \
  $(wildcard data/vllm-cpu/*/*)
# 12_gpu_replay reads only the LLMServingSim runs and bundles of the public mirror (each file
# pinned by sha256 in the dataset registry): no local data dependency
# 13_real_client replays the committed real-client series (vllm serve + vllm bench serve runs)
$(NB_BUILD)/13_real_client.ipynb: $(wildcard data/vllm-serve/*/*/*)
# 16_real_client_replicates replays the replicated series with the fit of the first series
$(NB_BUILD)/16_real_client_replicates.ipynb: $(wildcard data/vllm-serve/*/*/*)
# 19_real_client_confirmation checks the confirmation series against the protocol frozen before it
$(NB_BUILD)/19_real_client_confirmation.ipynb: $(wildcard data/vllm-serve/*/*/* data/vllm-serve/*.json)
# 22_real_client_capacity_points answers the capacity question for all three series
$(NB_BUILD)/22_real_client_capacity_points.ipynb: $(wildcard data/vllm-serve/*/*/* data/vllm-serve/*.json)
# 21_record_parameters fits the model of record on every real data set with per-request context
$(NB_BUILD)/21_record_parameters.ipynb: $(wildcard data/gpu/* data/gpu-confirmation/run1/*) \
  $(wildcard data/vllm-cpu/*/mixed-r* data/vllm-cpu-confirmation/*/mixed-r*)
# full mode tabulates the stored coverage study (scripts/coverage_study.py, ~20 min)
$(NB_BUILD)/04_uncertainty.ipynb: $(wildcard paper/results/coverage_*)
# 17_interval_coverage tabulates the stored interval study (scripts/interval_study.py --transfer)
# and recalibrates one llama-tiny run to explain its widths
$(NB_BUILD)/17_interval_coverage.ipynb: $(wildcard paper/results/interval_coverage*) \
  $(wildcard data/vllm-cpu/llama-tiny/*)
# 18_model_selection tabulates the stored nested selection (scripts/evaluate_protocol.py --nested-only)
$(NB_BUILD)/18_model_selection.ipynb: $(wildcard paper/results/nested/*)

.PHONY: notebooks paper paper-check paper-clean notebooks-store nbval pipeline-start FORCE
.DELETE_ON_ERROR:

notebooks: $(NB_OUTPUTS)

nb-%: $(NB_BUILD)/%.ipynb
	@:

# written once per make run, before any notebook: paper-check compares against it
pipeline-start:
	@mkdir -p $(dir $(PIPELINE_STAMP)) && touch $(PIPELINE_STAMP)

# the mode file changes (and so reruns everything) only when QUICK changes
$(NB_MODE_FILE): FORCE
	@mkdir -p $(@D); if [ "$$(cat $@ 2>/dev/null)" != "$(NB_MODE)" ]; then echo $(NB_MODE) > $@; fi
FORCE:

$(NB_DEPS_FILE): $(NB_SOURCES) $(wildcard perfmodel/*.py perfmodel/*/*.py perfmodel/*/*/*.py)
	@mkdir -p $(@D)
	@$(PYTHON3) -m perfmodel.report.paperio deps $(NB_SOURCES) --build $(NB_BUILD) --out $@

ifneq ($(NB_SOURCES),)
-include $(NB_DEPS_FILE)
endif

# papermill writes to a partial file first: a failed run never leaves an up-to-date target
$(NB_BUILD)/%.ipynb: notebooks/%.ipynb $(NB_PARAMS)/%.yaml $(NB_MODE_FILE) $(VENV_STAMP) | pipeline-start
	@mkdir -p $(@D) $(addprefix $(PAPER_OUT)/,figures paper/tables paper/numbers)
	@echo "papermill [$(NB_MODE)] $*"
	@$(PIPELINE_ENV) $(PY) -m papermill $< $(@D)/$*.partial.ipynb -f $(NB_PARAMS)/$*.yaml \
	    -k python3 --cwd notebooks --no-progress-bar --log-level WARNING $(QUIET_KERNEL) \
	  && mv $(@D)/$*.partial.ipynb $@ \
	  || { echo "notebook $* FAILED: see $(@D)/$*.partial.ipynb" >&2; exit 1; }

$(PAPER_NUMBERS): $(NB_OUTPUTS) $(wildcard perfmodel/report/paperio/*.py) | pipeline-start
	@$(PY) -m perfmodel.report.paperio assemble --folder $(PAPER_OUT)/paper/numbers --out $@

# the PDF's dates come from this fixed time (2026-01-01 UTC), so a rebuild of unchanged inputs
# gives the same bytes
PAPER_DATE_EPOCH ?= 1767225600

ifneq ($(strip $(LATEXMK)),)
paper: $(PAPER_PDF)

$(PAPER_PDF): paper/main.tex paper/refs.bib $(PAPER_NUMBERS) $(NB_OUTPUTS)
	@echo "latexmk -pdf paper/main.tex"
	@cd paper && SOURCE_DATE_EPOCH=$(PAPER_DATE_EPOCH) FORCE_SOURCE_DATE=1 \
	    $(LATEXMK) -pdf -interaction=nonstopmode -halt-on-error -file-line-error \
	    -silent main.tex >latexmk.log 2>&1 || { tail -n 40 main.log >&2; exit 1; }
	@touch $@
	@echo "built $@"
else
paper: $(PAPER_NUMBERS)
	@echo "latexmk not found: figures, tables and numbers are built, the PDF is not."
	@echo "Install LaTeX (Debian/Ubuntu, as root, ~2 min):"
	@echo "  apt-get update && apt-get install -y --no-install-recommends \\"
	@echo "      texlive-latex-base texlive-latex-recommended latexmk lmodern"
	@echo "then run 'make paper' again."
endif

paper-check:
	@$(PY) scripts/check_paper_inputs.py --tex paper/main.tex --stamp $(PIPELINE_STAMP) \
	    $(if $(strip $(LATEXMK)),--pdf $(PAPER_PDF))

# the committed notebooks hold the outputs of their default (= quick) parameters for nbval
notebooks-store: $(VENV_STAMP)
	@for nb in $(NB_SOURCES); do \
	  echo "execute in place: $$nb"; \
	  PERFMODEL_PAPER_OUTPUT=$(abspath $(NBVAL_OUT)) \
	  $(PY) -m jupyter nbconvert --to notebook --execute --inplace \
	      --ExecutePreprocessor.kernel_name=python3 --ExecutePreprocessor.timeout=600 $$nb \
	    || exit 1; \
	done
	@$(PY) -m perfmodel.report.paperio strip $(NB_SOURCES)

# the notebooks write their figures/tables/numbers to a scratch folder under nbval, so a test
# run never replaces the paper's (full-run) outputs with quick-parameter ones
# (NBVAL_OUT: where; emptied first, and paper/numbers.tex assembled after a passing run)
NBVAL_OUT ?= build/nbval-outputs
nbval: $(VENV_STAMP)
	@rm -rf $(NBVAL_OUT)/figures $(NBVAL_OUT)/paper
	PERFMODEL_PAPER_OUTPUT=$(abspath $(NBVAL_OUT)) $(PY) -m pytest $(NBVAL_ARGS) \
	    $(NB_SOURCES) $(QUIET_KERNEL)
	@$(PY) -m perfmodel.report.paperio assemble --folder $(NBVAL_OUT)/paper/numbers \
	    --out $(NBVAL_OUT)/paper/numbers.tex >/dev/null

paper-clean:
	@$(PYTHON3) -m perfmodel.report.pipeline clean --root .
	rm -rf $(NB_BUILD) $(PIPELINE_STAMP)
	-cd paper && $(LATEXMK) -C main.tex >/dev/null 2>&1; rm -f paper/main.pdf paper/main.bbl \
	    paper/latexmk.log
