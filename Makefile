# tide: a thin wrapper around CMake (the way neovim does it). `make help` lists the targets.
BUILD      ?= build
TEST_BUILD ?= build/asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE      ?= cmake
MAKEFLAGS  += --no-print-directory

.PHONY: all deps build test test-unit dst fuzz demo demo-quick bench soak format clean help

all: build

help:
	@echo "make            build release binaries into $(BUILD)/bin (tide-scheduler, tide-worker, tidectl)"
	@echo "make test       install what is missing, build with ASan+UBSan into $(TEST_BUILD), run every test"
	@echo "make test-unit  the same, unit tests only"
	@echo "make dst        deterministic simulation of the scheduler core: SEEDS=N seeds (default 1000) from a"
	@echo "                fresh start seed, or from SEED=K (SEED=K alone: that one seed), JOBS at once in an"
	@echo "                optimised build; DST_FLAGS=... passes switches (tide-dst --help); a failure prints the"
	@echo "                command that replays it"
	@echo "make fuzz       every libFuzzer target for FUZZ_S seconds (default 60), JOBS at a time (clang, ASan)"
	@echo "make demo       a local scheduler, 4 simulated GPUs on 2 nodes and a 4-rank job, end to end"
	@echo "make bench      every benchmark in bench/ (under 20 minutes), rewriting docs/performance.md and its"
	@echo "                plots; BENCH_FLAGS=\"--only core,fleet\" for some, --no-doc to leave the page alone"
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

# Deterministic simulation testing (tests/dst). `make test` runs a fixed budget of seeds under ASan; this runs
# more, in an optimised build with assertions on ($(DST_BUILD)), split over $(JOBS) processes.
SEED      ?=
SEEDS     ?=
DST_FLAGS ?=
DST_BUILD ?= build/dst
dst: deps
	@$(CMAKE) -S . -B $(DST_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g" \
		-DBUILD_TESTING=ON >/dev/null
	@$(CMAKE) --build $(DST_BUILD) -j $(JOBS) --target tide-dst
	@./scripts/dst.sh $(DST_BUILD)/tests/dst/tide-dst $(if $(SEED),$(SEED),$$(date +%s)) \
		$(if $(SEEDS),$(SEEDS),$(if $(SEED),1,1000)) $(JOBS) $(DST_FLAGS)

# libFuzzer over every target in tests/fuzz (clang, ASan+UBSan) for FUZZ_S seconds each, $(JOBS) at a time;
# FUZZ_TARGETS="a b" for some; FUZZ_KEEP=1 merges new coverage into the committed corpora.
FUZZ_S       ?= 60
FUZZ_TARGETS ?=
FUZZ_BUILD   ?= build/fuzz
fuzz: deps
	@./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_S) $(JOBS) $(FUZZ_TARGETS)

demo: build
	@./scripts/demo.sh $(BUILD)/bin

demo-quick: build
	@TIDE_DEMO_QUICK=1 ./scripts/demo.sh $(BUILD)/bin

bench: build
	@/usr/bin/python3 bench/run.py --build $(BUILD) $(BENCH_FLAGS)

SOAK_S ?= 300
soak: build
	@TIDE_BUILD_DIR=$(BUILD) /usr/bin/python3 tests/soak/chaos.py $(SOAK_S)

format:
	@git ls-files '*.c' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
