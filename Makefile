# Thin wrapper over CMake/CTest. Everything a person repeats is a target here.
#   make          Release build, binary at build/pagoda
#   make run      the OpenAI-compatible server on the default model (prints a curl command)
#   make generate one offline generation on the default model
#   make loadtest 64 streaming clients against `pagoda serve` for 60 s
#   make test     every test: native, then the aarch64 build under qemu
#   make bench    build and run the benchmarks + `pagoda bench kernels` (numbers -> docs/PERFORMANCE.md)
#   make asan     ASan+UBSan build running the unit tests
#   make fuzz     libFuzzer targets (clang, build-fuzz/), each run FUZZ_SECONDS (default 10);
#                 FUZZ_TARGETS="fuzz_gguf ..." picks some (docs/FUZZING.md)
#   make format   clang-format in place;  make lint: clang-tidy + cppcheck
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
ASSETS  ?= $(or $(PAGODA_ASSETS),$(abspath ../shared/assets))
MODEL   ?= $(ASSETS)/llm/stories260K-hf
CMAKE_FLAGS ?=
SERVE_FLAGS ?=
# stories260K ships no chat template: `make run` gives it a plain one so the
# README's chat request works (set CHAT_TEMPLATE= to serve without one)
CHAT_TEMPLATE ?= $(if $(filter $(ASSETS)/llm/stories260K-hf,$(MODEL)),tests/data/chat_simple.jinja)
CTEST_FLAGS ?= --output-on-failure -j$(JOBS)
FUZZ_SECONDS ?= 10
FUZZ_TARGETS ?=
HAVE_CROSS := $(shell command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1 && echo 1)

.PHONY: all deps build run generate loadtest test test-native test-arm bench asan fuzz format lint clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPAGODA_WERROR=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build -j$(JOBS) -- --no-print-directory

run: build
	./build/pagoda serve $(MODEL) $(if $(CHAT_TEMPLATE),--chat-template $(CHAT_TEMPLATE)) $(SERVE_FLAGS)

generate: build
	./build/pagoda generate $(MODEL) --prompt "Once upon a time" --max-tokens 200

loadtest: build
	bash tests/server/load.sh $(MODEL) 60 ./build/pagoda

test: test-native test-arm

test-native: build
	cd build && ctest $(CTEST_FLAGS)

test-arm: deps
ifeq ($(HAVE_CROSS),1)
	@cmake -S . -B build-arm -DCMAKE_BUILD_TYPE=Release -DPAGODA_WERROR=ON \
	  -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-arm -j$(JOBS)
	cd build-arm && ctest $(CTEST_FLAGS)
else
	@echo "test-arm: aarch64 cross toolchain or qemu-aarch64 missing (run scripts/install-deps.sh)"; exit 1
endif

bench: build
	@cmake --build build --target benchmarks -j$(JOBS)
	@bash bench/run.sh

asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPAGODA_SANITIZE=ON -DPAGODA_WERROR=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest $(CTEST_FLAGS)

fuzz: deps
	@FUZZ_JOBS=$(JOBS) bash scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

format:
	@find src include tests tools bench fuzz -name '*.[ch]' -print0 | xargs -0 clang-format -i

lint: build
	@find src tools/gen -name '*.c' -not -path '*/arm/*' -print0 | xargs -0 clang-tidy -p build --quiet 2>/dev/null
	@cppcheck --quiet --enable=warning,performance,portability --error-exitcode=1 \
	  --inline-suppr -I include -I src -I tools --suppress=missingIncludeSystem src tools/gen

clean:
	rm -rf build build-arm build-asan build-fuzz
