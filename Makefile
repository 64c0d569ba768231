# The two Quick start commands (README): `make train` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
TRAIN_FLAGS ?=
# The second configuration test-cpu-only builds: what a machine without the
# CUDA toolkit, Gloo or MPI gets.
CPU_BUILD ?= build-cpu
CPU_ONLY_FLAGS = -DKILN_CUDA=OFF -DKILN_GLOO=OFF -DKILN_MPI=OFF -DKILN_BUILD_BENCH=ON

.PHONY: deps configure build train test test-cpu-only install bench clean

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

# The whole suite again in a build with every optional backend compiled out,
# so that code and tests which assume CUDA, Gloo or MPI fail here rather than
# on a user's machine without them. With the default build it compiles both
# sides of every KILN_WITH_CUDA, _GLOO and _MPI #ifdef, except a
# KILN_WITH_CUDA one inside Gloo or MPI code (process_group_gloo.cpp): that
# needs a third build, CUDA off with Gloo and MPI on, not run here for time.
# The benchmarks are built too (bench/lenet.cpp has a KILN_WITH_CUDA branch,
# and `make train` builds them), not run.
test-cpu-only: deps
	cmake -S . -B $(CPU_BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) $(CPU_ONLY_FLAGS)
	cmake --build $(CPU_BUILD) -j $(JOBS)
	ctest --test-dir $(CPU_BUILD) --output-on-failure -j $(JOBS)

install: build
	cmake --install $(BUILD)

bench: build
	bash bench/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(CPU_BUILD)
