# Installs a built Kiln into a scratch prefix and builds and runs a consumer
# project against it (see tests/install/CMakeLists.txt). Run by ctest as
#   cmake -DKILN_BUILD_DIR=<build> -DCONSUMER_SOURCE_DIR=<src> -DWORK_DIR=<scratch>
#         -DGENERATOR=<gen> -DCXX_COMPILER=<c++> -DBUILD_TYPE=<config> -DKILN_CUDA=<ON|OFF>
#         -DKILN_GLOO=<ON|OFF> -DEXPECT_CUDA=<loads|absent> -DEXPECT_MPI=<loads|absent>
#         -P run_install_test.cmake
# Each step stops the test with the failing command's output.
cmake_minimum_required(VERSION 3.25)

foreach(var KILN_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER KILN_CUDA KILN_GLOO EXPECT_CUDA
        EXPECT_MPI)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_install_test.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})

function(run_step name)
  message(STATUS "install test: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "install test: ${name} failed (${status}):\n${ARGN}\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()

run_step("install Kiln into ${prefix}"
  ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${prefix} --config ${BUILD_TYPE})

# Only the scratch prefix may provide Kiln: no package registry, no build tree.
run_step("configure the consumer"
  ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${consumer_build} -G ${GENERATOR}
  -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DKILN_CONSUMER_CUDA=${KILN_CUDA})

file(STRINGS ${consumer_build}/CMakeCache.txt kiln_dir REGEX "^Kiln_DIR:")
string(REGEX REPLACE "^Kiln_DIR:[A-Z]+=" "" kiln_dir "${kiln_dir}")
string(FIND "${kiln_dir}" "${prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "install test: the consumer found Kiln at '${kiln_dir}', not under ${prefix}")
endif()

# The programs run from the prefix, finding libkiln there (no
# LD_LIBRARY_PATH): the tool alone, then two copies of it under the
# installed launcher.
foreach(program kiln-run kiln-lenet kiln-gpt kiln-dcgan kiln-checkpoint kiln-pipeline-schedule
        kiln-image-folder-to-cifar)
  if(NOT EXISTS ${prefix}/bin/${program})
    message(FATAL_ERROR "install test: ${prefix}/bin/${program} was not installed")
  endif()
endforeach()
run_step("run the installed kiln-pipeline-schedule"
  ${prefix}/bin/kiln-pipeline-schedule --schedule 1f1b --ranks 2 --micro-batches 2)
run_step("run it twice under the installed kiln-run"
  ${prefix}/bin/kiln-run --nproc-per-node 2 ${prefix}/bin/kiln-pipeline-schedule --ranks 2 --micro-batches 2)

run_step("build the consumer" ${CMAKE_COMMAND} --build ${consumer_build} --config ${BUILD_TYPE})
# The consumer finds libkiln through the build RPATH CMake gives it for the
# imported kiln::kiln; no LD_LIBRARY_PATH, as a user's program would.
# What each optional backend's library should do here (the consumer's
# backends.cpp); install.consumer_without_gpu_libraries runs it again with
# those libraries hidden.
run_step("run the consumer" ${consumer_build}/consumer --cuda=${EXPECT_CUDA} --nccl=${EXPECT_CUDA}
  --mpi=${EXPECT_MPI})
if(KILN_CUDA)
  run_step("run the consumer of the cuda component" ${consumer_build}/consumer_cuda)
endif()
# DDP as an embedder runs it: the consumer's own program, twice, under the
# installed launcher. A Kiln without Gloo has no CPU process group to run it on.
if(KILN_GLOO)
  run_step("run the consumer's DDP program under the installed kiln-run"
    ${prefix}/bin/kiln-run --nproc-per-node 2 ${consumer_build}/consumer_ddp)
else()
  message(STATUS "install test: the DDP program is not run: this Kiln was built without Gloo")
endif()
