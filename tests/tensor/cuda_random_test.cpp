// CUDA random fills against the CPU's: the same seed and offset must give
// the same bits for every distribution and dtype (Note [Random streams] in
// tensor/random.h, Note [Bitwise random streams] in tensor/philox.h).
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "tensor/random.h"
#include "tests/tensor/cuda_test_util.h"

namespace kiln {

using namespace kiln::ops;
using namespace kiln::backend_compare;
namespace {

// Both the same shape and dtype, and the same bytes element by element.
void expect_same_bits(const Tensor& expected, const Tensor& actual_on_gpu, const std::string& what) {
  Tensor actual = actual_on_gpu.cpu();
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  ASSERT_EQ(expected.dtype(), actual.dtype()) << what;
  const size_t size = expected.element_size();
  const char* pe = static_cast<const char*>(expected.data_ptr());
  const char* pa = static_cast<const char*>(actual.data_ptr());
  for (int64_t i = 0; i < expected.numel(); ++i) {
    if (std::memcmp(pe + i * size, pa + i * size, size) != 0) {
      ADD_FAILURE() << what << ": element " << i << " of " << expected.numel() << " differs: CPU "
                    << flat_value(expected, i) << ", CUDA " << flat_value(actual, i);
      return;
    }
  }
}

// Fills a CPU and a CUDA tensor through the backends with the same draw.
void check_backend_draw(DType dtype, Distribution dist, double a, double b, uint64_t seed, uint64_t offset,
                        int64_t n, const std::string& what) {
  Tensor cpu = Tensor::empty({n}, dtype);
  Tensor dev = Tensor::empty({n}, {dtype, gpu()});
  backend_for(kCPU).random(cpu, dist, a, b, seed, offset);
  backend_for(gpu()).random(dev, dist, a, b, seed, offset);
  expect_same_bits(cpu, dev, what);
}

// 100003 elements: many blocks and a ragged last one.
constexpr int64_t kCount = 100003;

TEST(CudaRandom, UniformMatchesTheCpuBitwise) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes) {
    check_backend_draw(dtype, Distribution::Uniform, -2.0, 3.0, 42, 7, kCount, detail::str("uniform ", dtype));
    // [1, 2): the float32 rounding of values near 2 lands on b and is moved to a.
    check_backend_draw(dtype, Distribution::Uniform, 1.0, 2.0, 5, 0, kCount, detail::str("uniform [1,2) ", dtype));
  }
}

TEST(CudaRandom, NormalMatchesTheCpuBitwise) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes) {
    for (uint64_t seed : {0ull, 9ull, 0x123456789abcdefull}) {
      check_backend_draw(dtype, Distribution::Normal, 0.5, 2.0, seed, 1000, kCount,
                         detail::str("normal ", dtype, " seed ", seed));
    }
  }
}

TEST(CudaRandom, BernoulliMatchesTheCpuBitwise) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kEveryDType) {
    check_backend_draw(dtype, Distribution::Bernoulli, 0.3, 0.0, 11, 3, kCount, detail::str("bernoulli ", dtype));
  }
}

TEST(CudaRandom, RandIntMatchesTheCpuBitwise) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kEveryDType) {
    // Ranges every dtype holds: [0, 2) for bool, [0, 200) for uint8, ...
    double low = dtype == DType::Bool ? 0 : dtype == DType::UInt8 ? 0 : -100;
    double high = dtype == DType::Bool ? 2 : dtype == DType::UInt8 ? 200 : 100;
    check_backend_draw(dtype, Distribution::RandInt, low, high, 13, 0, kCount, detail::str("randint ", dtype));
  }
  // A range wider than 2^32 reaches the high word of the multiply-shift.
  check_backend_draw(DType::Int64, Distribution::RandInt, -1000.0, 3000000000007.0, 9, 0, kCount, "randint wide");
}

TEST(CudaRandom, CounterCarriesIntoTheHighWordAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  // Offsets just below 2^64: the counter's low half wraps inside the draw.
  check_backend_draw(DType::Float32, Distribution::Uniform, 0.0, 1.0, 3, ~0ull - 1000, 5000, "uniform carry");
  check_backend_draw(DType::Float64, Distribution::Normal, 0.0, 1.0, 3, ~0ull - 1000, 5000, "normal carry");
}

TEST(CudaRandom, FactoriesGiveTheCpuValuesForTheSameGenerator) {
  SKIP_WITHOUT_GPU();
  Generator g_cpu(1234), g_dev(1234);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    expect_same_bits(randn({37, 41}, dtype, &g_cpu), randn({37, 41}, {dtype, gpu()}, &g_dev),
                     detail::str("randn ", dtype));
    expect_same_bits(rand({1000}, dtype, &g_cpu), rand({1000}, {dtype, gpu()}, &g_dev), detail::str("rand ", dtype));
  }
  expect_same_bits(randint(-5, 17, {999}, DType::Int64, &g_cpu), randint(-5, 17, {999}, {DType::Int64, gpu()}, &g_dev),
                   "randint");
  EXPECT_EQ(g_cpu.offset(), g_dev.offset());
}

TEST(CudaRandom, NonContiguousOutputsAreRejected) {
  SKIP_WITHOUT_GPU();
  Tensor t = Tensor::empty({4, 6}, {DType::Float32, gpu()}).t();
  expect_error([&] { backend_for(gpu()).random(t, Distribution::Uniform, 0, 1, 0, 0); },
               "random: the output must be contiguous");
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
