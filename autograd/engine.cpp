#include "autograd/engine.h"

#include <functional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/variable.h"
#include "tensor/ops.h"

namespace kiln::autograd {

namespace {

thread_local const std::string* t_current_node = nullptr;

// Sets the node named in saved-tensor errors for the duration of its apply().
class CurrentNode {
 public:
  explicit CurrentNode(const Node& node) : previous_(t_current_node) { t_current_node = &node.name(); }
  ~CurrentNode() { t_current_node = previous_; }

 private:
  const std::string* previous_;
};

// Where autograd::grad() collects the gradient of one input.
struct Capture {
  uint32_t output_nr;
  size_t index;
};

thread_local const std::vector<bool>* t_wanted_inputs = nullptr;

// Sets the inputs whose gradients a node's apply() is asked for
// (Note [Split backward]); none set means all.
class WantedInputs {
 public:
  explicit WantedInputs(const std::vector<bool>* wanted) : previous_(t_wanted_inputs) { t_wanted_inputs = wanted; }
  ~WantedInputs() { t_wanted_inputs = previous_; }

 private:
  const std::vector<bool>* previous_;
};

}  // namespace

namespace detail {

// One backward call: the dependency counts, the gradients waiting at each
// node's inputs, and what to capture (Note [Backward execution order]).
class GraphTask {
 public:
  GraphTask(bool retain_graph, bool create_graph) : retain_graph_(retain_graph), create_graph_(create_graph) {}

  void add_capture(const Edge& edge, size_t index) { captures_[edge.node.get()].push_back({edge.input_nr, index}); }
  // Makes this task backward_input's (Note [Split backward]): what it does
  // not need for the captured inputs goes into `deferred`.
  void defer_into(DeferredBackward& deferred) { deferred_ = &deferred; }

  // Runs the graph reachable from `roots`. With captures, only nodes that
  // lead to a captured edge run, and AccumulateGrad never does.
  void execute(const std::vector<Edge>& roots, const TensorList& root_grads, TensorList* captured) {
    CurrentTask current(*this);
    run_graph(roots, root_grads, captured);
    // Callbacks may queue further callbacks; they run too, in order. If the
    // graph threw, none runs (the backward did not finish).
    for (size_t i = 0; i < final_callbacks_.size(); ++i) {
      std::function<void()> callback = std::move(final_callbacks_[i]);
      callback();
    }
  }

  void queue_callback(std::function<void()> callback) { final_callbacks_.push_back(std::move(callback)); }

  static GraphTask* current() { return t_current_task; }

 private:
  // Makes `task` the one queue_callback() adds to while it runs; nested
  // backward calls (from a hook, say) restore the outer task after.
  class CurrentTask {
   public:
    explicit CurrentTask(GraphTask& task) : previous_(t_current_task) { t_current_task = &task; }
    ~CurrentTask() { t_current_task = previous_; }

   private:
    GraphTask* previous_;
  };
  static thread_local GraphTask* t_current_task;

  void run_graph(const std::vector<Edge>& roots, const TensorList& root_grads, TensorList* captured) {
    count_dependencies(roots);
    if (captured != nullptr) mark_needed(roots);
    auto later_first = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
    std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
    for (size_t i = 0; i < roots.size(); ++i) {
      add_gradient(roots[i], root_grads[i]);
    }
    for (const Edge& root : roots) {
      if (dependencies_[root.node.get()] == 0 && queued_.insert(root.node.get()).second) ready.push(root.node.get());
    }
    while (!ready.empty()) {
      Node* node = ready.top();
      ready.pop();
      if (captured != nullptr && !needed_.count(node) && !captures_.count(node)) {
        buffers_.erase(node);  // leads to nothing asked for
      } else {
        TensorList grads = take_inputs(*node);
        if (captured != nullptr) capture(*node, grads, *captured);
        if (captured == nullptr || needed_.count(node)) run_node(*node, std::move(grads));
      }
      for (const Edge& edge : node->next_edges()) {
        if (!edge.valid()) continue;
        if (--dependencies_[edge.node.get()] == 0 && queued_.insert(edge.node.get()).second)
          ready.push(edge.node.get());
      }
    }
  }

  // Runs `node` and sends its gradients on. In backward_input, a gradient
  // towards an input that leads to no captured input is kept for W
  // instead, and a node that skipped such gradients is kept to be asked again.
  void run_node(Node& node, TensorList grads) {
    const std::vector<Edge>& edges = node.next_edges();
    apply_hooks(node, grads);
    if (deferred_ == nullptr) {
      TensorList input_grads = run(node, std::move(grads), nullptr);
      for (size_t i = 0; i < edges.size() && i < input_grads.size(); ++i)
        if (edges[i].valid() && input_grads[i].defined())
          add_gradient(edges[i], check_gradient(node, i, input_grads[i]));
      return;
    }
    std::vector<bool> wanted(edges.size());
    bool defers = false;
    for (size_t i = 0; i < edges.size(); ++i) {
      Node* next = edges[i].node.get();
      wanted[i] = edges[i].valid() && (needed_.count(next) || captures_.count(next));
      defers = defers || (edges[i].valid() && !wanted[i]);
    }
    TensorList kept = defers ? grads : TensorList();
    TensorList input_grads = run(node, std::move(grads), &wanted);
    std::vector<bool> asked_again(edges.size(), false);
    bool replay = false;
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!edges[i].valid()) continue;
      const bool computed = i < input_grads.size() && input_grads[i].defined();
      if (wanted[i]) {
        if (computed) add_gradient(edges[i], check_gradient(node, i, input_grads[i]));
      } else if (computed) {
        deferred_->edges_.push_back(edges[i]);
        deferred_->grads_.push_back(check_gradient(node, i, input_grads[i]));
      } else {
        asked_again[i] = replay = true;
      }
    }
    if (replay) deferred_->replays_.push_back({node.shared_from_this(), std::move(kept), std::move(asked_again)});
  }

 public:
  // W's half of a split backward: asks each kept node for the gradients it
  // skipped, then backpropagates them with those computed in I.
  void execute_deferred(DeferredBackward&& deferred) {
    std::vector<Edge> edges = std::move(deferred.edges_);
    TensorList grads = std::move(deferred.grads_);
    for (DeferredBackward::Replay& replay : deferred.replays_) {
      Node& node = *replay.node;
      TensorList input_grads = run(node, std::move(replay.grad_outputs), &replay.wanted);
      node.release();
      for (size_t i = 0; i < node.next_edges().size(); ++i) {
        if (!replay.wanted[i] || i >= input_grads.size() || !input_grads[i].defined()) continue;
        edges.push_back(node.next_edges()[i]);
        grads.push_back(check_gradient(node, i, input_grads[i]));
      }
    }
    deferred.replays_.clear();
    if (!edges.empty()) execute(edges, grads, nullptr);
  }

 private:

  void count_dependencies(const std::vector<Edge>& roots) {
    std::vector<Node*> stack;
    std::unordered_set<Node*> seen;
    for (const Edge& root : roots) {
      if (seen.insert(root.node.get()).second) stack.push_back(root.node.get());
    }
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const Edge& edge : node->next_edges()) {
        if (!edge.valid()) continue;
        ++dependencies_[edge.node.get()];
        if (seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
      }
    }
  }

  // A node is needed when some captured edge is reachable through its
  // inputs; computed bottom-up by a post-order walk.
  bool mark_needed_from(Node* node, std::unordered_map<Node*, bool>& memo) {
    auto it = memo.find(node);
    if (it != memo.end()) return it->second;
    memo[node] = false;
    bool needed = false;
    for (const Edge& edge : node->next_edges()) {
      if (!edge.valid()) continue;
      bool child = mark_needed_from(edge.node.get(), memo);
      needed = needed || child || captures_.count(edge.node.get());
    }
    memo[node] = needed;
    if (needed) needed_.insert(node);
    return needed;
  }

  void mark_needed(const std::vector<Edge>& roots) {
    std::unordered_map<Node*, bool> memo;
    for (const Edge& root : roots) mark_needed_from(root.node.get(), memo);
  }

  void add_gradient(const Edge& edge, const Tensor& grad) {
    TensorList& slots = buffers_[edge.node.get()];
    if (slots.empty()) slots.resize(edge.node->outputs().size());
    Tensor& slot = slots[edge.input_nr];
    if (!slot.defined()) {
      slot = grad;
    } else {
      slot = create_graph_ ? kiln::add(slot, grad) : ops::add(slot, grad);
    }
  }

  // The gradients waiting at `node`'s outputs, zeros where none arrived.
  TensorList take_inputs(Node& node) {
    TensorList grads = std::move(buffers_[&node]);
    buffers_.erase(&node);
    grads.resize(node.outputs().size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) continue;
      const TensorGeometry& g = node.outputs()[i];
      grads[i] = zeros(g.shape, {g.dtype, g.device});
    }
    return grads;
  }

  void capture(Node& node, const TensorList& grads, TensorList& captured) {
    auto it = captures_.find(&node);
    if (it == captures_.end()) return;
    for (const Capture& c : it->second) {
      Tensor g = grads[c.output_nr];
      captured[c.index] = captured[c.index].defined() ? ops::add(captured[c.index], g) : g;
    }
  }

  void apply_hooks(Node& node, TensorList& grads) {
    AutoGradMode mode(create_graph_);
    CurrentNode current(node);
    for (const Node::GradHook& hook : node.grad_hooks()) {
      Tensor replaced = hook.fn(grads[hook.output_nr]);
      if (replaced.defined()) grads[hook.output_nr] = replaced;
    }
  }

  // node.apply() on gradients whose hooks have run, asking for `wanted`
  // inputs' gradients (all when null).
  TensorList run(Node& node, TensorList grads, const std::vector<bool>* wanted) {
    AutoGradMode mode(create_graph_);
    CurrentNode current(node);
    WantedInputs asking(wanted);
    TensorList input_grads = node.apply(std::move(grads));
    KILN_CHECK(input_grads.size() <= node.next_edges().size(), node.name(), ": backward returned ", input_grads.size(),
               " gradients for ", node.next_edges().size(), " inputs");
    if (!retain_graph_) node.release();
    return input_grads;
  }

  Tensor check_gradient(Node& node, size_t i, const Tensor& grad) {
    const TensorGeometry& want = node.inputs().at(i);
    KILN_CHECK(grad.shape() == want.shape, node.name(), ": backward returned a gradient of shape ", grad.shape(),
               " for input ", i, " of shape ", want.shape);
    KILN_CHECK(grad.device() == want.device, node.name(), ": backward returned a gradient on ", grad.device(),
               " for input ", i, " on ", want.device);
    return grad.dtype() == want.dtype ? grad : grad.to(want.dtype);
  }

  bool retain_graph_;
  bool create_graph_;
  std::unordered_map<Node*, int64_t> dependencies_;
  std::unordered_map<Node*, TensorList> buffers_;
  std::unordered_map<Node*, std::vector<Capture>> captures_;
  std::unordered_set<Node*> needed_;
  std::unordered_set<Node*> queued_;
  std::vector<std::function<void()>> final_callbacks_;
  DeferredBackward* deferred_ = nullptr;
};

thread_local GraphTask* GraphTask::t_current_task = nullptr;

}  // namespace detail

namespace {

using detail::GraphTask;

// The edges and starting gradients for backward from `roots`.
std::vector<Edge> root_edges(std::string_view op, const TensorList& roots, const TensorList& grad_roots,
                             TensorList& grads) {
  KILN_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), op, ": got ", roots.size(), " tensors but ",
             grad_roots.size(), " gradients");
  std::vector<Edge> edges;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    Edge edge = gradient_edge(root);
    KILN_CHECK(edge.valid(), op, ": tensor ", i, " does not require grad and has no grad_fn");
    Tensor g = grad_roots.empty() ? Tensor() : grad_roots[i];
    if (!g.defined()) {
      KILN_CHECK(root.numel() == 1, op,
                 ": a gradient can be implicitly created only for one-element outputs; "
                 "tensor ",
                 i, " has shape ", root.shape(), ", pass the gradient explicitly");
      g = ones_like(root);
    } else {
      KILN_CHECK(g.shape() == root.shape(), op, ": gradient of shape ", g.shape(), " for tensor ", i, " of shape ",
                 root.shape());
    }
    edges.push_back(edge);
    grads.push_back(g);
  }
  return edges;
}

}  // namespace

void queue_callback(std::function<void()> callback) {
  GraphTask* task = GraphTask::current();
  KILN_CHECK(task != nullptr,
             "queue_callback: no backward is running on this thread; call it from a hook during backward");
  task->queue_callback(std::move(callback));
}

const std::string& current_node_name() {
  static const std::string none = "backward";
  return t_current_node ? *t_current_node : none;
}

void run_backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph, bool create_graph) {
  TensorList grads;
  std::vector<Edge> edges = root_edges("backward", roots, grad_roots, grads);
  GraphTask task(retain_graph || create_graph, create_graph);
  task.execute(edges, grads, nullptr);
}

bool input_gradient_wanted(size_t i) {
  return t_wanted_inputs == nullptr || (i < t_wanted_inputs->size() && (*t_wanted_inputs)[i]);
}

TensorList backward_input(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                          DeferredBackward& rest) {
  KILN_CHECK(rest.empty(), "backward_input: the DeferredBackward still holds the rest of an earlier backward; run "
                           "backward_weight on it first");
  TensorList grads;
  std::vector<Edge> edges = root_edges("backward_input", outputs, grad_outputs, grads);
  GraphTask task(/*retain_graph=*/true, /*create_graph=*/false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    Edge edge = gradient_edge(inputs[i]);
    KILN_CHECK(edge.valid(), "backward_input: input ", i, " does not require grad");
    task.add_capture(edge, i);
  }
  task.defer_into(rest);
  TensorList captured(inputs.size());
  task.execute(edges, grads, &captured);
  return captured;
}

void backward_weight(DeferredBackward&& rest) {
  GraphTask task(/*retain_graph=*/false, /*create_graph=*/false);
  task.execute_deferred(std::move(rest));
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs, bool retain_graph,
                bool create_graph, bool allow_unused) {
  TensorList grads;
  std::vector<Edge> edges = root_edges("grad", outputs, grad_outputs, grads);
  GraphTask task(retain_graph || create_graph, create_graph);
  for (size_t i = 0; i < inputs.size(); ++i) {
    Edge edge = gradient_edge(inputs[i]);
    KILN_CHECK(edge.valid(), "grad: input ", i, " does not require grad");
    task.add_capture(edge, i);
  }
  TensorList captured(inputs.size());
  task.execute(edges, grads, &captured);
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(allow_unused || captured[i].defined(), "grad: input ", i,
               " was not used to compute the outputs; pass allow_unused=true if that is expected");
  }
  return captured;
}

}  // namespace kiln::autograd
