// A program that uses the CUDA API beyond tensors (tensor/cuda/*.h), as
// find_package(Kiln COMPONENTS cuda) and kiln::kiln_cuda provide it: the
// component must bring KILN_WITH_CUDA, the CUDA toolkit's headers and
// libkiln_cuda, registered before main. It needs no GPU.
#include <kiln.h>

#include <cstdio>

#ifndef KILN_WITH_CUDA
#error "kiln::kiln_cuda did not bring KILN_WITH_CUDA"
#endif

int main() {
  kiln::cuda::set_allow_tf32(true);  // a setting of libkiln_cuda's own
  const bool ok = kiln::cuda::allow_tf32() && kiln::backend_for(kiln::cuda_device(0)).name() == "cuda";
  std::printf("kiln cuda consumer: %s (%d CUDA devices)\n", ok ? "ok" : "FAILED", kiln::cuda::device_count());
  return ok ? 0 : 1;
}
