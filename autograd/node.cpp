#include "autograd/node.h"

#include <atomic>

#include "autograd/engine.h"

namespace kiln::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
std::atomic<int64_t> g_next_hook_handle{1};
}  // namespace

Node::Node(std::string name) : name_(std::move(name)), sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

const Tensor& SavedTensor::get() const {
  KILN_CHECK(!tensor_.defined() || tensor_.version() == version_, current_node_name(),
             ": a tensor saved for backward was modified by an in-place operation (it is at version ",
             tensor_.version(), ", it was saved at version ", version_,
             "); use the out-of-place op, or clone() the tensor before modifying it");
  return tensor_;
}

int64_t next_hook_handle() { return g_next_hook_handle.fetch_add(1); }

}  // namespace kiln::autograd
