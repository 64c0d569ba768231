#include "apps/lenet/models.h"

#include "nn/models/lenet.h"
#include "nn/models/resnet.h"
#include "tensor/error.h"

namespace kiln::apps::lenet {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"lenet", "resnet20"};
  return names;
}

void check_model_name(const std::string& name) {
  for (const std::string& known : model_names()) {
    if (name == known) return;
  }
  std::string expected;
  for (size_t i = 0; i < model_names().size(); ++i) {
    expected += (i == 0 ? "" : i + 1 == model_names().size() ? " or " : ", ") + model_names()[i];
  }
  KILN_CHECK(false, "--model: unknown model '", name, "' (expected ", expected, ")");
}

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  check_model_name(name);
  if (name == "resnet20") return std::make_shared<nn::CifarResNet>(20, 10);
  return std::make_shared<nn::LeNet>();
}

std::string model_title(const std::string& name) {
  check_model_name(name);
  return name == "resnet20" ? "ResNet-20" : "LeNet";
}

}  // namespace kiln::apps::lenet
