// What an embedder writes beyond tensors: a module of two inputs of its own,
// a dataset of structured examples batched by a collate function of its own,
// and an LSTM sequence model trained on them. The task: a sequence of six
// values in [-1, 1] and a gate vector; the label says whether the sequence
// sums to more than zero. Returns the number of failed checks.
#include <kiln.h>
#include <kiln/data.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace consumer {

using namespace kiln;

namespace {

// One example: a (6, 1) sequence, a (4) gate and a class.
struct Example {
  Tensor sequence;
  Tensor gate;
  int64_t label;
};

struct Batch {
  Tensor sequences;  // (B, 6, 1)
  Tensor gates;      // (B, 4)
  Tensor labels;     // (B) int64
};

class SignDataset : public data::TypedDataset<Example> {
 public:
  SignDataset(int64_t size, uint64_t seed) {
    Generator gen(seed);
    sequences_ = ops::sub(ops::mul(rand({size, 6, 1}, DType::Float32, &gen), 2.0), 1.0);
    gates_ = rand({size, 4}, DType::Float32, &gen);
  }
  int64_t size() const override { return sequences_.size(0); }
  Example get(int64_t i) const override {
    check_index(i);
    Tensor s = sequences_.select(0, i);
    return {s, gates_.select(0, i), ops::sum(s).item<float>() > 0 ? 1 : 0};
  }
  std::string name() const override { return "SignDataset"; }

 private:
  Tensor sequences_, gates_;
};

Batch collate(std::vector<Example> examples) {
  std::vector<Tensor> sequences, gates;
  std::vector<int64_t> labels;
  for (Example& e : examples) {
    sequences.push_back(e.sequence);
    gates.push_back(e.gate);
    labels.push_back(e.label);
  }
  return {stack(sequences), stack(gates), from_vector<int64_t>(labels, {static_cast<int64_t>(labels.size())})};
}

// Inputs {sequence (B, 6, 1), gate (B, 4)}: the LSTM's last state, scaled
// per feature by a sigmoid of the projected gate, then a linear classifier.
class GatedSequenceClassifier : public nn::Module {
 public:
  GatedSequenceClassifier() {
    lstm = register_module("lstm", std::make_shared<nn::LSTM>(nn::LSTMOptions(1, 16).batch_first(true)));
    gate_proj = register_module("gate_proj", std::make_shared<nn::Linear>(4, 16));
    head = register_module("head", std::make_shared<nn::Linear>(16, 2));
  }
  autograd::TensorList forward_many(const autograd::TensorList& inputs) override {
    Tensor output = (*lstm)(autograd::TensorList{inputs.at(0)})[0];  // (B, 6, 16)
    Tensor last = output.select(1, output.size(1) - 1);
    return {(*head)(mul(last, sigmoid((*gate_proj)(inputs.at(1)))))};
  }
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::Linear> gate_proj, head;
};

}  // namespace

int check_sequence_model() {
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "kiln consumer: FAILED: %s\n", what);
      ++failures;
    }
  };
  manual_seed(0);
  auto model = std::make_shared<GatedSequenceClassifier>();
  expect(model->named_parameters().contains("lstm.weight_ih_l0"), "the LSTM's parameters are the model's");
  optim::Adam optimizer(model->parameters(), optim::AdamOptions(0.02));
  auto dataset = std::make_shared<SignDataset>(512, 1);
  data::DataLoaderOptions shuffled;
  shuffled.batch_size = 32;
  shuffled.shuffle = true;
  shuffled.seed = 2;
  data::TypedDataLoader<Example, Batch> loader(dataset, shuffled, collate);

  auto accuracy = [&] {
    NoGradGuard no_grad;
    int64_t right = 0;
    data::DataLoaderOptions in_order;
    in_order.batch_size = 128;
    data::TypedDataLoader<Example, Batch> all(dataset, in_order, collate);
    for (const Batch& b : all) {
      Tensor predicted = argmax((*model)(autograd::TensorList{b.sequences, b.gates})[0], 1);
      right += ops::sum(ops::eq(predicted, b.labels)).item<int64_t>();
    }
    return static_cast<double>(right) / dataset->size();
  };
  const double before = accuracy();
  for (int epoch = 0; epoch < 6; ++epoch) {
    loader.set_epoch(epoch);
    for (const Batch& b : loader) {
      expect(b.sequences.shape() == Shape({32, 6, 1}) && b.gates.shape() == Shape({32, 4}), "batches are collated");
      Tensor loss = nn::functional::cross_entropy((*model)(autograd::TensorList{b.sequences, b.gates})[0], b.labels);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
    }
  }
  const double after = accuracy();
  std::printf("kiln consumer: LSTM sign task accuracy %.3f before training, %.3f after\n", before, after);
  expect(after > 0.9 && after > before, "the LSTM learns the sign of the sum");
  return failures;
}

}  // namespace consumer
