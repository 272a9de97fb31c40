# Entry points of the README's quick start. CMake does the real build in build/.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
TSAN_BUILD ?= build-tsan
FUZZ_SECONDS ?= 60
JOBS ?= $(shell nproc)
# What building `sens` needs (make demo installs only these), then what the tests, the
# sanitizer and fuzz builds (clang, libclang-rt-14-dev), the fio engine and the interop and
# bench scripts need on top (make test, make deps).
# Intel's ipsec-mb for TLS records' AES-GCM: packaged for x86-64 only (elsewhere OpenSSL's).
IPSEC_MB_PACKAGE := $(if $(filter x86_64,$(shell uname -m)),libipsec-mb-dev)
BUILD_PACKAGES := cmake ninja-build g++ make pkg-config liburing-dev libisal-dev libssl-dev libcli11-dev \
	nlohmann-json3-dev libcpp-httplib-dev libsystemd-dev python3 $(IPSEC_MB_PACKAGE)
TEST_PACKAGES := googletest libgtest-dev fio nvme-cli tshark gnuplot iproute2 procps \
	clang libclang-rt-14-dev librbd-dev librados-dev openssl
# The one-node Ceph cluster the rbd tests start (tests/rbd/cluster.sh), installed without
# Recommends (ceph-mgr's would pull in its dashboard and more).
CEPH_PACKAGES := ceph-mon ceph-osd ceph-mgr ceph-common uuid-runtime

# fio's engine headers: the installed fio's own source package (deb-src of the same archive),
# configured, so that libsens_fio.so matches it (fio checks FIO_IOOPS_VERSION on load).
FIO_SRC_ROOT ?= /usr/local/src/sens-fio

.PHONY: all deps deps-build fio-src configure sens build test sanitize tsan fuzz demo interop bench \
	build-times clean format install

all: build

deps-build:
	@./scripts/install-packages.sh build $(BUILD_PACKAGES)

deps: deps-build
	@./scripts/install-packages.sh tests $(TEST_PACKAGES)
	@./scripts/install-packages.sh --no-recommends "the Ceph test cluster" $(CEPH_PACKAGES)
	@$(MAKE) --no-print-directory fio-src

fio-src:
	@ver=$$(dpkg-query -W -f='$${Version}' fio); up=$${ver%-*}; up=$${up#*:}; \
	dir=$(FIO_SRC_ROOT)/fio-$$up; \
	if [ ! -f $$dir/config-host.h ]; then \
	  echo "fio $$ver source for the engine headers -> $$dir"; \
	  if ! grep -rqs '^Types: deb-src' /etc/apt/sources.list.d/ && \
	     ! grep -qs '^deb-src' /etc/apt/sources.list; then \
	    uris=$$(awk '/^URIs:/{print $$2; exit}' /etc/apt/sources.list.d/debian.sources); \
	    suite=$$(awk '/^Suites:/{print $$2; exit}' /etc/apt/sources.list.d/debian.sources); \
	    printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
	      "$$uris" "$$suite" > /etc/apt/sources.list.d/sens-fio-src.sources; \
	    apt-get update -qq; \
	  fi; \
	  mkdir -p $(FIO_SRC_ROOT) && cd $(FIO_SRC_ROOT) && \
	  apt-get source -qq --download-only fio=$$ver && \
	  tar xzf fio_$$up.orig.tar.gz && cd fio-$$up && ./configure --disable-native > configure.log; \
	fi

# Configured every time (about a second): what `make deps` installed since the last run (the
# test framework, librbd, fio's sources) is found, so a tree first built by `make demo` grows
# its tests and backends when `make test` runs. Ninja, not Makefiles: it compiles the objects
# of a target while the libraries that target links are still being built.
configure:
	@./scripts/configure.sh $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo

# Only the `sens` binary: what the demo runs.
sens: deps-build configure
	@echo "[build] compiling sens with $(JOBS) jobs (the tests come with make test)"
	@t0=$$(date +%s); cmake --build $(BUILD) -j $(JOBS) --target sens && \
	  echo "[build] sens built in $$(( $$(date +%s) - t0 )) s"

# `sens`, the host library with its header and sens-host.pc, sens-target.service and an example
# config under $(DESTDIR)$(PREFIX) (cmake/service.cmake); /etc/sens is left alone.
PREFIX ?= /usr/local
install: sens
	cmake --build $(BUILD) -j $(JOBS) --target sens_host_shared
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j 2

# Where the compile time goes: a build from scratch with every compile timed, the slowest
# translation units listed (scripts/build_times.sh; README, development notes).
build-times: deps
	./scripts/build_times.sh

# The unit and integration tests again, built with ASan + UBSan (the `sens` children too);
# any sanitizer report fails the run. clang: it builds this with 60% of gcc's CPU time, and
# gcc's UBSan (next to its ASan) ignores log_path, which tests/sanitize.sh relies on.
sanitize: deps
	@./scripts/configure.sh $(ASAN_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DSENS_SANITIZE=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	./tests/sanitize.sh $(ASAN_BUILD)

# The tests that run code on several threads (host library, reactors, worker thread, the
# in-process target, and the `sens` children of the RPC, metrics and TLS suites), built with
# ThreadSanitizer; any data race fails the run. Only what those tests need is built; which
# tests and why: tests/tsan.sh.
TSAN_TARGETS := sens test_common test_reactor test_transport test_mgmt test_storage test_target \
	test_host test_integration
tsan: deps
	@./scripts/configure.sh $(TSAN_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DSENS_TSAN=ON
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TARGETS)
	./tests/tsan.sh $(TSAN_BUILD)

# libFuzzer targets (clang), each run FUZZ_SECONDS over tests/fuzz/corpus; a crash, hang,
# leak or sanitizer report fails the run.
# Every tests/fuzz/fuzz_NAME.cc is a target (the same glob as CMake's and tests/fuzz/run.sh's),
# so a new fuzzer cannot be run without being built.
FUZZ_TARGETS := $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.cc)))
fuzz: deps
	@./scripts/configure.sh $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DSENS_FUZZ=ON
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS)
	./tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

demo: sens
	@./scripts/demo.sh $(BUILD)/sens

interop: deps build
	./tests/interop/run_all.sh $(BUILD)/sens

bench: deps build
	./bench/run.sh $(BUILD)/sens

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(TSAN_BUILD)
