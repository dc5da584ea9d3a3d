# Entry points: `make run` (the main job, no arguments needed) and `make test`.
# Both install what is missing first (Debian packages, and LibTorch as the pinned torch
# wheel in the project's virtual environment VENV), then configure and build (`make run`
# only the CLI, `make test` everything), then install the Python package into VENV
# (`make python`: pip over the same build tree, so nothing is compiled twice).
BUILD_DIR ?= build
VENV ?= .venv
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CMAKE_FLAGS ?=

.PHONY: all deps configure build build-cli python run test fuzz format clean
# One cmake build at a time in the build tree, whatever -j make is given.
.NOTPARALLEL:

all: build

deps:
	@VENV="$(abspath $(VENV))" bash scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) $(GENERATOR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DDTRAIN_PYTHON="$(abspath $(VENV))/bin/python" $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Only what `make run` runs: the CLI (not the test binaries or the fuzz targets).
build-cli: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target dtrain

# pip's standard route (pyproject.toml, scikit-build-core) pointed at this build tree: it
# reconfigures, builds the extension (its only target) where it is not built yet, and
# installs it with the package's sources.
python: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target dtrain_backend_python
	$(VENV)/bin/python -m pip install --disable-pip-version-check -q --no-build-isolation \
	  --no-deps -C build-dir=$(BUILD_DIR) -C cmake.build-type=$(BUILD_TYPE) .

# The main job; its results land in $(RUN_DIR): metrics (JSON lines), an HTML report of
# charts and a Chrome trace of both ranks.
RUN_DIR ?= out/run
run: build-cli python
	mkdir -p $(RUN_DIR)
	$(BUILD_DIR)/dtrain train --parallel pipeline -n 2 --placement ushape --client-blocks 1,1 \
	  --model cnn --dataset fashion-mnist --epochs 1 --schedule gpipe --chunks 4 --compress sortquant:8 \
	  --metrics $(RUN_DIR)/metrics.jsonl --step-log $(RUN_DIR)/steps.jsonl \
	  --report $(RUN_DIR)/report.html --trace $(RUN_DIR)/trace.json
	@echo "results: $(RUN_DIR)/metrics.jsonl and steps.jsonl (JSON lines), $(RUN_DIR)/report.html (open in a browser), $(RUN_DIR)/trace.json (https://ui.perfetto.dev or chrome://tracing)"

test: build python
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

# Longer fuzzing than `make test` does, every target in turn; inputs that reach new code
# join the corpus kept in tests/fuzz/corpus (review and commit them).
FUZZ_SECONDS ?= 300
fuzz: build
	for t in $$(basename -s .cpp tests/fuzz/targets/*.cpp); do \
	  bash scripts/fuzz.sh $(BUILD_DIR)/fuzz $$t $(FUZZ_SECONDS) --merge || exit 1; done

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf $(BUILD_DIR)
