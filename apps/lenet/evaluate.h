// The test pass: mean loss, accuracy and accuracy per class, and the table
// kiln-lenet prints at the end of a run.
//
//   Evaluation e = evaluate(model, test_loader, device, 10);
//   std::cout << format_class_table(e, class_names);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "nn/module.h"
#include "tensor/device.h"

namespace kiln::apps::lenet {

struct Evaluation {
  double loss = 0;      // mean cross-entropy over the images
  double accuracy = 0;  // fraction classified right, in [0, 1]
  int64_t images = 0;
  std::vector<int64_t> correct;  // per class (label), num_classes entries
  std::vector<int64_t> total;    // images of each class
};

// Runs `model` in eval mode without gradients over one pass of `loader`,
// whose batches are uint8 images (normalized here, normalize_batch) and
// int64 labels in [0, num_classes). The model is put back in train mode.
// When the loader has fewer than `min_batches` batches, the model also runs
// on one blank 3x32x32 image per missing batch, counted nowhere: under FSDP
// every rank must run the model as often as the others (Note [Trainers
// under FSDP]).
Evaluation evaluate(nn::Module& model, data::DataLoader& loader, Device device, int64_t num_classes,
                    int64_t min_batches = 0);

// One row per class: name, correct / images, accuracy in %, and a final
// "all" row. Classes without test images show "-".
std::string format_class_table(const Evaluation& evaluation, const std::vector<std::string>& class_names);

}  // namespace kiln::apps::lenet
