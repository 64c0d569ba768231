// A LeNet trained by Kiln loads into PyTorch's LeNet and gives the same
// outputs, and PyTorch's weights give the same outputs in Kiln
// (scripts/lenet_outputs.py is PyTorch's side). Skipped with a message where
// /usr/bin/python3 has no torch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <unistd.h>

#include "kiln.h"

#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR must point at the source tree (tests/CMakeLists.txt sets it)"
#endif

namespace kiln {
namespace {

namespace F = nn::functional;

bool torch_available() { return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

std::string script() { return std::string("/usr/bin/python3 ") + KILN_SOURCE_DIR + "/scripts/lenet_outputs.py"; }

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/kiln_interop_" + std::to_string(getpid()) + "_" + name;
}

// PyTorch's logits for x with the weights in `weights_path`.
Tensor torch_logits(const std::string& weights_path, const Tensor& x) {
  std::string in = temp_path("x.safetensors"), out = temp_path("logits.safetensors");
  save_safetensors(in, {{"x", x}});
  std::string cmd = script() + " eval " + weights_path + " " + in + " " + out;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  Tensor logits = load_safetensors(out).at("logits");
  std::remove(in.c_str());
  std::remove(out.c_str());
  return logits;
}

TEST(LeNetInterop, KilnTrainedWeightsGiveTheSameOutputsInPyTorch) {
  if (!torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch; the PyTorch interchange is skipped";
  manual_seed(21);
  nn::LeNet net;
  optim::SGD sgd(net.parameters(), optim::SGDOptions(0.05).momentum(0.9));
  for (int step = 0; step < 5; ++step) {
    Tensor x = randn({16, 3, 32, 32});
    Tensor y = randint(0, 10, {16});
    sgd.zero_grad();
    F::cross_entropy(net(x), y).backward();
    sgd.step();
  }
  std::string weights = temp_path("kiln_lenet.safetensors");
  save_safetensors(weights, net.state_dict());
  Tensor x = randn({8, 3, 32, 32});
  Tensor ours;
  {
    NoGradGuard no_grad;
    ours = net(x);
  }
  Tensor theirs = torch_logits(weights, x);
  EXPECT_TRUE(allclose(ours, theirs, 1e-5, 1e-5)) << "kiln:\n" << ours << "\ntorch:\n" << theirs;
  std::remove(weights.c_str());
}

TEST(LeNetInterop, PyTorchWeightsGiveTheSameOutputsInKiln) {
  if (!torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch; the PyTorch interchange is skipped";
  std::string weights = temp_path("torch_lenet.safetensors");
  std::string cmd = script() + " init " + weights;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  nn::LeNet net;
  net.load_state_dict(load_safetensors(weights));
  manual_seed(22);
  Tensor x = randn({8, 3, 32, 32});
  Tensor ours;
  {
    NoGradGuard no_grad;
    ours = net(x);
  }
  Tensor theirs = torch_logits(weights, x);
  EXPECT_TRUE(allclose(ours, theirs, 1e-5, 1e-5)) << "kiln:\n" << ours << "\ntorch:\n" << theirs;
  std::remove(weights.c_str());
}

}  // namespace
}  // namespace kiln
