#include "apps/lenet/quantize.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "apps/lenet/data_source.h"
#include "apps/lenet/models.h"
#include "nn/models/resnet.h"
#include "autograd/grad_mode.h"
#include "data/sampler.h"
#include "nn/functional.h"
#include "optim/sgd.h"
#include "quant/fuse.h"
#include "quant/quantize.h"
#include "quant/stubs.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/qgemm.h"
#include "tensor/ops.h"
#include "tensor/parallel.h"
#include "tensor/safetensors.h"

namespace kiln::apps::lenet {

namespace {

// The images and labels of a split, or the first `count` of a seeded shuffle.
struct Images {
  Tensor images;  // (N, 3, 32, 32) uint8
  Tensor labels;  // (N) int64
};

Images take(const data::LabeledImageDataset& dataset, int64_t count, bool shuffle, uint64_t seed) {
  const int64_t n = std::min(count, dataset.size());
  std::vector<int64_t> order = shuffle ? data::random_permutation(dataset.size(), seed) : std::vector<int64_t>{};
  if (!shuffle) {
    for (int64_t i = 0; i < n; ++i) order.push_back(i);
  }
  order.resize(static_cast<size_t>(n));
  data::Batch batch = dataset.get_batch(order);
  return {batch.data, batch.target};
}

// A model's weights from a state dict or a kiln-lenet checkpoint ("model." entries).
void load_model_weights(nn::Module& model, const std::string& path) {
  TensorDict file = load_safetensors(path);
  bool checkpoint = false;
  for (const auto& [name, tensor] : file) checkpoint = checkpoint || name.starts_with("model.");
  TensorDict weights;
  for (const auto& [name, tensor] : file) {
    if (!checkpoint) weights.insert(name, tensor);
    else if (name.starts_with("model.")) weights.insert(name.substr(6), tensor);
  }
  try {
    model.load_state_dict(weights);
  } catch (const Error& e) {
    KILN_FAIL("--quantize: '", path, "' does not hold the model's weights: ", e.message());
  }
}

double accuracy_percent(nn::Module& model, const Images& test) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  const int64_t n = test.images.size(0);
  for (int64_t start = 0; start < n; start += 64) {
    int64_t len = std::min<int64_t>(64, n - start);
    Tensor logits = model(normalize_batch(test.images.narrow(0, start, len)));
    Tensor predicted = ops::argmax(logits, 1);
    correct += ops::sum(ops::eq(predicted, test.labels.narrow(0, start, len))).item<int64_t>();
  }
  return 100.0 * static_cast<double>(correct) / static_cast<double>(n);
}

void calibrate(nn::Module& model, const Images& calib) {
  NoGradGuard no_grad;
  for (int64_t start = 0; start < calib.images.size(0); start += 64) {
    int64_t len = std::min<int64_t>(64, calib.images.size(0) - start);
    model(normalize_batch(calib.images.narrow(0, start, len)));
  }
}

// The median of repeated forwards on one fixed normalised batch.
double median_ms(nn::Module& model, const Tensor& x, const QuantizeReportOptions& o, int64_t min_runs) {
  NoGradGuard no_grad;
  model.eval();
  for (int64_t i = 0; i < o.warmup; ++i) model(x);
  std::vector<double> times;
  auto begin = std::chrono::steady_clock::now();
  while (static_cast<int64_t>(times.size()) < min_runs ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() < o.min_seconds) {
    auto t0 = std::chrono::steady_clock::now();
    model(x);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

// The Conv+BN(+ReLU) groups to fuse: ResNet-20's, below `prefix`; LeNet
// has none (its ReLUs are functions after pooling).
std::vector<std::vector<std::string>> fusion_groups(const nn::Module& model, const std::string& prefix) {
  auto resnet = dynamic_cast<const nn::CifarResNet*>(&model);
  return resnet ? resnet->fusion_groups(prefix) : std::vector<std::vector<std::string>>{};
}

// The converted model's convs run by the residual adds they feed
// (quant::fuse_conv_add): ResNet-20's blocks, below `prefix`.
void fuse_residual_convs(nn::Module& converted, const nn::Module& model, const std::string& prefix) {
  if (auto resnet = dynamic_cast<const nn::CifarResNet*>(&model))
    quant::fuse_conv_add(converted, resnet->residual_convs(prefix));
}

// QAT fine-tuning from the float weights: SGD over a seeded shuffle of the
// training set; observers run for the first 80% of the steps, then the
// grids and BatchNorm statistics are frozen for the rest.
void train_qat(nn::Module& model, const data::LabeledImageDataset& train, const QuantizeReportOptions& o,
               std::ostream& log) {
  const int64_t per_epoch = std::min(o.qat_images, train.size());
  const int64_t steps = std::max<int64_t>(1, static_cast<int64_t>(o.qat_epochs * static_cast<double>(per_epoch) / 64));
  const int64_t freeze_at = steps * 8 / 10;
  optim::SGD opt(model.parameters(), optim::SGDOptions(o.qat_lr).momentum(0.9).weight_decay(5e-4));
  model.train();
  Images pool = take(train, train.size(), /*shuffle=*/true, o.seed + 1);
  for (int64_t step = 0; step < steps; ++step) {
    if (step == freeze_at) {
      quant::disable_observer(model);
      quant::freeze_bn_stats(model);
    }
    int64_t start = (step * 64) % (pool.images.size(0) - 63);
    Tensor x = normalize_batch(pool.images.narrow(0, start, 64));
    Tensor loss = nn::functional::cross_entropy(model(x), pool.labels.narrow(0, start, 64));
    opt.zero_grad();
    loss.backward();
    opt.step();
    if ((step + 1) % 100 == 0 || step + 1 == steps) {
      log << "  qat step " << step + 1 << "/" << steps << " loss " << loss.item<float>() << "\n" << std::flush;
    }
  }
  model.eval();
}

std::string int8_path() { return std::string(cpu::qgemm_path_name(cpu::qgemm_path())); }

}  // namespace

std::string reduce_range_hint(const std::string& path, bool reduce_range, const std::vector<std::string>& modes) {
  const bool calibrated = std::find(modes.begin(), modes.end(), "static") != modes.end() ||
                          std::find(modes.begin(), modes.end(), "qat") != modes.end();
  if (path != "avx2" || reduce_range || !calibrated) return "";
  return "note: this CPU's int8 path is avx2 (no VNNI): with 8-bit activations it widens them to 16 bits; "
         "--reduce-range (7-bit activations) lets it multiply their bytes as they are, about 1.5x faster on "
         "ResNet-20 (docs/QUANTIZATION.md)\n";
}

QuantizeReport quantization_report(const QuantizeReportOptions& o, std::ostream& log) {
  check_model_name(o.model);
  for (const auto& mode : o.modes) {
    KILN_CHECK(mode == "dynamic" || mode == "static" || mode == "qat", "--quantize: unknown mode '", mode,
               "' (expected dynamic, static or qat)");
  }
  log << reduce_range_hint(int8_path(), o.reduce_range, o.modes);
  KILN_CHECK(!o.weights.empty(), "--quantize: needs the trained float model (--weights)");
  set_num_threads(1);
  Datasets data = open_datasets(o.data, /*augment=*/false, o.seed);
  Images test = take(*data.test, o.test_images, /*shuffle=*/false, o.seed);
  Images calib = take(*data.train, o.calib_images, /*shuffle=*/true, o.seed);
  manual_seed(o.seed);
  Tensor b1 = normalize_batch(test.images.narrow(0, 0, 1));
  Tensor b64 = normalize_batch(test.images.narrow(0, 0, std::min<int64_t>(64, test.images.size(0))));

  auto float_model = [&] {
    std::shared_ptr<nn::Module> m = make_model(o.model);
    load_model_weights(*m, o.weights);
    m->eval();
    return m;
  };
  auto measure = [&](const std::string& mode, nn::Module& m, const std::string& path) {
    QuantizeRow row{.mode = mode, .path = path};
    row.accuracy = accuracy_percent(m, test);
    row.bytes = quant::model_size_bytes(m);
    row.b1_ms = median_ms(m, b1, o, o.b1_runs);
    row.b64_ms = median_ms(m, b64, o, o.b64_runs);
    log << quant_line(o.model, row) << "\n" << std::flush;
    return row;
  };

  QuantizeReport report{.model = o.model, .rows = {}};
  {
    auto m = float_model();
    report.rows.push_back(measure("float32", *m, std::string(cpu::simd_level_name(cpu::simd_level()))));
  }
  if (o.sensitivity) {
    log << "sensitivity: each layer of " << model_title(o.model) << " quantized alone\n" << std::flush;
    report.sensitivity = quant::sensitivity(
        float_model, [&](nn::Module& m) { calibrate(m, calib); },
        [&](nn::Module& m) { return accuracy_percent(m, test); });
  }
  for (const auto& mode : o.modes) {
    log << "quantizing " << model_title(o.model) << ": " << mode << "\n" << std::flush;
    std::shared_ptr<nn::Module> m;
    if (mode == "dynamic") {
      m = float_model();
      // Linear layers only, as torch's quantize_dynamic default; LeNet's and
      // ResNet-20's convolutions stay float.
      quant::quantize_dynamic(*m);
    } else if (mode == "static") {
      auto f = float_model();
      m = std::make_shared<quant::QuantWrapper>(f);
      m->eval();
      quant::fuse_modules(*m, fusion_groups(*f, "module."));
      quant::prepare(*m, quant::QConfigMapping(quant::default_qconfig(o.reduce_range)));
      calibrate(*m, calib);
      quant::convert(*m);
      fuse_residual_convs(*m, *f, "module.");
    } else {  // qat
      auto f = float_model();
      m = std::make_shared<quant::QuantWrapper>(f);
      m->train();
      quant::fuse_modules_qat(*m, fusion_groups(*f, "module."));
      quant::prepare_qat(*m, quant::QConfigMapping(quant::default_qat_qconfig(o.reduce_range)));
      m->eval();
      calibrate(*m, calib);  // observers start from the float model's ranges
      train_qat(*m, *data.train, o, log);
      quant::convert(*m);
      fuse_residual_convs(*m, *f, "module.");
    }
    report.rows.push_back(measure(mode, *m, int8_path()));
    if (o.profile_seconds > 0) {
      const Tensor& batch = o.profile_batch == 1 ? b1 : b64;
      log << "profiling window: " << mode << " at batch " << batch.size(0) << " for " << o.profile_seconds << " s\n"
          << std::flush;
      QuantizeReportOptions window = o;
      window.warmup = 0;
      window.min_seconds = o.profile_seconds;
      median_ms(*m, batch, window, 1);
    }
  }
  return report;
}

std::string format_quantization_table(const QuantizeReport& report) {
  std::ostringstream os;
  const QuantizeRow& f = report.rows.at(0);
  char line[256];
  std::snprintf(line, sizeof line, "%-9s %9s %8s %11s %7s %10s %7s %10s %7s  %s\n", "mode", "accuracy", "drop",
                "bytes", "size", "b1 ms", "x f32", "b64 ms", "x f32", "path");
  os << line;
  for (const auto& r : report.rows) {
    std::snprintf(line, sizeof line, "%-9s %8.2f%% %+7.2f %11lld %6.1f%% %10.4f %7.3f %10.3f %7.3f  %s\n",
                  r.mode.c_str(), r.accuracy, r.accuracy - f.accuracy, static_cast<long long>(r.bytes),
                  100.0 * static_cast<double>(r.bytes) / static_cast<double>(f.bytes), r.b1_ms, r.b1_ms / f.b1_ms,
                  r.b64_ms, r.b64_ms / f.b64_ms, r.path.c_str());
    os << line;
  }
  return os.str();
}

std::string format_sensitivity_table(const QuantizeReport& report) {
  std::vector<quant::SensitivityRow> rows = report.sensitivity;
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.metric < b.metric; });
  const double float_accuracy = report.rows.at(0).accuracy;
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %9s %8s\n", "layer quantized alone", "accuracy", "drop");
  os << line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%-28s %8.2f%% %+7.2f\n", r.layer.c_str(), r.metric, r.metric - float_accuracy);
    os << line;
  }
  return os.str();
}

std::string quant_line(const std::string& model, const QuantizeRow& row) {
  char line[256];
  std::snprintf(line, sizeof line, "quant model=%s runtime=kiln mode=%s acc=%.2f bytes=%lld b1_ms=%.4f b64_ms=%.4f path=%s",
                model.c_str(), row.mode.c_str(), row.accuracy, static_cast<long long>(row.bytes), row.b1_ms, row.b64_ms,
                row.path.c_str());
  return line;
}

}  // namespace kiln::apps::lenet
