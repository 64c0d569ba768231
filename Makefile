# The two Quick start commands (README): `make train` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build train test install bench clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: a tour of tensors, autograd and a LeNet training loop until the
# CIFAR-10 LeNet trainer lands.
train: build
	$(BUILD)/apps/demo/kiln-demo

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

install: build
	cmake --install $(BUILD)

bench: build
	bash bench/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD)
