// The 16-bit compression hooks of Note [DDP communication hooks]:
// fp16_compress_hook() and bf16_compress_hook(), as PyTorch's
// fp16_compress_hook and bf16_compress_hook.
//
// Note [Dividing before the narrow sum]
// The hook sends (buffer / W).to(narrow) and sums that over the W ranks, so
// the sum is already the average. PyTorch divides before the all_reduce too,
// and for the same reason: float16 overflows at 65504, and gradients that
// fit one by one can overflow once W of them are added up in float16 (W =
// 64 ranks of 2000 each already do). Divided first, no partial sum exceeds
// the largest |gradient|. bfloat16 has float32's range, but it takes the
// same path: one code path, one error analysis.
//
// We divide in the buffer's own dtype and round once to the narrow type;
// PyTorch casts first and divides in the narrow type, which rounds twice.
// Rounding errors, with u the narrow type's unit roundoff (2^-11 for
// float16, 2^-8 for bfloat16) and x_w rank w's value:
//   - each rank's cast:        |error| <= u |x_w| / W
//   - each of W - 1 additions: |error| <= u sum_w |x_w| / W
// so the result is within u sum_w |x_w| of the exact average (the bound
// comm_hook_test.cpp checks). Casting the narrow sum back is exact.
#include <memory>
#include <string>

#include "distributed/ddp/comm_hook.h"
#include "tensor/elementwise.h"
#include "tensor/error.h"

namespace kiln::distributed {

namespace {

class NarrowReduction : public PendingReduction {
 public:
  NarrowReduction(WorkPtr work, Tensor narrow, Tensor buffer)
      : work_(std::move(work)), narrow_(std::move(narrow)), buffer_(std::move(buffer)) {}

  void wait() override {
    work_->wait();
    // copy_ converts the narrow dtype back to the buffer's.
    buffer_.copy_(narrow_);
  }

 private:
  WorkPtr work_;
  Tensor narrow_;  // (numel) in the wire dtype: the average once work_ is done
  Tensor buffer_;  // (numel) the bucket's buffer
};

class NarrowCompressHook : public CommHook {
 public:
  NarrowCompressHook(DType wire_dtype, std::string name) : wire_dtype_(wire_dtype), name_(std::move(name)) {}

  std::string name() const override { return name_; }

  std::unique_ptr<PendingReduction> start(ProcessGroup& group, GradBucket& bucket) override {
    const Tensor& buffer = bucket.buffer;
    KILN_CHECK(buffer.is_floating_point(), name_, " hook: bucket ", bucket.index, " holds ", buffer.dtype(),
               " gradients; only floating-point gradients can be compressed to ", wire_dtype_);
    // narrow: (numel) in wire_dtype_ (Note [Dividing before the narrow sum]).
    Tensor narrow = ops::div(buffer, group.size()).to(wire_dtype_);
    WorkPtr work = group.all_reduce(narrow, ReduceOp::Sum);
    return std::make_unique<NarrowReduction>(std::move(work), std::move(narrow), buffer);
  }

 private:
  DType wire_dtype_;
  std::string name_;
};

}  // namespace

std::shared_ptr<CommHook> fp16_compress_hook() {
  return std::make_shared<NarrowCompressHook>(DType::Float16, "fp16_compress");
}

std::shared_ptr<CommHook> bf16_compress_hook() {
  return std::make_shared<NarrowCompressHook>(DType::BFloat16, "bf16_compress");
}

}  // namespace kiln::distributed
