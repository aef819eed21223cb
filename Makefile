# The front door. Two commands do everything on a fresh machine:
#   make demo   installs what is missing, trains a real model under probing, shows what it saw
#   make test   installs what is missing, runs every test (C unit tests, integration tests, then
#               the real-model suite tests/realworld)
VENV := .venv
BIN := $(VENV)/bin
BUILD := build

.PHONY: all setup build demo test unit integration realworld bench lint clean wheel

all: build

setup:
	bash scripts/setup.sh

# Development build tree: build/src/cli/probing and build/python (importable package).
build:
	@test -f $(BUILD)/build.ninja || $(BIN)/meson setup $(BUILD)
	$(BIN)/ninja -C $(BUILD)

# Self-contained wheels of probing-c in dist/, one for each CPython 3.9-3.13 found: the C
# libraries built from pinned sources and linked in (scripts/wheel.sh, docs/install.md).
wheel:
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/wheel.sh

demo: setup
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/demo.sh

# setup.sh builds build/ with the unit tests (a wheel's build has none: pyproject.toml). The
# tests run without a rebuild: `meson test` would run the first ninja on PATH, and a system
# ninja older than .venv's rewrites the build log in its own version, which makes the next
# build start over from nothing.
unit: setup build
	$(BIN)/meson test -C $(BUILD) --no-rebuild --print-errorlogs

# The test files run two at a time (pytest-xdist, one file to a worker: a file's module fixtures,
# e.g. the network namespaces of the two-node tests, stay in one process; JOBS=1 runs them one
# at a time). The 25 slowest tests are listed at the end (CI's time budget is kept by them).
JOBS ?= 2
PYTEST_PARALLEL = $(if $(filter-out 1,$(JOBS)),-n $(JOBS) --dist loadfile)

integration: setup
	bash scripts/setup-extras.sh
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) --durations=25 \
		tests/integration

# Small real architectures (ResNet, GPT-2, BERT, LSTM, DCGAN, torch.compile) trained under probing.
realworld: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) --durations=10 \
		tests/realworld

test: unit integration realworld

bench: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/overhead.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/instructions.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/query_latency.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/recording_size.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/inject_latency.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/capture_cost.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/memory_breakdown.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/exporter_cost.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/load.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/fanout.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/ui_overhead.py
	$(BIN)/python bench/record_function_cost.py
	$(BIN)/python bench/floor_cost.py

# Dependencies point down: no two src/ files (a .c with its .h) use each other, directly or
# around a loop (scripts/depcheck.py reads the compiled objects' symbols and the includes).
# No source file under src/ or tests/ over 900 lines (scripts/linelimit.py, issue 33).
lint: build
	$(BIN)/python scripts/depcheck.py $(BUILD)
	$(BIN)/python scripts/linelimit.py

clean:
	rm -rf $(BUILD) build-*
