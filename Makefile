# Entry points of the README's quick start. CMake does the real build in build/.
BUILD ?= build
JOBS ?= $(shell nproc)
DEB_PACKAGES := cmake g++ make pkg-config googletest libgtest-dev liburing-dev libisal-dev \
	libcli11-dev nlohmann-json3-dev fio nvme-cli tshark gnuplot iproute2 procps python3

.PHONY: all deps build test demo interop bench clean format

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

demo: deps build
	./scripts/demo.sh $(BUILD)/sens

interop: deps build
	./tests/interop/run_all.sh $(BUILD)/sens

bench: deps build
	./bench/run.sh $(BUILD)/sens

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD)
