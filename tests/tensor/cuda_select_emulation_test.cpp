// Kiln's CUDA topk and multinomial kernels (tensor/cuda/select_kernels.cuh)
// run on the CPU through tests/tensor/cuda_emulation.h (Note [Emulated
// kernels]) against the CPU backend, which they must match exactly: radix
// select with ties inside and across the last byte, NaN and -0, k from 1 to
// n (k = n is sort), grids with fewer blocks than rows (the scratch reused),
// multinomial with and without replacement and its error records.
// SelectCuda.* in select_test.cpp and SortCuda.* in sort_test.cpp check the
// same on a GPU.
#include "tests/tensor/cuda_emulation.h"
// After the emulation: its definitions make the kernels C++.
#include <gtest/gtest.h>

#include <array>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cuda/select_kernels.cuh"
#include "tensor/multinomial_draw.h"
#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

namespace sk = cuda::select_kernels;
using emulation::Dim3;

// The kernel's topk of in (rows, n) on `blocks` blocks of `threads` threads.
template <class T>
void emulated_topk(const Tensor& in, int64_t k, bool largest, unsigned blocks, unsigned threads, Tensor& values,
                   Tensor& indices) {
  const int64_t rows = in.size(0), n = in.size(1);
  values = Tensor::empty({rows, k}, in.dtype());
  indices = Tensor::empty({rows, k}, DType::Int64);
  int64_t padded = 1;
  while (padded < k) padded <<= 1;
  std::vector<sk::KeyOf<T>> keys(blocks * padded);
  std::vector<int64_t> slots(blocks * padded);
  emulation::launch(Dim3{blocks, 1, 1}, threads, sizeof(sk::TopKShared), sk::topk_kernel<T>, values.data<T>(),
                    indices.data<int64_t>(), in.data<T>(), rows, n, k, largest, keys.data(), slots.data(), padded);
}

template <class T>
void expect_topk_matches_cpu(const Tensor& in, int64_t k, bool largest, unsigned blocks, unsigned threads) {
  const std::string what = detail::str(in.dtype(), " (", in.size(0), ", ", in.size(1), ") k ", k,
                                       largest ? " largest" : " smallest", " on ", blocks, "x", threads);
  Tensor values, indices;
  emulated_topk<T>(in, k, largest, blocks, threads, values, indices);
  Tensor cpu_values = Tensor::empty({in.size(0), k}, in.dtype());
  Tensor cpu_indices = Tensor::empty({in.size(0), k}, DType::Int64);
  backend_for(kCPU).topk(cpu_values, cpu_indices, in, k, largest);
  for (int64_t i = 0; i < values.numel(); ++i) {
    ASSERT_EQ(cpu_indices.data<int64_t>()[i], indices.data<int64_t>()[i]) << what << ": index " << i;
    const double e = flat_value(cpu_values, i), a = flat_value(values, i);
    ASSERT_TRUE(e == a || (std::isnan(e) && std::isnan(a))) << what << ": value " << i << ": " << e << " vs " << a;
  }
}

// Row-major values in [lo, hi), floored for integer dtypes (ties), as T's dtype.
Tensor values_for(DType dtype, const Shape& shape, uint64_t seed, double lo, double hi) {
  std::vector<double> v = pseudo_random(shape_numel(shape, "values_for"), lo, hi, seed);
  for (double& x : v) {
    if (!is_floating(dtype)) x = std::floor(x);
  }
  return from_vector(v, shape).to(dtype);
}

template <class T>
void check_topk_dtype(DType dtype) {
  // Distinct-ish values in short rows, on fewer blocks than rows.
  Tensor short_rows = values_for(dtype, {5, 17}, 1, -100, 100);
  for (int64_t k : {1, 2, 8, 16, 17}) {
    for (bool largest : {true, false}) expect_topk_matches_cpu<T>(short_rows, k, largest, 2, 64);
  }
  // Many ties: four distinct values, so the k-th value's ties straddle k.
  Tensor ties = values_for(dtype, {3, 300}, 2, 0, 4);
  for (int64_t k : {1, 2, 75, 76, 150, 299, 300}) {
    for (bool largest : {true, false}) expect_topk_matches_cpu<T>(ties, k, largest, 3, 64);
  }
  // A longer row on a full block.
  Tensor wide = values_for(dtype, {2, 3000}, 3, -100, 100);
  for (int64_t k : {1, 40, 1000}) expect_topk_matches_cpu<T>(wide, k, true, 1, 64);
}

TEST(CudaSelectEmulation, TopKMatchesTheCpuForEveryDtype) {
  check_topk_dtype<float>(DType::Float32);
  check_topk_dtype<double>(DType::Float64);
  check_topk_dtype<int64_t>(DType::Int64);
  check_topk_dtype<int32_t>(DType::Int32);
  check_topk_dtype<int8_t>(DType::Int8);
  check_topk_dtype<uint8_t>(DType::UInt8);
}

// sort is topk of every entry (tensor/select.h): rows whose padding to a
// power of two nearly doubles them, with ties, NaN and -0, in both orders.
TEST(CudaSelectEmulation, TopKOfEveryEntryIsTheCpusStableSort) {
  for (int64_t n : {1, 2, 129, 2049}) {
    Tensor ties = values_for(DType::Float32, {3, n}, 5 + n, 0, 8).to(DType::Int64).to(DType::Float32);
    ties.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    if (n > 2) ties.data<float>()[2] = -0.0f;
    for (bool largest : {true, false}) expect_topk_matches_cpu<float>(ties, n, largest, 2, 256);
  }
  Tensor bytes = values_for(DType::UInt8, {2, 1000}, 6, 0, 2);
  for (bool largest : {true, false}) expect_topk_matches_cpu<uint8_t>(bytes, 1000, largest, 1, 256);
}

TEST(CudaSelectEmulation, TopKRanksNaNAndSignedZerosAsTheCpu) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  Tensor x = from_vector<float>({0.0f, -0.0f, kNaN, 1.0f, -kInf, -0.0f, kNaN, kInf, 0.0f, -1.0f, -kNaN, 2.0f}, {2, 6});
  for (int64_t k = 1; k <= 6; ++k) {
    for (bool largest : {true, false}) expect_topk_matches_cpu<float>(x, k, largest, 1, 32);
  }
  Tensor d = x.to(DType::Float64);
  for (int64_t k : {1, 3, 6}) expect_topk_matches_cpu<double>(d, k, false, 2, 32);
}

// Records the kernel's problems (any thread may record).
struct RecordedProblems {
  std::mutex* mutex;
  std::vector<std::array<int64_t, 3>>* problems;
  void record(int64_t a, int64_t b, int64_t c) const {
    std::lock_guard<std::mutex> lock(*mutex);
    problems->push_back({a, b, c});
  }
};

// The kernel's draws from probs (rows, n) on `blocks` blocks; its problems in `problems`.
template <class T>
Tensor emulated_multinomial(const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed, uint64_t offset,
                            unsigned blocks, std::vector<std::array<int64_t, 3>>& problems) {
  const int64_t rows = probs.size(0), n = probs.size(1);
  Tensor out = full({rows, num_samples}, -1, DType::Int64);
  std::vector<double> left(replacement ? 0 : blocks * n);
  std::mutex mutex;
  emulation::launch(Dim3{blocks, 1, 1}, sk::kThreads, sizeof(sk::MultinomialShared),
                    sk::multinomial_kernel<T, RecordedProblems>, out.data<int64_t>(), probs.data<T>(),
                    replacement ? nullptr : left.data(), rows, n, num_samples, replacement, seed, offset,
                    RecordedProblems{&mutex, &problems});
  return out;
}

template <class T>
void check_multinomial_dtype(DType dtype) {
  for (int64_t n : {1, 3, 255, 257, 1000}) {
    for (bool replacement : {true, false}) {
      Tensor p = values_for(DType::Float64, {5, n}, 4 + n, 0, 1).to(dtype);
      if (n > 4) {
        Tensor column = p.select(1, 2);
        ops::fill_(column, 0.0);
      }
      const int64_t num_samples = replacement ? 30 : (n > 4 ? n - 1 : n);
      std::vector<std::array<int64_t, 3>> problems;
      Tensor got = emulated_multinomial<T>(p, num_samples, replacement, 77, 5000, 2, problems);
      EXPECT_TRUE(problems.empty()) << "n " << n;
      Tensor expected = Tensor::empty({5, num_samples}, DType::Int64);
      backend_for(kCPU).multinomial(expected, p, num_samples, replacement, 77, 5000);
      EXPECT_TRUE(equal(expected, got)) << dtype << " n " << n << (replacement ? " with" : " without")
                                        << " replacement";
    }
  }
}

TEST(CudaSelectEmulation, MultinomialDrawsTheCpusSamples) {
  check_multinomial_dtype<float>(DType::Float32);
  check_multinomial_dtype<double>(DType::Float64);
}

TEST(CudaSelectEmulation, MultinomialRecordsTheCpusProblems) {
  struct Case {
    std::vector<double> probs;  // (2, 3)
    int64_t num_samples;
    bool replacement;
  };
  const std::vector<Case> cases = {
      {{1, 1, 1, 1, -0.5, 1}, 1, true},  // a negative entry in row 1
      {{1, 1, 1, 0, 0, 0}, 1, true},     // row 1 sums to zero
      {{1, 0, 0, 1, 1, 1}, 2, false},    // row 0 has one positive entry for two draws
  };
  for (const Case& c : cases) {
    Tensor p = from_vector(c.probs, {2, 3});
    std::vector<std::array<int64_t, 3>> problems;
    emulated_multinomial<double>(p, c.num_samples, c.replacement, 1, 0, 1, problems);
    ASSERT_EQ(problems.size(), 1u);
    std::string cpu_message;
    try {
      backend_for(kCPU).multinomial(Tensor::empty({2, c.num_samples}, DType::Int64), p, c.num_samples, c.replacement, 1,
                                    0);
    } catch (const Error& e) {
      cpu_message = e.message();
    }
    const std::string kernel_message = multinomial_draw::error_message(problems[0][0], problems[0][1], problems[0][2]);
    EXPECT_NE(cpu_message.find(kernel_message), std::string::npos)
        << "CPU: " << cpu_message << "\nkernel: " << kernel_message;
  }
}

}  // namespace
}  // namespace kiln
