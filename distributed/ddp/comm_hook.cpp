// The default hook of Note [DDP communication hooks]: an exact average.
#include "distributed/ddp/comm_hook.h"

namespace kiln::distributed {

namespace {

class WorkReduction : public PendingReduction {
 public:
  explicit WorkReduction(WorkPtr work) : work_(std::move(work)) {}
  void wait() override { work_->wait(); }

 private:
  WorkPtr work_;
};

class AllreduceHook : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  std::unique_ptr<PendingReduction> start(ProcessGroup& group, GradBucket& bucket) override {
    // The front-end turns Avg into a sum and a division where the backend
    // has no average of its own (Note [Collective front-end]).
    return std::make_unique<WorkReduction>(group.all_reduce(bucket.buffer, ReduceOp::Avg));
  }
};

}  // namespace

std::shared_ptr<CommHook> allreduce_hook() { return std::make_shared<AllreduceHook>(); }

}  // namespace kiln::distributed
