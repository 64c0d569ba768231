// Differentiable collectives (Note [Differentiable collectives] in
// functional.h): each forward runs the ProcessGroup collective on a fresh
// tensor, and its backward, right under it, is the conjugate collective
// written with these same functions.
#include "distributed/functional.h"

#include <memory>
#include <string>
#include <vector>

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "distributed/init.h"
#include "tensor/ops.h"

namespace kiln::distributed::functional {

using autograd::record;
using autograd::TensorList;
using autograd::untracked;

namespace {

// "rank 1 of group 'default'", for errors.
std::string where(const ProcessGroup& group) {
  return detail::str("rank ", group.rank(), " of group '", group.name(), "'");
}

// The group a call runs on, held by its backward so that the group lives as
// long as the graph that will use it.
std::shared_ptr<ProcessGroup> group_or_default(ProcessGroup* group, const char* op) {
  if (group) return group->shared_from_this();
  KILN_CHECK(is_initialized(), op, ": no group was given and init_process_group has not been called");
  return default_group_ptr();
}

std::shared_ptr<ProcessGroup> start(const char* op, const Tensor& x, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> g = group_or_default(group, op);
  KILN_CHECK(x.defined(), op, ": ", where(*g), " passed an undefined tensor");
  return g;
}

// The same decision on every rank, whatever its own input requires
// (Note [Differentiable collectives], when a node is recorded).
bool records(const Tensor& x) { return GradMode::is_enabled() && x.is_floating_point(); }

bool differentiable(ReduceOp op) { return op == ReduceOp::Sum || op == ReduceOp::Avg; }

// A reduction without a gradient is refused where it is called, not later in
// a backward that would find nothing to run.
void check_differentiable(ReduceOp op, const Tensor& x, const char* name, const ProcessGroup& group) {
  KILN_CHECK(differentiable(op) || !autograd::needs_grad({x}), name, ": ReduceOp ", reduce_op_name(op),
             " has no gradient (sum and avg do), but the input of ", where(group),
             " requires grad; detach it or run under NoGradGuard");
}

// `dim` of x, counted from the end when negative.
int64_t checked_dim(int64_t dim, const Tensor& x, const char* op, const char* what, const ProcessGroup& group) {
  const int64_t n = x.dim();
  KILN_CHECK(n >= 1, op, ": the input of ", where(group), " is 0-d; ", what, " needs at least 1 dim");
  KILN_CHECK(dim >= -n && dim < n, op, ": ", what, " ", dim, " is out of range for the input of shape ", x.shape(),
             " on ", where(group));
  return dim < 0 ? dim + n : dim;
}

void check_splits(const Tensor& x, int64_t dim, const char* op, const char* what, const ProcessGroup& group) {
  KILN_CHECK(x.size(dim) % group.size() == 0, op, ": the input of ", where(group), " has shape ", x.shape(),
             ", whose size ", x.size(dim), " along ", what, " ", dim, " is not a multiple of the group size ",
             group.size());
}

// x split into `parts` equal blocks along dim (views).
std::vector<Tensor> blocks(const Tensor& x, int64_t dim, int parts) {
  const int64_t n = x.size(dim) / parts;
  std::vector<Tensor> result;
  for (int s = 0; s < parts; ++s) result.push_back(x.narrow(dim, s * n, n));
  return result;
}

}  // namespace

// ---- all_reduce <-> all_reduce ----

Tensor all_reduce(const Tensor& x, ReduceOp op, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> g = start("all_reduce", x, group);
  check_differentiable(op, x, "all_reduce", *g);
  Tensor out = untracked([&] {
    Tensor result = x.clone();
    g->all_reduce(result, op)->wait();
    return result;
  });
  if (records(x) && differentiable(op)) {
    // d(sum_s y_s . g_s)/dx_r = sum_s g_s; with avg, each term scaled by 1/W.
    // Backwards name functional:: outright: unqualified, argument-dependent
    // lookup on ReduceOp would also find init.h's in-place all_reduce.
    record("all_reduce", {x}, {out},
           [g, op](const TensorList& grads) -> TensorList { return {functional::all_reduce(grads[0], op, g.get())}; });
  }
  return out;
}

// ---- all_gather <-> reduce_scatter ----

Tensor all_gather(const Tensor& x, int64_t dim, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> g = start("all_gather", x, group);
  const int64_t d = checked_dim(dim, x, "all_gather", "dim", *g);
  Tensor out = untracked([&] {
    Shape stacked_shape = x.shape();
    stacked_shape.insert(stacked_shape.begin(), g->size());
    Tensor stacked = empty(stacked_shape, TensorOptions(x.dtype(), x.device()));  // (W, *x.shape)
    g->all_gather_into_tensor(stacked, x)->wait();
    std::vector<Tensor> parts;
    for (int s = 0; s < g->size(); ++s) parts.push_back(stacked.select(0, s));
    return ops::cat(parts, d);
  });
  if (records(x)) {
    record("all_gather", {x}, {out}, [g, d](const TensorList& grads) -> TensorList {
      return {functional::reduce_scatter(grads[0], d, ReduceOp::Sum, g.get())};
    });
  }
  return out;
}

Tensor reduce_scatter(const Tensor& x, int64_t dim, ReduceOp op, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> g = start("reduce_scatter", x, group);
  const int64_t d = checked_dim(dim, x, "reduce_scatter", "dim", *g);
  check_splits(x, d, "reduce_scatter", "dim", *g);
  check_differentiable(op, x, "reduce_scatter", *g);
  Tensor out = untracked([&] {
    std::vector<Tensor> parts = blocks(x, d, g->size());
    Tensor chunks = ops::stack(parts, 0);  // (W, *block shape), contiguous: chunk s goes to rank s
    Tensor result = empty(parts[0].shape(), TensorOptions(x.dtype(), x.device()));
    g->reduce_scatter_tensor(result, chunks, op)->wait();
    return result;
  });
  if (records(x) && differentiable(op)) {
    record("reduce_scatter", {x}, {out}, [g, d, op](const TensorList& grads) -> TensorList {
      Tensor gathered = functional::all_gather(grads[0], d, g.get());
      return {op == ReduceOp::Avg ? kiln::div(gathered, static_cast<double>(g->size())) : gathered};
    });
  }
  return out;
}

// ---- broadcast <-> reduce ----

Tensor broadcast(const Tensor& x, int src, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> g = start("broadcast", x, group);
  Tensor out = untracked([&] {
    Tensor result = x.clone();
    g->broadcast(result, src)->wait();
    return result;
  });
  if (records(x)) {
    record("broadcast", {x}, {out}, [g, src](const TensorList& grads) -> TensorList {
      return {functional::reduce(grads[0], src, ReduceOp::Sum, g.get())};
    });
  }
  return out;
}

Tensor reduce(const Tensor& x, int dst, ReduceOp op, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> g = start("reduce", x, group);
  check_differentiable(op, x, "reduce", *g);
  Tensor out = untracked([&] {
    Tensor result = x.clone();
    g->reduce(result, dst, op)->wait();
    // ProcessGroup::reduce leaves the other ranks' tensors as they were;
    // zeros make their output independent of their input, which is what
    // broadcast as the backward assumes.
    return g->rank() == dst ? result : zeros_like(result);
  });
  if (records(x) && differentiable(op)) {
    record("reduce", {x}, {out}, [g, dst, op](const TensorList& grads) -> TensorList {
      Tensor spread = functional::broadcast(grads[0], dst, g.get());
      return {op == ReduceOp::Avg ? kiln::div(spread, static_cast<double>(g->size())) : spread};
    });
  }
  return out;
}

// ---- all_to_all <-> all_to_all ----

Tensor all_to_all(const Tensor& x, int64_t split_dim, int64_t concat_dim, ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> g = start("all_to_all", x, group);
  const int64_t split = checked_dim(split_dim, x, "all_to_all", "split_dim", *g);
  const int64_t concat = checked_dim(concat_dim, x, "all_to_all", "concat_dim", *g);
  check_splits(x, split, "all_to_all", "split_dim", *g);
  Tensor out = untracked([&] {
    std::vector<Tensor> inputs = blocks(x, split, g->size());  // inputs[s] goes to rank s
    std::vector<Tensor> outputs;                               // outputs[s] comes from rank s
    for (int s = 0; s < g->size(); ++s)
      outputs.push_back(empty(inputs[0].shape(), TensorOptions(x.dtype(), x.device())));
    g->all_to_all(outputs, inputs)->wait();
    return ops::cat(outputs, concat);
  });
  if (records(x)) {
    record("all_to_all", {x}, {out}, [g, split, concat](const TensorList& grads) -> TensorList {
      return {functional::all_to_all(grads[0], concat, split, g.get())};
    });
  }
  return out;
}

// ---- send <-> recv ----

Tensor send(const Tensor& x, int dst, ProcessGroup* group, int tag) {
  std::shared_ptr<ProcessGroup> g = start("send", x, group);
  g->send(x, dst, tag);
  Tensor token = zeros({}, TensorOptions(x.dtype(), x.device()));
  if (records(x)) {
    // The token's own gradient carries nothing: the node is there to receive
    // x's gradient from dst when backward reaches it.
    record("send", {x}, {token},
           [g, dst, tag, shape = x.shape(), options = TensorOptions(x.dtype(), x.device())](const TensorList&) {
             Tensor grad = empty(shape, options);
             g->recv(grad, dst, tag);
             return TensorList{grad};
           });
  }
  return token;
}

Tensor recv(const Shape& shape, TensorOptions options, int src, ProcessGroup* group, int tag) {
  std::shared_ptr<ProcessGroup> g = group_or_default(group, "recv");
  Tensor out = empty(shape, options);
  g->recv(out, src, tag);
  if (GradMode::is_enabled() && is_floating(options.dtype)) {
    // No inputs: the graph of this rank begins here, and what reaches it
    // belongs to src's graph.
    record("recv", {}, {out}, [g, src, tag](const TensorList& grads) {
      g->send(grads[0], src, tag);
      return TensorList{};
    });
  }
  return out;
}

}  // namespace kiln::distributed::functional
