#include "apps/lenet/evaluate.h"

#include <algorithm>
#include <cstdio>

#include "apps/lenet/data_source.h"
#include "kiln.h"

namespace kiln::apps::lenet {

namespace F = nn::functional;

Evaluation evaluate(nn::Module& model, data::DataLoader& loader, Device device, int64_t num_classes,
                    int64_t min_batches) {
  Evaluation e;
  e.correct.assign(static_cast<size_t>(num_classes), 0);
  e.total.assign(static_cast<size_t>(num_classes), 0);
  double loss_sum = 0;
  int64_t batches = 0;
  model.eval();
  {
    NoGradGuard no_grad;
    for (data::Batch& batch : loader) {
      Tensor images = normalize_batch(batch.data.to(device));  // (B, 3, 32, 32) float32
      Tensor labels = batch.target.to(device);                  // (B) int64
      Tensor logits = model(images);                            // (B, 10)
      loss_sum += F::cross_entropy(logits, labels, {.reduction = F::Reduction::Sum}).item<double>();
      Tensor predicted = argmax(logits, 1).to(kCPU).contiguous();  // (B) int64
      Tensor truth = batch.target.contiguous();
      const int64_t* p = predicted.data<int64_t>();
      const int64_t* t = truth.data<int64_t>();
      for (int64_t i = 0; i < truth.numel(); ++i) {
        KILN_CHECK(t[i] >= 0 && t[i] < num_classes, "evaluate: label ", t[i], " is outside [0, ", num_classes, ")");
        e.total[static_cast<size_t>(t[i])] += 1;
        e.correct[static_cast<size_t>(t[i])] += p[i] == t[i] ? 1 : 0;
      }
      e.images += truth.numel();
      ++batches;
    }
    for (; batches < min_batches; ++batches) (void)model(zeros({1, 3, 32, 32}, TensorOptions(DType::Float32, device)));
  }
  model.train();
  int64_t correct = 0;
  for (int64_t c : e.correct) correct += c;
  if (e.images > 0) {
    e.loss = loss_sum / static_cast<double>(e.images);
    e.accuracy = static_cast<double>(correct) / static_cast<double>(e.images);
  }
  return e;
}

std::string format_class_table(const Evaluation& e, const std::vector<std::string>& class_names) {
  size_t name_width = 5;
  for (const std::string& name : class_names) name_width = std::max(name_width, name.size());
  std::string table;
  char line[256];
  const int w = static_cast<int>(name_width);
  std::snprintf(line, sizeof line, "%-*s  %15s  %8s\n", w, "class", "correct/images", "accuracy");
  table += line;
  table += std::string(name_width + 2 + 15 + 2 + 8, '-') + "\n";
  int64_t correct = 0;
  for (size_t c = 0; c < class_names.size() && c < e.total.size(); ++c) {
    char count[64];
    std::snprintf(count, sizeof count, "%lld/%lld", static_cast<long long>(e.correct[c]),
                  static_cast<long long>(e.total[c]));
    if (e.total[c] > 0) {
      std::snprintf(line, sizeof line, "%-*s  %15s  %7.2f%%\n", w, class_names[c].c_str(), count,
                    100.0 * static_cast<double>(e.correct[c]) / static_cast<double>(e.total[c]));
    } else {
      std::snprintf(line, sizeof line, "%-*s  %15s  %8s\n", w, class_names[c].c_str(), count, "-");
    }
    table += line;
    correct += e.correct[c];
  }
  char count[64];
  std::snprintf(count, sizeof count, "%lld/%lld", static_cast<long long>(correct), static_cast<long long>(e.images));
  std::snprintf(line, sizeof line, "%-*s  %15s  %7.2f%%\n", w, "all", count, 100.0 * e.accuracy);
  table += line;
  return table;
}

}  // namespace kiln::apps::lenet
