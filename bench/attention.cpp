// Fused scaled_dot_product_attention against the reference written with
// tensor ops (nn::functional::scaled_dot_product_attention_reference, which
// materialises the (T, T) scores and probabilities), in one run:
// - speed: causal forward + backward in float32 on the shapes of the GPT
//   configs, in tokens (B * T) per second, the median of kRepeats timings:
//     attention_speed device=cpu shape=B32_H4_T128_d32 fused_tok_s=.. reference_tok_s=.. ratio=..
// - memory (CPU): the allocator's peak bytes above the inputs for one
//   forward + backward at T = 1024 (cpu_peak_allocated_bytes):
//     attention_memory T=1024 shape=B1_H4_T1024_d64 fused_peak_bytes=.. reference_peak_bytes=.. ratio=..
// --device cuda runs the speed part on the first GPU (each timing ends when
// the GPU has finished). Threads: Kiln's default, all cores (OMP_NUM_THREADS
// sets it).
//
// Usage: build/bench/attention [--device cpu|cuda] [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kiln.h"
#include "tensor/allocator.h"

namespace {

namespace F = kiln::nn::functional;
using Clock = std::chrono::steady_clock;
using kiln::Tensor;

int repeats = 5;

struct Shape4 {
  int64_t b, h, t, d;
  std::string name() const {
    char text[96];
    std::snprintf(text, sizeof(text), "B%lld_H%lld_T%lld_d%lld", static_cast<long long>(b), static_cast<long long>(h),
                  static_cast<long long>(t), static_cast<long long>(d));
    return text;
  }
};

using AttentionFn = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;

Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v) {
  return F::scaled_dot_product_attention(q, k, v, {.is_causal = true});
}
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v) {
  return F::scaled_dot_product_attention_reference(q, k, v, {.is_causal = true});
}

struct Inputs {
  Tensor q, k, v, grad;
};

Inputs make_inputs(const Shape4& s, kiln::Device device) {
  kiln::Generator gen(1);
  const kiln::TensorOptions options(kiln::DType::Float32, device);
  auto input = [&] { return kiln::randn({s.b, s.h, s.t, s.d}, options, &gen).requires_grad_(); };
  Inputs in{input(), input(), input(), kiln::randn({s.b, s.h, s.t, s.d}, options, &gen)};
  return in;
}

// One forward and backward; clears the gradients after.
void step(const AttentionFn& fn, const Inputs& in) {
  Tensor out = fn(in.q, in.k, in.v);
  out.backward(in.grad);
  for (const Tensor& t : {in.q, in.k, in.v}) t.set_grad(Tensor());
}

// Seconds per forward + backward: the median of `repeats` timings.
double seconds_per_step(const AttentionFn& fn, const Inputs& in) {
  const auto finish = [&] { (void)kiln::ops::sum(in.q.detach()).cpu(); };
  step(fn, in);  // warm up: caches, allocator, thread pool
  finish();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    step(fn, in);
    finish();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Peak CPU allocator bytes of one forward + backward beyond what was
// allocated before it (the inputs).
size_t peak_bytes(const AttentionFn& fn, const Inputs& in) {
  kiln::cpu_reset_peak_allocated_bytes();
  const size_t before = kiln::cpu_peak_allocated_bytes();
  step(fn, in);
  return kiln::cpu_peak_allocated_bytes() - before;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::Device device = kiln::kCPU;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--device" && (value == "cpu" || value == "cuda")) {
      device = value == "cuda" ? kiln::cuda_device(0) : kiln::kCPU;
    } else if (flag == "--repeats" && std::atoi(value.c_str()) > 0) {
      repeats = std::atoi(value.c_str());
    } else {
      std::fprintf(stderr, "usage: attention [--device cpu|cuda] [--repeats N]\n");
      return 2;
    }
  }
  const char* device_name = device.type == kiln::DeviceType::CUDA ? "cuda" : "cpu";
  for (const Shape4& s : {Shape4{32, 4, 128, 32}, Shape4{64, 6, 256, 64}}) {
    const Inputs in = make_inputs(s, device);
    const double tokens = static_cast<double>(s.b * s.t);
    const double fused_s = seconds_per_step(fused, in), reference_s = seconds_per_step(reference, in);
    std::printf("attention_speed device=%s shape=%s fused_tok_s=%.0f reference_tok_s=%.0f ratio=%.2f\n", device_name,
                s.name().c_str(), tokens / fused_s, tokens / reference_s, reference_s / fused_s);
    std::fflush(stdout);
  }
  const Shape4 long_shape{1, 4, 1024, 64};
  const Inputs in = make_inputs(long_shape, kiln::kCPU);
  const size_t fused_bytes = peak_bytes(fused, in), reference_bytes = peak_bytes(reference, in);
  std::printf("attention_memory T=%lld shape=%s fused_peak_bytes=%zu reference_peak_bytes=%zu ratio=%.1f\n",
              static_cast<long long>(long_shape.t), long_shape.name().c_str(), fused_bytes, reference_bytes,
              static_cast<double>(reference_bytes) / static_cast<double>(std::max<size_t>(fused_bytes, 1)));
  return 0;
}
