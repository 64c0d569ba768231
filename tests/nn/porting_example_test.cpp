// docs/PORTING.md's Kiln program, as written there (main() is the test body,
// the checkpoint goes to a temporary folder), so that the page stays true.
#include <gtest/gtest.h>

#include <kiln.h>
#include <kiln/data.h>

#include <filesystem>

// GCC 12 warns that a designated initializer leaves out the members that have
// defaults ({.batch_size = 64, .shuffle = true}), which is the point of them.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace porting {

namespace F = kiln::nn::functional;
using namespace kiln;

struct NetImpl : nn::Module {
  NetImpl() {
    conv1 = register_module("conv1", nn::make<nn::Conv2d>(nn::Conv2dOptions(3, 6, 5)));
    conv2 = register_module("conv2", nn::make<nn::Conv2d>(nn::Conv2dOptions(6, 16, 5)));
    fc1 = register_module("fc1", nn::make<nn::Linear>(16 * 5 * 5, 120));
    fc2 = register_module("fc2", nn::make<nn::Linear>(120, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = F::max_pool2d(relu(conv1(x)), {.kernel = 2});
    h = F::max_pool2d(relu(conv2(h)), {.kernel = 2});
    h = relu(fc1(h.flatten(1)));
    return fc2(h);
  }
  nn::ModuleHolder<nn::Conv2d> conv1 = nullptr, conv2 = nullptr;
  nn::ModuleHolder<nn::Linear> fc1 = nullptr, fc2 = nullptr;
};
KILN_MODULE(Net);

TEST(PortingExample, TheKilnProgramTrainsSavesAndLoads) {
  const std::string path = (std::filesystem::temp_directory_path() / "kiln_porting_net.safetensors").string();
  manual_seed(0);
  Net model;
  optim::SGD optimizer(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));

  auto dataset = std::make_shared<data::TensorDataset>(randn({256, 3, 32, 32}), randint(0, 10, {256}));
  data::DataLoader loader(dataset, {.batch_size = 64, .shuffle = true});

  const Tensor before = model->fc2->weight.clone();
  int64_t steps = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (data::Batch& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = F::cross_entropy(model(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      ++steps;
    }
  }
  save_safetensors(path, model->state_dict());

  EXPECT_EQ(steps, 8);  // 2 epochs of 256 / 64 batches
  EXPECT_FALSE(equal(model->fc2->weight, before)) << "the optimizer moved no weight";
  Net loaded;
  loaded->load_state_dict(load_safetensors(path));
  for (const auto& [name, p] : model->named_parameters()) {
    EXPECT_TRUE(equal(p, loaded->named_parameters().at(name))) << name;
  }
  std::filesystem::remove(path);
}

}  // namespace porting
