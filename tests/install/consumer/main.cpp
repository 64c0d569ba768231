// A program built against an installed Kiln: fills a tensor, copies it
// through a transposed view with a dtype conversion, overwrites one row
// through a view, and checks every element. Exits non-zero on any mismatch.
#include <kiln.h>

#include <cstdio>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "kiln consumer: FAILED: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  using namespace kiln;
  try {
    Tensor a = full({2, 3}, 1.5);           // float32 (2, 3)
    Tensor b = zeros({3, 2}, DType::Float64);
    b.copy_(a.t());                         // (3, 2) view of a, converted
    b.select(0, 1).copy_(from_vector<double>({7.0, 8.0}));
    expect(b.shape() == Shape({3, 2}), "b has shape (3, 2)");
    const double expected[3][2] = {{1.5, 1.5}, {7.0, 8.0}, {1.5, 1.5}};
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 2; ++j) expect(b.at<double>({i, j}) == expected[i][j], "b's values");
    }
    expect(a.at<float>({1, 2}) == 1.5f, "a is unchanged");
    expect(b.storage() != a.storage(), "copy_ wrote b's own storage");

#if defined(KILN_WITH_CUDA) != KILN_CONSUMER_EXPECT_CUDA
    expect(false, "KILN_WITH_CUDA reached the consumer exactly when Kiln was built with CUDA");
#endif
#ifdef KILN_WITH_CUDA
    // The CUDA backend links and answers without needing a GPU.
    expect(backend_for(cuda_device(0)).name() == "cuda", "the CUDA backend is named cuda");
#else
    bool threw = false;
    try {
      backend_for(cuda_device(0));
    } catch (const Error&) {
      threw = true;
    }
    expect(threw, "a build without CUDA refuses CUDA devices with kiln::Error");
#endif
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln consumer: FAILED with kiln::Error: %s\n", e.what());
    return 1;
  }
  if (failures != 0) return 1;
  std::printf("kiln consumer: ok\n");
  return 0;
}
