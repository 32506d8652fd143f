# tide: a thin wrapper around CMake (the way neovim does it). `make help` lists the targets.
BUILD      ?= build
TEST_BUILD ?= build/asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE      ?= cmake
MAKEFLAGS  += --no-print-directory

.PHONY: all deps build test test-unit dst demo demo-quick bench soak format clean help

all: build

help:
	@echo "make            build release binaries into $(BUILD)/bin (tide-scheduler, tide-worker, tidectl)"
	@echo "make test       install what is missing, build with ASan+UBSan into $(TEST_BUILD), run every test"
	@echo "make test-unit  the same, unit tests only"
	@echo "make dst        deterministic simulation of the scheduler core: SEEDS=N seeds (default 1000) from a"
	@echo "                fresh start seed, or from SEED=K (SEED=K alone: that one seed); DST_FLAGS=... passes"
	@echo "                switches (tide-dst --help); a failure prints the command that replays it"
	@echo "make demo       a local scheduler, 4 simulated GPUs on 2 nodes and a 4-rank job, end to end"
	@echo "make bench      run the benchmarks in bench/"
	@echo "make soak       chaos soak of the real binaries (SOAK_S seconds, default 300; not part of make test)"
	@echo "make format     clang-format every C file"

deps:
	@./scripts/deps.sh

build: deps
	@$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF >/dev/null
	@$(CMAKE) --build $(BUILD) -j $(JOBS)

$(TEST_BUILD)/CMakeCache.txt:
	@$(CMAKE) -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTIDE_SANITIZE=ON -DTIDE_WERROR=ON >/dev/null

test: deps $(TEST_BUILD)/CMakeCache.txt
	@$(CMAKE) -S . -B $(TEST_BUILD) >/dev/null
	@$(CMAKE) --build $(TEST_BUILD) -j $(JOBS)
	@cd $(TEST_BUILD) && ctest --output-on-failure --timeout 600 -j $(JOBS)

test-unit: deps $(TEST_BUILD)/CMakeCache.txt
	@$(CMAKE) --build $(TEST_BUILD) -j $(JOBS)
	@cd $(TEST_BUILD) && ctest --output-on-failure -L unit -j $(JOBS)

# Deterministic simulation testing (tests/dst). `make test` runs a fixed budget of seeds; this runs more.
SEED      ?=
SEEDS     ?=
DST_FLAGS ?=
dst: deps $(TEST_BUILD)/CMakeCache.txt
	@$(CMAKE) --build $(TEST_BUILD) -j $(JOBS) --target tide-dst
	@$(TEST_BUILD)/tests/dst/tide-dst --seed $(if $(SEED),$(SEED),$$(date +%s)) \
		$(if $(SEEDS),--seeds $(SEEDS),$(if $(SEED),,--seeds 1000)) $(DST_FLAGS)

demo: build
	@./scripts/demo.sh $(BUILD)/bin

demo-quick: build
	@TIDE_DEMO_QUICK=1 ./scripts/demo.sh $(BUILD)/bin

bench: build
	@./bench/run.sh $(BUILD)

SOAK_S ?= 300
soak: build
	@TIDE_BUILD_DIR=$(BUILD) /usr/bin/python3 tests/soak/chaos.py $(SOAK_S)

format:
	@git ls-files '*.c' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
