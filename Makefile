# The two Quick start commands (README): `make train` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
TRAIN_FLAGS ?=

.PHONY: deps configure build train test install bench clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: train LeNet on CIFAR-10 with the default recipe. The data comes
# from $$KILN_DATA, else data/, else a download (scripts/get-cifar10.sh); the
# log, plot and checkpoint go to $(BUILD)/lenet/.
train: build
	@data="$$(bash scripts/get-cifar10.sh)" && mkdir -p $(BUILD)/lenet && \
	$(BUILD)/apps/lenet/kiln-lenet --data "$$data" --log $(BUILD)/lenet/train.jsonl \
	  --plot $(BUILD)/lenet/train.svg --save $(BUILD)/lenet/checkpoint.safetensors $(TRAIN_FLAGS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

install: build
	cmake --install $(BUILD)

bench: build
	bash bench/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD)
