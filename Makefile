# The two Quick start commands (README): `make train` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
TRAIN_FLAGS ?=
# The second configuration test-cpu-only builds: what a machine without the
# CUDA toolkit, Gloo or MPI gets.
CPU_BUILD ?= build-cpu
CPU_ONLY_FLAGS = -DKILN_CUDA=OFF -DKILN_GLOO=OFF -DKILN_MPI=OFF -DKILN_BUILD_BENCH=ON
# The third, test-cpu-distributed: CUDA off with Gloo and MPI on, what a
# machine without the CUDA toolkit gets from scripts/install-deps.sh.
CPU_DIST_BUILD ?= build-cpu-distributed
CPU_DIST_FLAGS = -DKILN_CUDA=OFF -DKILN_GLOO=ON -DKILN_MPI=ON -DKILN_BUILD_BENCH=OFF

.PHONY: deps configure build train test test-cpu-only test-cpu-distributed install bench clean

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
# is test-cpu-distributed's. The benchmarks are built too (bench/lenet.cpp
# has a KILN_WITH_CUDA branch, and `make train` builds them), not run.
test-cpu-only: deps
	cmake -S . -B $(CPU_BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) $(CPU_ONLY_FLAGS)
	cmake --build $(CPU_BUILD) -j $(JOBS)
	ctest --test-dir $(CPU_BUILD) --output-on-failure -j $(JOBS)

# CUDA off with Gloo and MPI on: the library, the apps and the two suites
# whose code differs from the other two builds' (distributed/ and the apps,
# where the CPU side of a KILN_WITH_CUDA #ifdef meets Gloo and MPI), built
# and run.
test-cpu-distributed: deps
	cmake -S . -B $(CPU_DIST_BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) $(CPU_DIST_FLAGS)
	cmake --build $(CPU_DIST_BUILD) -j $(JOBS) --target kiln_distributed_tests kiln_apps_tests
	ctest --test-dir $(CPU_DIST_BUILD) --output-on-failure -j $(JOBS) -L 'distributed|apps'

install: build
	cmake --install $(BUILD)

bench: build
	bash bench/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(CPU_BUILD) $(CPU_DIST_BUILD)
