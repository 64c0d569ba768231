// A program built against an installed Kiln: fills a tensor, copies it
// through a transposed view with a dtype conversion, overwrites one row
// through a view, and checks every element; then one call from each
// umbrella header (kiln/data.h, kiln/distributed.h, kiln/quant.h), a
// sequence model of its own trained on a dataset of its own
// (sequence_model.cpp), and what the optional backends' libraries do here
// (backends.cpp). Exits non-zero on any mismatch.
#include <kiln.h>
#include <kiln/data.h>
#include <kiln/distributed.h>
#include <kiln/quant.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace consumer {
int check_sequence_model();
int check_backends(const std::string& cuda, const std::string& nccl, const std::string& mpi);
}  // namespace consumer

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "kiln consumer: FAILED: %s\n", what);
    ++failures;
  }
}

// The value of `--name=value` among the arguments; exits when it is missing.
std::string option(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(name + "=", 0) == 0) return arg.substr(name.size() + 1);
  }
  std::fprintf(stderr, "usage: consumer --cuda=WHAT --nccl=WHAT --mpi=WHAT (WHAT: loads, absent, unloadable)\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
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

    // The umbrella headers: a batch collated from structured examples, the
    // distributed API without a group, and an observer's quantization range.
    std::vector<std::pair<Tensor, int64_t>> examples = {{full({2}, 1.0), 3}, {full({2}, 2.0), 7}};
    auto [inputs, labels] = data::default_collate(std::move(examples));
    expect(inputs.shape() == Shape({2, 2}) && inputs.at<float>({1, 0}) == 2.0f, "default_collate stacks the tensors");
    expect(labels.dtype() == DType::Int64 && labels.at<int64_t>({1}) == 7, "default_collate makes int64 labels");
    expect(!distributed::is_initialized(), "no process group before init_process_group");
    quant::MinMaxObserver observer;
    observer.forward(from_vector<float>({-1.0f, 3.0f}));
    // torch's default: affine quint8 over [-1, 3], so a scale of 4 / 255.
    const quant::QParams qparams = observer.calculate_qparams();
    expect(qparams.scales.size() == 1 && std::abs(qparams.scales[0] - 4.0 / 255.0) < 1e-7,
           "the observer's scale is (max - min) / 255");

    failures += consumer::check_sequence_model();

#ifdef KILN_WITH_CUDA
    expect(false, "KILN_WITH_CUDA reaches only programs that link kiln::kiln_cuda");
#endif
    failures += consumer::check_backends(option(argc, argv, "--cuda"), option(argc, argv, "--nccl"),
                                         option(argc, argv, "--mpi"));
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln consumer: FAILED with kiln::Error: %s\n", e.what());
    return 1;
  }
  if (failures != 0) return 1;
  std::printf("kiln consumer: ok\n");
  return 0;
}
