// DataLoader: an AnyBatchLoader (data/any_batch_loader.cpp has the workers)
// whose batches are Dataset::get_batch(indices).
#include "data/dataloader.h"

#include <utility>

#include "tensor/error.h"

namespace kiln::data {

std::shared_ptr<Dataset> DataLoader::checked(std::shared_ptr<Dataset> dataset) {
  KILN_CHECK(dataset != nullptr, "DataLoader: the dataset is null");
  return dataset;
}

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(checked(std::move(dataset))),
      loader_("DataLoader", dataset_->size(), dataset_->name(), options,
              // Runs on the worker threads: the raw pointer is safe because
              // the loader_ member (and its workers) end before dataset_.
              [dataset = dataset_.get(), pin = options.pin_memory](const std::vector<int64_t>& indices) {
                Batch batch = dataset->get_batch(indices);
                // Pinned by whoever builds the batch (Note [Loader pinned memory]).
                if (pin) {
                  if (batch.data.defined()) batch.data = batch.data.pin_memory();
                  if (batch.target.defined()) batch.target = batch.target.pin_memory();
                }
                return std::any(std::move(batch));
              }) {}

std::optional<Batch> DataLoader::next() {
  std::optional<std::any> batch = loader_.next();
  if (!batch) return std::nullopt;
  return std::any_cast<Batch>(std::move(*batch));
}

DataLoader::Iterator DataLoader::begin() {
  loader_.begin_epoch(loader_.epoch());
  return Iterator(this);
}

}  // namespace kiln::data
