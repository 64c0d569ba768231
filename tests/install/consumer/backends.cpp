// The consumer's checks of the optional backends' libraries (Note [Backends
// as plugins] in Kiln's tensor/plugin.h): the consumer links kiln::kiln only,
// and libkiln loads libkiln_cuda, libkiln_nccl and libkiln_mpi when they are
// first asked for. What each should do here is given on the command line:
//   loads       built, and its libraries can be loaded
//   absent      Kiln was built without it
//   unloadable  built, but a library it needs is hidden from the loader
//               (tests/install/without-gpu-libraries.sh)
#include <kiln.h>
#include <kiln/distributed.h>

#include <cstdio>
#include <string>

namespace consumer {

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "kiln consumer: FAILED: %s\n", what.c_str());
    ++failures;
  }
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the kiln::Error `fn` throws, or "" when it throws none.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

void check_cuda(const std::string& expect_cuda) {
  using namespace kiln;
  const std::string reason = cuda::unavailable_reason();
  std::printf("kiln consumer: cuda %s: is_available() = %d, reason: %s\n", expect_cuda.c_str(),
              cuda::is_available(), reason.c_str());
  if (expect_cuda == "loads") {
    // The library loads; without a GPU the driver says why, which is not
    // about Kiln's libraries.
    expect(!contains(reason, "libkiln_cuda"), "libkiln_cuda loads: " + reason);
    expect(backend_for(cuda_device(0)).name() == "cuda", "the CUDA backend is named cuda");
    return;
  }
  expect(!cuda::is_available() && cuda::device_count() == 0, "no CUDA device without the CUDA backend");
  if (expect_cuda == "absent") {
    expect(contains(reason, "libkiln_cuda.so") && contains(reason, "does not exist"),
           "a build without CUDA says libkiln_cuda does not exist: " + reason);
  } else {
    expect(contains(reason, "cannot load") && contains(reason, ".so"),
           "a hidden CUDA library is named: " + reason);
  }
  const std::string moved = error_of([] { zeros({2}).to(kCUDA); });
  expect(contains(moved, "cuda:0") && contains(moved, reason), "moving a tensor to cuda:0 says why not: " + moved);
  const std::string pinned = error_of([] { zeros({2}).pin_memory(); });
  expect(contains(pinned, "pin_memory"), "pin_memory refuses without CUDA: " + pinned);
}

// `backend` (nccl or mpi) asked for through init_process_group: when it is
// not "loads", the error names the library that is missing.
void check_process_group_backend(const std::string& backend, const std::string& expected) {
  if (expected == "loads") return;  // initialising MPI or NCCL here is not this test's job
  const std::string error = error_of([&] { kiln::distributed::init_process_group(backend, "env://", 1, 0); });
  std::printf("kiln consumer: %s %s: %s\n", backend.c_str(), expected.c_str(), error.c_str());
  const std::string library = "libkiln_" + backend + ".so";
  if (expected == "absent") {
    expect(contains(error, library) && contains(error, "does not exist"),
           backend + " absent: the error says " + library + " does not exist: " + error);
  } else {
    expect(contains(error, "cannot load") && contains(error, library),
           backend + " unloadable: the error names what is missing: " + error);
  }
  expect(!kiln::distributed::is_initialized(), "a failed init_process_group leaves no group");
}

}  // namespace

int check_backends(const std::string& cuda, const std::string& nccl, const std::string& mpi) {
  check_cuda(cuda);
  check_process_group_backend("nccl", nccl);
  check_process_group_backend("mpi", mpi);
  return failures;
}

}  // namespace consumer
