# Entry points of the README's quick start. CMake does the real build in build/.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
JOBS ?= $(shell nproc)
# clang and libclang-rt-14-dev (its sanitizer and libFuzzer runtimes): make sanitize, make fuzz.
DEB_PACKAGES := cmake g++ make pkg-config googletest libgtest-dev liburing-dev libisal-dev \
	libcli11-dev nlohmann-json3-dev fio nvme-cli tshark gnuplot iproute2 procps python3 \
	clang libclang-rt-14-dev

.PHONY: all deps build test sanitize fuzz demo interop bench clean format

all: build

# Installs only what is missing, so a machine that has everything runs no apt-get at all.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null

build: $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j 2

# The unit and integration tests again, built with ASan + UBSan (the `sens` children too);
# any sanitizer report fails the run. clang: it builds this with 60% of gcc's CPU time, and
# gcc's UBSan (next to its ASan) ignores log_path, which tests/sanitize.sh relies on.
$(ASAN_BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DSENS_SANITIZE=ON > /dev/null

sanitize: deps $(ASAN_BUILD)/Makefile
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	./tests/sanitize.sh $(ASAN_BUILD)

# libFuzzer targets (clang), each run FUZZ_SECONDS over tests/fuzz/corpus; a crash, hang,
# leak or sanitizer report fails the run.
$(FUZZ_BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DSENS_FUZZ=ON > /dev/null

fuzz: deps $(FUZZ_BUILD)/Makefile
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_pdu_reader fuzz_target_dispatch
	./tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

demo: deps build
	./scripts/demo.sh $(BUILD)/sens

interop: deps build
	./tests/interop/run_all.sh $(BUILD)/sens

bench: deps build
	./bench/run.sh $(BUILD)/sens

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
