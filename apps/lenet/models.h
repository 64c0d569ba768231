// The models kiln-lenet trains (--model): LeNet-5 (nn/models/lenet.h, the
// default) and ResNet-20 (nn/models/resnet.h), both for 3x32x32 images and
// 10 classes. The rest of the trainer (data, optimizer, checkpoints, DDP,
// FSDP, evaluation) is the same for either: it sees an nn::Module.
//
//   std::shared_ptr<nn::Module> model = make_model("resnet20");
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace kiln::apps::lenet {

// The names --model accepts, the default first: {"lenet", "resnet20"}.
const std::vector<std::string>& model_names();

// Throws kiln::Error "--model: unknown model 'x' (expected lenet or resnet20)".
void check_model_name(const std::string& name);

// A freshly initialised model (weights from the default generator).
// Throws as check_model_name.
std::shared_ptr<nn::Module> make_model(const std::string& name);

// How the trainer's output names it: "LeNet", "ResNet-20".
std::string model_title(const std::string& name);

}  // namespace kiln::apps::lenet
