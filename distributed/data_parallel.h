// DataParallel: one process, one replica of the model per device, each
// batch split between them; PyTorch's torch.nn.DataParallel.
//
//   auto model = std::make_shared<nn::LeNet>();
//   distributed::DataParallel dp(model, [] { return std::make_shared<nn::LeNet>(); },
//                                {cuda_device(0), cuda_device(1)});
//   optim::SGD opt(dp.parameters(), optim::SGDOptions(0.01));     // the original's parameters
//   F::cross_entropy(dp.forward(images), labels).backward();
//   opt.step();
//
// Note [DataParallel steps]
// Each forward:
// 1. copies the original module's parameters and buffers into the other
//    replicas (replica 0 is the original, on devices[0]);
// 2. splits the input along dim 0 into one chunk per device, as
//    Tensor.chunk does (ceil(N / k) rows each, the last chunk shorter, and
//    fewer chunks than devices when N < k), and moves each to its device;
// 3. runs replica i on chunk i, each on a thread of its own (replica 0 on
//    the caller's), with the caller's grad mode and autocast settings;
// 4. moves the outputs to devices[0] and concatenates them: the output of
//    the whole batch, as the original module would have made it.
// The original's hooks (forward and backward) run once, around all four
// steps (Module::call_with_hooks), on the whole batch and on the caller's
// thread, as if the original module had run alone; the replicas are run
// without hooks.
// Steps 2 and 4 are differentiable, so one backward from a loss on that
// output flows into every replica's parameters. The first replica
// parameter to get its gradient queues an end-of-backward callback
// (autograd::queue_callback) that adds each replica's gradients into the
// original's and clears the replica's, so backward() returns with the
// original holding the gradient of the whole batch, and the optimizer steps
// the original alone.
//
// A factory makes the replicas: C++ has no generic copy of a module
// (LibTorch's DataParallel needs Cloneable modules for the same reason).
// Replicas' buffer updates are lost each step (batch norm's running
// statistics come from replica 0's chunk only), as in PyTorch. On a machine
// without GPUs the devices may all be the CPU: the replicas then run on
// threads, which is what the tests do.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "nn/module.h"
#include "tensor/device.h"

namespace kiln::distributed {

class DataParallel : public nn::Module {
 public:
  using ModuleFactory = std::function<std::shared_ptr<nn::Module>()>;

  // `module` is registered as "module" and moved to devices[0]; the factory
  // is called devices.size() - 1 times for the other replicas, which must
  // have the module's parameters and buffers (names and shapes).
  DataParallel(std::shared_ptr<nn::Module> module, const ModuleFactory& make_replica, std::vector<Device> devices);
  ~DataParallel() override;

  // Note [DataParallel steps].
  Tensor forward(const Tensor& input) override;

  nn::Module& module() { return *module_; }
  const std::vector<Device>& devices() const { return devices_; }

 private:
  void copy_state_to_replicas();
  // Steps 2 to 4 of Note [DataParallel steps].
  Tensor split_and_run(const Tensor& input);
  // The end-of-backward callback: replica gradients into the original's.
  void gather_gradients();

  std::shared_ptr<nn::Module> module_;
  std::vector<std::shared_ptr<nn::Module>> replicas_;  // replicas_[0] == module_
  std::vector<Device> devices_;
  // [replica][parameter], in named_parameters() order.
  std::vector<std::vector<Tensor>> parameters_;
  std::vector<std::vector<Tensor>> buffers_;
  std::vector<std::vector<int64_t>> hook_handles_;  // replicas 1.. only
  bool gather_queued_ = false;
};

}  // namespace kiln::distributed
