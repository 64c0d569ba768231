// Kiln's side of bench/quant_vs_anchors.sh: one trained float model
// (LeNet or ResNet-20) as float32 and quantized each way, one
// "quant model=... runtime=kiln mode=... acc=... bytes=... b1_ms=... b64_ms=... path=..."
// line per mode on stdout (progress on stderr), 1 thread. The measuring is
// kiln-lenet --quantize's (apps/lenet/quantize.h), so the app's table and
// this benchmark cannot drift apart.
//
//   build/bench/quant_bench --model lenet --weights lenet.safetensors --data ../shared/data/cifar10-jpeg.tar.gz
//       [--modes dynamic,static,qat] [--calib-images 512] [--test-images 10000] [--qat-epochs 1]
//       [--profile-seconds S] [--profile-batch 1|64]   (then run each quantized mode's forward S seconds
//       more at that batch size, for perf)
//       [--reduce-range 0|1]   (7-bit activations for static and qat: quant::default_qconfig(true))
//       [--qconv auto|gemm|implicit|direct]   (force one int8 convolution form, for before/after figures;
//       a form that cannot run a layer is an error naming it)
#include <cstdlib>
#include <optional>
#include <iostream>
#include <sstream>
#include <string>

#include "apps/lenet/quantize.h"
#include "tensor/cpu/quantized_conv_direct.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  using kiln::apps::lenet::QuantizeReportOptions;
  QuantizeReportOptions o;
  o.modes = {"dynamic", "static", "qat"};
  std::optional<kiln::cpu::ForceQConvAlgorithm> force;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      KILN_CHECK(i + 1 < argc, "quant_bench: ", arg, " needs a value");
      std::string value = argv[++i];
      if (arg == "--model") o.model = value;
      else if (arg == "--weights") o.weights = value;
      else if (arg == "--data") o.data = value;
      else if (arg == "--calib-images") o.calib_images = std::stoll(value);
      else if (arg == "--test-images") o.test_images = std::stoll(value);
      else if (arg == "--qat-epochs") o.qat_epochs = std::stod(value);
      else if (arg == "--qat-images") o.qat_images = std::stoll(value);
      else if (arg == "--seed") o.seed = std::stoull(value);
      else if (arg == "--profile-seconds") o.profile_seconds = std::stod(value);
      else if (arg == "--profile-batch") o.profile_batch = std::stoll(value);
      else if (arg == "--reduce-range") o.reduce_range = value == "1";
      else if (arg == "--qconv") {
        using kiln::cpu::QConvAlgorithm;
        const QConvAlgorithm a = value == "gemm"       ? QConvAlgorithm::Gemm
                                 : value == "implicit" ? QConvAlgorithm::Implicit
                                 : value == "direct"   ? QConvAlgorithm::Direct
                                                       : QConvAlgorithm::Auto;
        KILN_CHECK(value == "auto" || a != QConvAlgorithm::Auto, "quant_bench: --qconv ", value,
                   ": expected auto, gemm, implicit or direct");
        force.emplace(a);
      } else if (arg == "--modes") {
        o.modes.clear();
        std::stringstream ss(value);
        for (std::string m; std::getline(ss, m, ',');) o.modes.push_back(m);
      } else {
        KILN_FAIL("quant_bench: unknown option '", arg, "'");
      }
    }
    auto report = kiln::apps::lenet::quantization_report(o, std::cerr);
    for (const auto& row : report.rows) std::cout << kiln::apps::lenet::quant_line(report.model, row) << "\n";
    std::cerr << kiln::apps::lenet::format_quantization_table(report);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
