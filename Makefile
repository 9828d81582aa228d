# Thin wrapper over CMake/CTest. Everything a person repeats is a target here.
#   make          Release build, binary at build/pagoda
#   make run      the OpenAI-compatible server on the default model (prints a curl command);
#                 installs and builds only what serving needs (no test binaries)
#   make install  install pagoda, libpagoda, pagoda.h, pagoda.pc, the man page
#                 under PREFIX (default /usr/local), DESTDIR for staging
#   make package  Debian packages (CPack): amd64 and, with the cross toolchain, arm64
#   make test-package  install the amd64 .deb into a fresh Debian root and serve from it
#   make image / make test-image  the container image (Dockerfile) / build + run + curl it
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
PREFIX  ?= /usr/local
DESTDIR ?=
# `make run` / `make install` configure build/ without tests when it is new
# (an existing build/ keeps its setting: `make build` turns them on)
SERVE_CONFIG := $(if $(wildcard build/CMakeCache.txt),,-DPAGODA_BUILD_TESTS=OFF)
PKG_FLAGS := -DCMAKE_BUILD_TYPE=Release -DPAGODA_WERROR=ON -DPAGODA_BUILD_TESTS=OFF \
             -DCMAKE_INSTALL_PREFIX=/usr
FUZZ_SECONDS ?= 10
FUZZ_TARGETS ?=
HAVE_CROSS := $(shell command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1 && echo 1)

.PHONY: all deps deps-serve build build-serve run install package package-native package-arm64 \
        test-package image test-image generate loadtest test test-native test-arm bench asan \
        fuzz format lint clean

all: build

deps:
	@bash scripts/install-deps.sh

deps-serve:
	@bash scripts/install-deps.sh --serve

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPAGODA_WERROR=ON -DPAGODA_BUILD_TESTS=ON \
	  $(CMAKE_FLAGS) >/dev/null
	@cmake --build build -j$(JOBS) -- --no-print-directory

# the command only (what `make run` needs; `make install` adds the libraries)
SERVE_TARGETS ?= pagoda
build-serve: deps-serve
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPAGODA_WERROR=ON $(SERVE_CONFIG) \
	  $(CMAKE_FLAGS) >/dev/null
	@cmake --build build -j$(JOBS) --target $(SERVE_TARGETS) -- --no-print-directory

run: build-serve
	./build/pagoda serve $(MODEL) $(if $(CHAT_TEMPLATE),--chat-template $(CHAT_TEMPLATE)) $(SERVE_FLAGS)

install:
	@$(MAKE) --no-print-directory build-serve SERVE_TARGETS="pagoda pagoda_shared pagoda_core"
	DESTDIR=$(DESTDIR) cmake --install build --prefix $(PREFIX)

# Debian packages: build-pkg/packages/ (amd64), build-pkg-arm/packages/ (arm64)
package: package-native $(if $(filter x86_64,$(shell uname -m)),package-arm64)

package-native: deps-serve
	@cmake -S . -B build-pkg $(PKG_FLAGS) $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-pkg -j$(JOBS) -- --no-print-directory
	cd build-pkg && cpack -G DEB
	@for d in build-pkg/packages/*.deb; do echo "== $$d"; dpkg-deb -f $$d Package Architecture Depends; done

package-arm64:
	@bash scripts/install-deps.sh --serve-arm64
	@cmake -S . -B build-pkg-arm $(PKG_FLAGS) -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
	  $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-pkg-arm -j$(JOBS) -- --no-print-directory
	cd build-pkg-arm && cpack -G DEB
	@for d in build-pkg-arm/packages/*.deb; do echo "== $$d"; dpkg-deb -f $$d Package Architecture Depends; done

# heavy, not part of `make test`: a fresh Debian root per run (cached base in CACHE_DIR)
CACHE_DIR ?= /work/cache
test-package: package-native
	@bash scripts/install-deps.sh --containers
	bash scripts/test-package.sh build-pkg/packages $(MODEL) $(CACHE_DIR)

image: package-native
	@bash scripts/install-deps.sh --containers
	bash scripts/test-image.sh --build-only build-pkg/packages $(MODEL) $(CACHE_DIR)

test-image: package-native
	@bash scripts/install-deps.sh --containers
	bash scripts/test-image.sh build-pkg/packages $(MODEL) $(CACHE_DIR)

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
	rm -rf build build-arm build-asan build-pkg build-pkg-arm build-fuzz
