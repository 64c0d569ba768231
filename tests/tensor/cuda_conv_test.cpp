// CUDA conv2d (cuDNN, and Kiln's direct kernels), its backward, and
// im2col / col2im against the CPU backend: stride, padding, dilation,
// groups, bias, dtypes, layouts, empty batches, TF32.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <cstdio>
#include <string>
#include <vector>

#include "tensor/conv.h"
#include "tensor/cuda/conv_direct.h"
#include "tensor/cuda/settings.h"
#include "tests/tensor/cuda_compare.h"

namespace kiln {
namespace {

using namespace kiln::ops;
using namespace kiln::cuda_compare;

struct ConvCase {
  int64_t n, c, h, w, oc, kh, kw;
  Conv2dParams p;
  bool bias;
};

const ConvCase kCases[] = {
    {2, 3, 8, 8, 4, 3, 3, {}, true},
    {3, 1, 28, 28, 6, 5, 5, {.padding = 2}, true},  // LeNet's conv1
    {2, 4, 9, 7, 6, 3, 2, {.stride = {2, 3}, .padding = {1, 0}}, false},
    {1, 3, 11, 12, 2, 3, 3, {.padding = {2, 1}, .dilation = {2, 3}}, true},
    {2, 6, 7, 7, 4, 3, 3, {.padding = 1, .groups = 2}, true},
    {2, 4, 6, 6, 4, 3, 3, {.stride = 2, .padding = 1, .groups = 4}, false},  // depthwise
    {4, 2, 5, 5, 3, 1, 1, {}, true},
};

std::string name_of(const ConvCase& k, DType dtype) {
  return std::string(dtype_name(dtype)) + " x(" + std::to_string(k.n) + "," + std::to_string(k.c) + "," +
         std::to_string(k.h) + "," + std::to_string(k.w) + ") k" + std::to_string(k.kh) + "x" + std::to_string(k.kw) +
         " groups " + std::to_string(k.p.groups);
}

// Tolerances for a sum of C*kh*kw products of values in [-1, 1].
double rtol_for(DType dtype) { return dtype == DType::Float32 ? 1e-5 : tolerance_for(dtype); }

// The absolute tolerance per summed product of a gradient: the float32 (or
// float64) sums of the CPU and of cuDNN differ by the order of addition; a
// 16-bit gradient is summed in float32 on both (Note [16-bit cuDNN
// convolutions]) and then differs by its rounding, which rtol_for covers.
double atol_per_term(DType dtype) { return dtype == DType::Float64 ? 1e-12 : dtype == DType::Float32 ? 1e-5 : 1e-4; }

// A setting of tensor/cuda/settings.h changed for a scope and restored at
// its end: Setting<ConvImplementation, ...> direct(Kiln).
template <class T, T (*get)(), void (*set)(T)>
class Setting {
 public:
  explicit Setting(T value) : before_(get()) { set(value); }
  ~Setting() { set(before_); }
  Setting(const Setting&) = delete;
  Setting& operator=(const Setting&) = delete;

 private:
  T before_;
};

using KernelsSetting = Setting<cuda::ConvImplementation, cuda::conv_implementation, cuda::set_conv_implementation>;
using CudnnApiSetting = Setting<cuda::CudnnApi, cuda::cudnn_api, cuda::set_cudnn_api>;

// Kiln's direct kernels (Note [Direct CUDA convolution]) for a scope.
struct DirectKernels : KernelsSetting {
  DirectKernels() : KernelsSetting(cuda::ConvImplementation::Kiln) {}
};

// cuDNN's graph API (Note [cuDNN graph API] in tensor/cuda/cudnn_graph.cpp)
// for a scope.
struct GraphApi : CudnnApiSetting {
  GraphApi() : CudnnApiSetting(cuda::CudnnApi::Graph) {}
};

// cuDNN (not Kiln's direct kernels, whatever KILN_CUDA_CONV says) for a scope.
struct CudnnKernels : KernelsSetting {
  CudnnKernels() : KernelsSetting(cuda::ConvImplementation::Cudnn) {}
};

// Every way a layer can run: cuDNN through its legacy calls and through
// its graph API, and Kiln's direct kernels where they take the layer (the
// default: Note [Direct CUDA convolution]).
struct Implementation {
  const char* name;
  cuda::ConvImplementation kernels;
  cuda::CudnnApi api;
};
const Implementation kImplementations[] = {{"cuDNN legacy", cuda::ConvImplementation::Cudnn, cuda::CudnnApi::Legacy},
                                           {"cuDNN graph", cuda::ConvImplementation::Cudnn, cuda::CudnnApi::Graph},
                                           {"direct", cuda::ConvImplementation::Kiln, cuda::CudnnApi::Graph}};

// One of kImplementations for a scope, named in the failures it sees.
struct Chosen {
  explicit Chosen(const Implementation& i) : trace(__FILE__, __LINE__, i.name), kernels(i.kernels), api(i.api) {}
  ::testing::ScopedTrace trace;
  KernelsSetting kernels;
  CudnnApiSetting api;
};

TEST(CudaConv2d, ForwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 1;
  for (const Implementation& implementation : kImplementations) {
    const Chosen chosen(implementation);
    for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
      for (const ConvCase& k : kCases) {
        Tensor x = random_tensor({k.n, k.c, k.h, k.w}, dtype, seed++);
        Tensor w = random_tensor({k.oc, k.c / k.p.groups, k.kh, k.kw}, dtype, seed++);
        Tensor b = k.bias ? random_tensor({k.oc}, dtype, seed++) : Tensor();
        Tensor expected = conv2d(x, w, b, k.p);
        Tensor actual = conv2d(x.to(cuda_device(0)), w.to(cuda_device(0)), b.defined() ? b.to(cuda_device(0)) : b, k.p);
        const double terms = static_cast<double>(k.c / k.p.groups * k.kh * k.kw + 1);
        expect_close(expected, actual, rtol_for(dtype), rtol_for(dtype) * terms, name_of(k, dtype));
      }
    }
  }
}

TEST(CudaConv2d, BackwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (const Implementation& implementation : kImplementations) {
    const Chosen chosen(implementation);
    for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
      for (const ConvCase& k : kCases) {
        Tensor x = random_tensor({k.n, k.c, k.h, k.w}, dtype, seed++);
        Tensor w = random_tensor({k.oc, k.c / k.p.groups, k.kh, k.kw}, dtype, seed++);
        Tensor y = conv2d(x, w, Tensor(), k.p);
        Tensor dy = random_tensor(y.shape(), dtype, seed++);
        Conv2dGrads expected = conv2d_backward(dy, x, w, k.p, {true, true, true});
        Conv2dGrads actual =
            conv2d_backward(dy.to(cuda_device(0)), x.to(cuda_device(0)), w.to(cuda_device(0)), k.p, {true, true, true});
        const double rtol = rtol_for(dtype), atol = atol_per_term(dtype);
        // grad_weight sums over N*oh*ow products, grad_input over OC*kh*kw.
        expect_close(expected.grad_input, actual.grad_input, rtol, atol * double(k.oc * k.kh * k.kw),
                     name_of(k, dtype) + " grad_input");
        expect_close(expected.grad_weight, actual.grad_weight, rtol, atol * double(y.numel() / k.oc),
                     name_of(k, dtype) + " grad_weight");
        expect_close(expected.grad_bias, actual.grad_bias, rtol, atol * double(y.numel() / k.oc),
                     name_of(k, dtype) + " grad_bias");
        // Only one of the three asked for.
        Conv2dGrads only_weight = conv2d_backward(dy.to(cuda_device(0)), x.to(cuda_device(0)), w.to(cuda_device(0)),
                                                  k.p, {false, true, false});
        EXPECT_FALSE(only_weight.grad_input.defined());
        expect_close(expected.grad_weight, only_weight.grad_weight, rtol, atol * double(y.numel() / k.oc),
                     name_of(k, dtype) + " grad_weight alone");
        Conv2dGrads only_bias = conv2d_backward(dy.to(cuda_device(0)), x.to(cuda_device(0)), w.to(cuda_device(0)), k.p,
                                                {false, false, true});
        EXPECT_FALSE(only_bias.grad_weight.defined());
        expect_close(expected.grad_bias, only_bias.grad_bias, rtol, atol * double(y.numel() / k.oc),
                     name_of(k, dtype) + " grad_bias alone");
      }
    }
  }
}

// A case's operands and the CPU's results: y = conv2d(x, w, b) (b only when
// the case has a bias), a random dy, and the input and weight gradients
// for it. Draws its values from `seed`, advancing it.
struct CpuCase {
  Tensor x, w, b, y, dy;
  Conv2dGrads grads;
  CpuCase(const ConvCase& k, DType dtype, uint64_t& seed)
      : x(random_tensor({k.n, k.c, k.h, k.w}, dtype, seed++)),
        w(random_tensor({k.oc, k.c / k.p.groups, k.kh, k.kw}, dtype, seed++)),
        b(k.bias ? random_tensor({k.oc}, dtype, seed++) : Tensor()),
        y(conv2d(x, w, b, k.p)),
        dy(random_tensor(y.shape(), dtype, seed++)),
        grads(conv2d_backward(dy, x, w, k.p, {true, true, true})) {}
};

// kCases, and LeNet's two layers at batch 64: planes of several blocks,
// channel tiles with unused places, grad_weight's positions split into
// ranges (Note [Direct CUDA convolution]).
std::vector<ConvCase> direct_cases() {
  std::vector<ConvCase> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({64, 3, 32, 32, 6, 5, 5, {}, true});
  cases.push_back({64, 6, 14, 14, 16, 5, 5, {}, true});
  return cases;
}

TEST(CudaConv2d, DirectKernelsMatchCpuAndCudnn) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 700;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const ConvCase& k : direct_cases()) {
      const Device gpu = cuda_device(0);
      const CpuCase c(k, dtype, seed);
      const Tensor &x = c.x, &w = c.w, &b = c.b, &y = c.y, &dy = c.dy;
      const Conv2dGrads& expected = c.grads;
      Tensor cudnn_y;
      {
        CudnnKernels cudnn;
        cudnn_y = conv2d(x.to(gpu), w.to(gpu), b.defined() ? b.to(gpu) : b, k.p);
      }
      DirectKernels direct;
      Tensor direct_y = conv2d(x.to(gpu), w.to(gpu), b.defined() ? b.to(gpu) : b, k.p);
      Conv2dGrads actual = conv2d_backward(dy.to(gpu), x.to(gpu), w.to(gpu), k.p, {true, true, true});
      const double rtol = rtol_for(dtype), terms = static_cast<double>(k.c / k.p.groups * k.kh * k.kw + 1);
      expect_close(y, direct_y, rtol, rtol * terms, name_of(k, dtype) + " direct forward");
      expect_close(cudnn_y, direct_y, rtol, rtol * terms, name_of(k, dtype) + " direct forward against cuDNN");
      expect_close(expected.grad_input, actual.grad_input, rtol, rtol * double(k.oc * k.kh * k.kw),
                   name_of(k, dtype) + " direct grad_input");
      expect_close(expected.grad_weight, actual.grad_weight, rtol, rtol * double(y.numel() / k.oc),
                   name_of(k, dtype) + " direct grad_weight");
      // The bias's gradient from the weight pass (Note [Direct CUDA
      // convolution]), and from the reduction when the weight's is not wanted.
      expect_close(expected.grad_bias, actual.grad_bias, rtol, rtol * double(y.numel() / k.oc),
                   name_of(k, dtype) + " direct grad_bias");
      Conv2dGrads bias_alone = conv2d_backward(dy.to(gpu), x.to(gpu), w.to(gpu), k.p, {false, false, true});
      expect_close(expected.grad_bias, bias_alone.grad_bias, rtol, rtol * double(y.numel() / k.oc),
                   name_of(k, dtype) + " direct grad_bias alone");
      // Run to run, bit for bit: no atomics.
      Conv2dGrads again = conv2d_backward(dy.to(gpu), x.to(gpu), w.to(gpu), k.p, {false, true, true});
      expect_close(actual.grad_weight, again.grad_weight, 0, 0, name_of(k, dtype) + " direct grad_weight rerun");
      expect_close(actual.grad_bias, again.grad_bias, 0, 0, name_of(k, dtype) + " direct grad_bias rerun");
    }
  }
}

TEST(CudaConv2d, CudnnApiIsChosenBySetter) {
  // No GPU needed: the setting itself.
  const cuda::CudnnApi before = cuda::cudnn_api();
  {
    GraphApi graph;
    EXPECT_EQ(cuda::cudnn_api(), cuda::CudnnApi::Graph);
  }
  EXPECT_EQ(cuda::cudnn_api(), before);
}

TEST(CudaConv2d, GraphApiMatchesCpuAndRunsWithoutTheLegacyApi) {
  SKIP_WITHOUT_GPU();
  CudnnKernels cudnn;
  GraphApi graph;
  uint64_t seed = 900;
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const ConvCase& k : kCases) {
      const Device gpu = cuda_device(0);
      const CpuCase c(k, dtype, seed);
      const Tensor &x = c.x, &w = c.w, &b = c.b, &y = c.y, &dy = c.dy;
      const Conv2dGrads& expected = c.grads;
      const int64_t runs_before = cuda::cudnn_graph_runs();
      Tensor actual_y = conv2d(x.to(gpu), w.to(gpu), b.defined() ? b.to(gpu) : b, k.p);
      Conv2dGrads actual = conv2d_backward(dy.to(gpu), x.to(gpu), w.to(gpu), k.p, {true, true, false});
      const double rtol = rtol_for(dtype), atol = atol_per_term(dtype);
      const double terms = static_cast<double>(k.c / k.p.groups * k.kh * k.kw + 1);
      expect_close(y, actual_y, rtol, rtol * terms, name_of(k, dtype) + " graph forward");
      expect_close(expected.grad_input, actual.grad_input, rtol, atol * double(k.oc * k.kh * k.kw),
                   name_of(k, dtype) + " graph grad_input");
      expect_close(expected.grad_weight, actual.grad_weight, rtol, atol * double(y.numel() / k.oc),
                   name_of(k, dtype) + " graph grad_weight");
      // Ungrouped float32 and float64 layers run all three directions
      // through the graph API; a run the graph API declined would pass the
      // value checks above through the legacy API, so the count is what shows
      // it (KILN_CUDNN_GRAPH_DEBUG=1 prints why). 16-bit layers may go to the
      // legacy API (Note [16-bit cuDNN convolutions]), and so may a group's
      // channel slice, whose batch stride is the whole tensor's: cuDNN's
      // engines need not take it, and the values above are what matter then.
      const int64_t runs = cuda::cudnn_graph_runs() - runs_before;
      if ((dtype == DType::Float32 || dtype == DType::Float64) && k.p.groups == 1) {
        EXPECT_EQ(runs, 3) << name_of(k, dtype);
      } else if (runs < 3 * k.p.groups) {
        std::printf("graph API ran %lld of %lld directions of %s; the legacy API ran the others\n",
                    static_cast<long long>(runs), static_cast<long long>(3 * k.p.groups), name_of(k, dtype).c_str());
      }
    }
  }
}

TEST(CudaConv2d, SixteenBitConvolutionsRunInTheirOwnDtypeOnlyOnTheGpu) {
  // No GPU needed: which dtypes each backend takes (Note [16-bit cuDNN
  // convolutions]); the CPU computes 16-bit convolutions in float32.
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    EXPECT_TRUE(backend_for(cuda_device(0)).conv2d_takes(dtype)) << dtype_name(dtype);
    EXPECT_FALSE(backend_for(kCPU).conv2d_takes(dtype)) << dtype_name(dtype);
  }
  EXPECT_FALSE(backend_for(cuda_device(0)).conv2d_takes(DType::Int64));
}

TEST(CudaConv2d, Float16LeNetLayersRunInCudnnWithoutFallingBackToFloat32) {
  SKIP_WITHOUT_GPU();
  // LeNet's two layers, forward and both gradients, in float16 (autocast's
  // CUDA dtype): cuDNN must run each in 16 bits (Note [16-bit cuDNN
  // convolutions]); the value tests above pass either way, since the
  // float32 fallback gives the CPU's values. bfloat16 is not required: the
  // legacy API declines more bfloat16 layers, depending on the GPU.
  const Device gpu = cuda_device(0);
  const int64_t before = cuda::conv_float32_fallbacks();
  uint64_t seed = 800;
  for (DType dtype : {DType::Float16}) {
    for (const ConvCase& k : {ConvCase{4, 3, 32, 32, 6, 5, 5, {}, true}, ConvCase{4, 6, 14, 14, 16, 5, 5, {}, true}}) {
      Tensor x = random_tensor({k.n, k.c, k.h, k.w}, dtype, seed++).to(gpu);
      Tensor w = random_tensor({k.oc, k.c, k.kh, k.kw}, dtype, seed++).to(gpu);
      Tensor y = conv2d(x, w, random_tensor({k.oc}, dtype, seed++).to(gpu), k.p);
      Conv2dGrads grads =
          conv2d_backward(random_tensor(y.shape(), dtype, seed++).to(gpu), x, w, k.p, {true, true, true});
      EXPECT_EQ(grads.grad_input.shape(), x.shape());
    }
  }
  EXPECT_EQ(cuda::conv_float32_fallbacks(), before) << "cuDNN declined a LeNet layer in 16 bits";
}

TEST(CudaConv2d, DirectKernelsTakeOnlyWeightsThatFitSharedMemory) {
  // No GPU needed: the choice is arithmetic on the shapes.
  const Conv2dParams unit;
  const Conv2dShape lenet_conv2 = conv2d_shape(6, {14, 14}, 5, unit);
  EXPECT_TRUE(cuda::direct_conv_applies(16, unit, lenet_conv2, DType::Float32));
  EXPECT_TRUE(cuda::direct_conv_applies(16, unit, lenet_conv2, DType::Float64));
  EXPECT_FALSE(cuda::direct_conv_applies(16, unit, lenet_conv2, DType::Float16));
  const Conv2dShape wide = conv2d_shape(64, {8, 8}, 3, unit);  // 64 * 64 * 9 floats: 144 KiB
  EXPECT_FALSE(cuda::direct_conv_applies(64, unit, wide, DType::Float32));
  EXPECT_EQ(cuda::conv_implementation(), cuda::ConvImplementation::Kiln) << "the direct kernels are the default";
  EXPECT_EQ(cuda::cudnn_api(), cuda::CudnnApi::Graph) << "cuDNN's graph API is the default";
}

TEST(CudaConv2d, NonContiguousInputs) {
  SKIP_WITHOUT_GPU();
  // x as an NHWC buffer seen as NCHW, and a weight with swapped kernel dims.
  Tensor x = random_tensor({2, 9, 8, 3}, DType::Float32, 200).permute({0, 3, 1, 2});  // (2, 3, 9, 8)
  Tensor w = random_tensor({4, 3, 3, 3}, DType::Float32, 201).transpose(2, 3);
  Conv2dParams p{.stride = {2, 1}, .padding = 1};
  expect_close(conv2d(x, w, Tensor(), p), conv2d(x.to(cuda_device(0)), w.to(cuda_device(0)), Tensor(), p), 1e-5, 3e-4,
               "permuted x");
  Tensor xs = random_tensor({2, 3, 18, 8}, DType::Float32, 202).slice(2, 0, 18, 2);  // rows 2 apart
  expect_close(conv2d(xs, w, Tensor(), p), conv2d(xs.to(cuda_device(0)), w.to(cuda_device(0)), Tensor(), p), 1e-5, 3e-4,
               "row-strided x");
}

TEST(CudaConv2d, EmptyBatch) {
  SKIP_WITHOUT_GPU();
  Tensor x = Tensor::empty({0, 3, 8, 8}, {DType::Float32, cuda_device(0)});
  Tensor w = random_tensor({4, 3, 3, 3}, DType::Float32, 300).to(cuda_device(0));
  Tensor y = conv2d(x, w);
  EXPECT_EQ(y.shape(), (Shape{0, 4, 6, 6}));
  Conv2dGrads grads =
      conv2d_backward(Tensor::empty({0, 4, 6, 6}, {DType::Float32, cuda_device(0)}), x, w, {}, {true, true, false});
  EXPECT_EQ(grads.grad_input.shape(), x.shape());
  expect_close(zeros({4, 3, 3, 3}), grads.grad_weight, 0, 0, "grad_weight of an empty batch");
}

TEST(CudaConv2d, Tf32AllowedStaysClose) {
  SKIP_WITHOUT_GPU();
  CudnnKernels cudnn;  // the direct kernels never use TF32
  Tensor x = random_tensor({4, 16, 12, 12}, DType::Float32, 400);
  Tensor w = random_tensor({32, 16, 3, 3}, DType::Float32, 401);
  Tensor expected = conv2d(x, w);
  cuda::set_allow_tf32(true);
  Tensor actual = conv2d(x.to(cuda_device(0)), w.to(cuda_device(0)));
  cuda::set_allow_tf32(false);
  // 144 products rounded to TF32 (about 5e-4 relative each).
  expect_close(expected, actual, 2e-3, 2e-3 * 145, "tf32 conv");
  expect_close(expected, conv2d(x.to(cuda_device(0)), w.to(cuda_device(0))), 1e-5, 1e-5 * 145, "tf32 off again");
}

TEST(CudaIm2col, Im2colAndCol2imMatchCpu) {
  SKIP_WITHOUT_GPU();
  struct Unfold {
    int64_t channels;
    Size2d input, kernel;
    Conv2dParams p;
  };
  const Unfold unfolds[] = {
      {3, {7, 6}, 3, {}},
      {2, {9, 8}, {3, 2}, {.stride = {2, 3}, .padding = {1, 2}}},
      {2, {10, 11}, 3, {.stride = {1, 2}, .padding = {2, 1}, .dilation = {2, 3}}},
  };
  uint64_t seed = 500;
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::Int64}) {
    for (const Unfold& u : unfolds) {
      Tensor x = random_tensor({2, u.channels, u.input.h, u.input.w}, DType::Float64, seed++, -4, 4).to(dtype);
      Tensor cols = im2col(x, u.kernel, u.p);
      expect_close(cols, im2col(x.to(cuda_device(0)), u.kernel, u.p), 0, 0, "im2col " + std::string(dtype_name(dtype)));
      // A transposed view of x reads through its strides.
      Tensor xt = x.transpose(2, 3).contiguous().transpose(2, 3);
      expect_close(cols, im2col(xt.to(cuda_device(0)), u.kernel, u.p), 0, 0, "im2col of a strided x");
      // col2im sums overlapping taps; integers exactly, floats to rounding.
      Tensor back = col2im(cols, u.input, u.kernel, u.p);
      const double tol = dtype == DType::Int64 ? 0 : tolerance_for(dtype);
      expect_close(back, col2im(cols.to(cuda_device(0)), u.input, u.kernel, u.p), tol, tol * 10,
                   "col2im " + std::string(dtype_name(dtype)));
    }
  }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
