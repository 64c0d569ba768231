#include "distributed/backends/gloo/process_group_gloo.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>

#include "distributed/backend_registry.h"
#include "distributed/backends/gloo/call_exchange.h"
#include "distributed/backends/gloo/gloo_rendezvous.h"
#include "distributed/backends/gloo/gloo_reduce.h"
#include "distributed/backends/gloo/operation_threads.h"
#include "distributed/backends/gloo/recursive_doubling.h"
#include "distributed/backends/gloo/ring_reduce_scatter.h"
#include "distributed/backends/gloo/shared_memory_all_reduce.h"
#include "tensor/cuda_hooks.h"
#include "tensor/error.h"
#include "tensor/factory.h"
#include "tensor/shape.h"

namespace kiln::distributed {

using gloo_backend::OperationThreads;

namespace {

// ---- Note [Gloo and CUDA tensors] ------------------------------------------------

// Host memory Gloo can work on for `t`: `t` itself on the CPU, else pinned
// host memory of t's shape, holding t's values when `with_values`.
Tensor host_buffer(const Tensor& t, bool with_values) {
  if (!t.defined() || t.device().is_cpu()) return t;
  Tensor host(std::make_shared<TensorImpl>(Storage::allocate_pinned(t.nbytes(), "gloo"), t.dtype(), t.shape(),
                                           contiguous_strides(t.shape()), 0));
  if (with_values) host.copy_(t);
  return host;
}

// Puts Gloo's result back into `target` when it worked on a host copy.
void copy_to_device(Tensor target, const Tensor& host) {
  if (!target.defined() || target.is_same(host)) return;
  target.copy_(host);
  // A copy from pinned memory is only queued on the current stream (Note
  // [CUDA copies]); wait for that stream, not for the whole device. A CUDA
  // tensor exists only once libkiln_cuda has registered its hooks.
  if (target.device().is_cuda()) cuda::cuda_hooks()->synchronize_current_stream(target.device());
}

// ---- calling gloo --------------------------------------------------------------------

// Calls fn(p) with p `t`'s data as an unsigned integer type of t's element
// size. Gloo's options take the element size from the pointer type, and
// they only move bytes (the reduction is ours), so this is all they need.
template <class Fn>
void with_words(const Tensor& t, Fn&& fn) {
  void* data = t.data_ptr();
  switch (t.element_size()) {
    case 1:
      fn(static_cast<uint8_t*>(data));
      return;
    case 2:
      fn(static_cast<uint16_t*>(data));
      return;
    case 4:
      fn(static_cast<uint32_t*>(data));
      return;
    case 8:
      fn(static_cast<uint64_t*>(data));
      return;
  }
  KILN_FAIL("gloo: no element type of ", t.element_size(), " bytes (", dtype_name(t.dtype()), ")");
}

template <class T>
T* same_words(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

size_t elements(const Tensor& t) { return static_cast<size_t>(t.numel()); }

// Posts a send or recv. Gloo throws at once when the pair is already
// broken (the peer died); its message gets the operation's name, as the
// errors that surface later on the waiting thread do.
void post(const std::string& name, const std::function<void()>& post_message) {
  try {
    post_message();
  } catch (const std::exception& e) {
    KILN_FAIL("gloo ", name, ": ", e.what());
  }
}

// Over TCP, the exchange of calls of one collective (Note [Calls in the
// first message]), which records each peer's call in `seen` as it arrives.
template <class CallsSeen>
gloo_backend::CallExchange call_exchange(const std::shared_ptr<::gloo::Context>& context,
                                         const std::shared_ptr<CallsSeen>& seen, const CollectiveCall& call,
                                         uint32_t tag, std::chrono::milliseconds timeout, const std::string& group) {
  auto record = [seen](int rank, const CollectiveCall& theirs) {
    std::lock_guard lock(seen->mutex);
    seen->calls[rank] = theirs;
  };
  return gloo_backend::CallExchange(context, call, tag, timeout, group, record, seen->check);
}

// Note [Always-on collective agreement]: returns once every rank makes
// `call`, else throws on every rank.
template <class CallsSeen>
void agree(const std::shared_ptr<::gloo::Context>& context,
           const std::shared_ptr<gloo_backend::SharedMemoryAllReduce>& shared_memory,
           const std::shared_ptr<CallsSeen>& seen, const CollectiveCall& call, uint32_t tag,
           std::chrono::milliseconds timeout, const std::string& group) {
  if (context->size < 2) return;
  if (shared_memory) {
    shared_memory->agree(call, timeout);
    return;
  }
  call_exchange(context, seen, call, tag, timeout, group).exchange_calls();
}

uint64_t point_to_point_slot(int tag) {
  return (uint64_t{gloo_backend::kPointToPointSlotPrefix} << 56) | static_cast<uint32_t>(tag);
}

struct Connection {
  std::shared_ptr<::gloo::Context> context;
  // Null unless every rank is on this host (Note [Same-host all-reduce through shared memory]).
  std::shared_ptr<gloo_backend::SharedMemoryAllReduce> shared_memory;
};

// The rendezvous (Note [Gloo rendezvous steps]), then the shared-memory
// all-reduce when every rank is on this host, in what is left of the timeout.
Connection connect(const std::shared_ptr<Store>& store, int rank, int size, const ProcessGroupOptions& options,
                   std::shared_ptr<::gloo::transport::Device>& device) {
  KILN_CHECK(store != nullptr, "gloo: group '", options.name,
             "' needs a store for its ranks to find each other, and none was given");
  gloo_backend::Mesh mesh = gloo_backend::connect_mesh(store, rank, size, options.name, options.timeout, device);
  const auto left = std::max(std::chrono::ceil<std::chrono::milliseconds>(mesh.deadline - std::chrono::steady_clock::now()),
                             std::chrono::milliseconds(1));
  try {
    return {mesh.context, gloo_backend::SharedMemoryAllReduce::connect(*mesh.keys, rank, size, options.name, left)};
  } catch (const std::exception& e) {
    KILN_FAIL("gloo: rank ", rank, " of group '", options.name, "' (size ", size,
              ") could not set up the same-host all-reduce through ", store->describe(), " within ",
              options.timeout.count(), " ms: ", e.what());
  }
}

}  // namespace

// ---- construction ---------------------------------------------------------------------

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroupGloo(std::move(store), rank, size, std::move(options), nullptr) {}

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                                   std::shared_ptr<::gloo::transport::Device> device)
    : ProcessGroup(store, rank, size, options),
      device_(std::move(device)),
      collectives_(std::make_unique<OperationThreads>(1)),
      point_to_point_(std::make_unique<OperationThreads>(std::numeric_limits<size_t>::max())) {
  Connection connection = connect(store, rank, size, options, device_);
  context_ = std::move(connection.context);
  shared_memory_ = std::move(connection.shared_memory);
}

ProcessGroupGloo::~ProcessGroupGloo() {
  if (aborted_->load()) {
    // A collective given up on (Note [Heartbeat]) may still sit in Gloo,
    // waiting for a peer that stopped answering until Gloo's own timeout;
    // joining its thread would hold this process that long. What it works
    // on is owned by the operation itself, so the thread is left to end on
    // its own, kept reachable so that leak checkers do not report it.
    static std::mutex abandoned_mutex;
    static auto* abandoned = new std::vector<std::unique_ptr<OperationThreads>>();
    std::lock_guard lock(abandoned_mutex);
    abandoned->push_back(std::move(collectives_));
  }
  collectives_.reset();
  {
    std::lock_guard lock(pending_mutex_);
    closing_ = true;
    for (const auto& [buffer, is_recv] : pending_) {
      if (is_recv) {
        buffer->abortWaitRecv();
      } else {
        buffer->abortWaitSend();
      }
    }
  }
  point_to_point_.reset();
  context_.reset();
}

void ProcessGroupGloo::abort_operations(const std::string& reason) {
  (void)reason;
  aborted_->store(true);
  if (shared_memory_) shared_memory_->abort();
}

std::optional<CollectiveCall> ProcessGroupGloo::last_call_of(int rank) const {
  if (shared_memory_) return shared_memory_->last_call(rank);
  std::lock_guard lock(calls_seen_->mutex);
  return calls_seen_->calls.at(rank);
}

void ProcessGroupGloo::check_device(const Device& device, const char* op) const {
  // A CUDA tensor exists only where libkiln_cuda is loaded; gloo stages it
  // through host memory.
  if (device.is_cpu() || device.is_cuda()) return;
  KILN_FAIL(op, ": the gloo backend got a tensor on ", device, "; gloo works on CPU and CUDA tensors");
}

std::shared_ptr<ProcessGroup> ProcessGroupGloo::run_new_subgroup(const std::vector<int>& ranks,
                                                                 std::shared_ptr<Store> store,
                                                                 ProcessGroupOptions options) {
  const auto member = std::find(ranks.begin(), ranks.end(), rank());
  if (member == ranks.end()) return nullptr;
  const int sub_rank = static_cast<int>(member - ranks.begin());
  return std::shared_ptr<ProcessGroup>(
      new ProcessGroupGloo(std::move(store), sub_rank, static_cast<int>(ranks.size()), std::move(options), device_));
}

// ---- queues ------------------------------------------------------------------------------

WorkPtr ProcessGroupGloo::enqueue_collective(const CollectiveCall& call, std::function<void(uint32_t tag)> body,
                                             Agreement agreement) {
  std::lock_guard lock(issue_mutex_);
  const uint32_t tag = next_tag_++;
  return collectives_->enqueue(
      collective_kind_name(call.kind),
      [body = std::move(body), tag, call, agreement, context = context_, shared_memory = shared_memory_,
       aborted = aborted_, seen = calls_seen_, timeout = timeout(), group = group_name_] {
        // A collective queued behind one that was given up would only wait
        // for peers that have stopped too.
        KILN_CHECK(!aborted->load(), "gloo ", call.describe(), " #", call.sequence, ": group '", *group,
                   "' was aborted after an earlier collective failed");
        if (agreement == Agreement::BeforeBody) agree(context, shared_memory, seen, call, tag, timeout, *group);
        body(tag);
      });
}

// ---- collectives -----------------------------------------------------------------------------

WorkPtr ProcessGroupGloo::run_all_reduce(const Tensor& tensor, ReduceOp op) {
  auto reduce = gloo_backend::reduce_function(tensor.dtype(), op);
  Tensor host = host_buffer(tensor, true);
  const CollectiveCall call = CollectiveCall::make_reduction(sequence_number(), CollectiveKind::AllReduce,
                                                             tensor.dtype(), elements(tensor), op);
  auto body = [context = context_, shared_memory = shared_memory_, seen = calls_seen_, tensor, host, reduce, call,
               timeout = timeout(), group = group_name_](uint32_t tag) {
    // The shared-memory all-reduce checks the call as it waits for its
    // peers' inputs; over TCP recursive doubling carries the calls in its
    // steps, and the ring exchanges them first.
    if (shared_memory && host.numel() > 0) {
      shared_memory->all_reduce(host.data_ptr(), elements(host), host.element_size(), reduce, call, timeout);
      copy_to_device(tensor, host);
      return;
    }
    if (context->size < 2) return;
    gloo_backend::CallExchange exchange = call_exchange(context, seen, call, tag, timeout, *group);
    // Note [Gloo all-reduce algorithms]
    if (gloo_backend::use_recursive_doubling(host.nbytes(), context->size)) {
      gloo_backend::recursive_doubling_all_reduce(exchange, host.data_ptr(), elements(host), host.element_size(),
                                                  reduce);
      copy_to_device(tensor, host);
      return;
    }
    exchange.exchange_calls();
    if (host.numel() == 0) return;
    ::gloo::AllreduceOptions options(context);
    with_words(host, [&](auto* data) { options.setOutput(data, elements(host)); });
    options.setReduceFunction(reduce);
    options.setTag(tag);
    ::gloo::allreduce(options);
    copy_to_device(tensor, host);
  };
  return enqueue_collective(call, std::move(body), Agreement::InBody);
}

WorkPtr ProcessGroupGloo::run_broadcast(const Tensor& tensor, int root) {
  Tensor host = host_buffer(tensor, rank() == root);
  const CollectiveCall call =
      CollectiveCall::make(sequence_number(), CollectiveKind::Broadcast, tensor.dtype(), elements(tensor), root);
  return enqueue_collective(call, [context = context_, tensor, host, root](uint32_t tag) {
    if (host.numel() == 0) return;
    ::gloo::BroadcastOptions options(context);
    with_words(host, [&](auto* data) { options.setOutput(data, elements(host)); });
    options.setRoot(root);
    options.setTag(tag);
    ::gloo::broadcast(options);
    copy_to_device(tensor, host);
  });
}

WorkPtr ProcessGroupGloo::run_reduce(const Tensor& tensor, int root, ReduceOp op) {
  auto reduce = gloo_backend::reduce_function(tensor.dtype(), op);
  Tensor host = host_buffer(tensor, true);
  const bool is_root = rank() == root;
  const CollectiveCall call = CollectiveCall::make_reduction(sequence_number(), CollectiveKind::Reduce,
                                                             tensor.dtype(), elements(tensor), op, root);
  return enqueue_collective(call, [context = context_, tensor, host, root, is_root, reduce](uint32_t tag) {
    if (host.numel() == 0) return;
    // gloo::reduce leaves partial sums in every rank's output; the other
    // ranks' tensors must stay unchanged, so they reduce into scratch.
    Tensor output = is_root ? host : Tensor::empty(host.shape(), host.dtype());
    ::gloo::ReduceOptions options(context);
    with_words(host, [&](auto* data) {
      using Word = std::remove_pointer_t<decltype(data)>;
      options.setInput(data, elements(host));
      options.setOutput(same_words<Word>(output), elements(host));
    });
    options.setRoot(root);
    options.setReduceFunction(reduce);
    options.setTag(tag);
    ::gloo::reduce(options);
    if (is_root) copy_to_device(tensor, host);
  });
}

WorkPtr ProcessGroupGloo::run_all_gather(const Tensor& output, const Tensor& input) {
  Tensor host_input = host_buffer(input, true);
  Tensor host_output = host_buffer(output, false);
  const CollectiveCall call =
      CollectiveCall::make(sequence_number(), CollectiveKind::AllGather, input.dtype(), elements(input));
  auto body = [context = context_, shared_memory = shared_memory_, seen = calls_seen_, output, host_input,
               host_output, call, timeout = timeout(), group = group_name_](uint32_t tag) {
    // Note [Same-host all-gather and reduce-scatter]: the segment checks the call.
    if (shared_memory && host_input.numel() > 0) {
      shared_memory->all_gather(host_output.data_ptr(), host_input.data_ptr(), host_input.nbytes(), call, timeout);
      copy_to_device(output, host_output);
      return;
    }
    agree(context, shared_memory, seen, call, tag, timeout, *group);
    if (host_input.numel() == 0) return;
    ::gloo::AllgatherOptions options(context);
    with_words(host_output, [&](auto* data) {
      using Word = std::remove_pointer_t<decltype(data)>;
      options.setInput(same_words<Word>(host_input), elements(host_input));
      options.setOutput(data, elements(host_output));
    });
    options.setTag(tag);
    ::gloo::allgather(options);
    copy_to_device(output, host_output);
  };
  return enqueue_collective(call, std::move(body), Agreement::InBody);
}

WorkPtr ProcessGroupGloo::run_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  auto reduce = gloo_backend::reduce_function(output.dtype(), op);
  Tensor host_input = host_buffer(input, true);
  Tensor host_output = host_buffer(output, false);
  const CollectiveCall call = CollectiveCall::make_reduction(sequence_number(), CollectiveKind::ReduceScatter,
                                                             output.dtype(), elements(output), op);
  auto body = [context = context_, shared_memory = shared_memory_, seen = calls_seen_, output, host_input,
               host_output, reduce, call, timeout = timeout(), group = group_name_](uint32_t tag) {
    // Note [Same-host all-gather and reduce-scatter]: the segment checks the call.
    if (shared_memory && host_output.numel() > 0) {
      shared_memory->reduce_scatter(host_output.data_ptr(), host_input.data_ptr(), elements(host_output),
                                    host_output.element_size(), reduce, call, timeout);
      copy_to_device(output, host_output);
      return;
    }
    agree(context, shared_memory, seen, call, tag, timeout, *group);
    if (host_output.numel() == 0) return;
    gloo_backend::ring_reduce_scatter(context, host_input.data_ptr(), host_output.data_ptr(), elements(host_output),
                                      host_output.element_size(), reduce, tag, timeout);
    copy_to_device(output, host_output);
  };
  return enqueue_collective(call, std::move(body), Agreement::InBody);
}

WorkPtr ProcessGroupGloo::run_gather(const Tensor& output, const Tensor& input, int root) {
  Tensor host_input = host_buffer(input, true);
  Tensor host_output = host_buffer(output, false);  // undefined off the root
  const bool is_root = rank() == root;
  const CollectiveCall call =
      CollectiveCall::make(sequence_number(), CollectiveKind::Gather, input.dtype(), elements(input), root);
  return enqueue_collective(call,
                            [context = context_, output, host_input, host_output, root, is_root](uint32_t tag) {
                              if (host_input.numel() == 0) return;
                              ::gloo::GatherOptions options(context);
                              with_words(host_input, [&](auto* data) {
                                using Word = std::remove_pointer_t<decltype(data)>;
                                options.setInput(data, elements(host_input));
                                if (is_root) options.setOutput(same_words<Word>(host_output), elements(host_output));
                              });
                              options.setRoot(root);
                              options.setTag(tag);
                              ::gloo::gather(options);
                              if (is_root) copy_to_device(output, host_output);
                            });
}

WorkPtr ProcessGroupGloo::run_scatter(const Tensor& output, const Tensor& input, int root) {
  Tensor host_input = host_buffer(input, true);  // undefined off the root
  Tensor host_output = host_buffer(output, false);
  const bool is_root = rank() == root;
  const int size = this->size();
  const CollectiveCall call =
      CollectiveCall::make(sequence_number(), CollectiveKind::Scatter, output.dtype(), elements(output), root);
  return enqueue_collective(call,
                            [context = context_, output, host_input, host_output, root, is_root, size](uint32_t tag) {
                              if (host_output.numel() == 0) return;
                              ::gloo::ScatterOptions options(context);
                              const size_t n = elements(host_output);
                              with_words(host_output, [&](auto* data) {
                                using Word = std::remove_pointer_t<decltype(data)>;
                                if (is_root) {
                                  // host_input: (size, n); chunk r goes to rank r.
                                  std::vector<Word*> chunks;
                                  for (int r = 0; r < size; ++r) chunks.push_back(same_words<Word>(host_input) + r * n);
                                  options.setInputs(chunks, n);
                                }
                                options.setOutput(data, n);
                              });
                              options.setRoot(root);
                              options.setTag(tag);
                              ::gloo::scatter(options);
                              copy_to_device(output, host_output);
                            });
}

WorkPtr ProcessGroupGloo::run_all_to_all(const Tensor& output, const Tensor& input) {
  Tensor host_input = host_buffer(input, true);
  Tensor host_output = host_buffer(output, false);
  const CollectiveCall call =
      CollectiveCall::make(sequence_number(), CollectiveKind::AllToAll, output.dtype(), elements(output));
  return enqueue_collective(call, [context = context_, output, host_input, host_output](uint32_t tag) {
    if (host_output.numel() == 0) return;
    ::gloo::AlltoallOptions options(context);
    with_words(host_output, [&](auto* data) {
      using Word = std::remove_pointer_t<decltype(data)>;
      options.setInput(same_words<Word>(host_input), elements(host_input));
      options.setOutput(data, elements(host_output));
    });
    options.setTag(tag);
    ::gloo::alltoall(options);
    copy_to_device(output, host_output);
  });
}

WorkPtr ProcessGroupGloo::run_barrier() {
  CollectiveCall call;
  call.sequence = sequence_number();
  call.kind = CollectiveKind::Barrier;
  return enqueue_collective(call, [context = context_](uint32_t tag) {
    ::gloo::BarrierOptions options(context);
    options.setTag(tag);
    ::gloo::barrier(options);
  });
}

// ---- point to point (Note [Gloo threads], Note [Point-to-point preamble]) ---------------------

// Note [Point-to-point preamble]
// A recv posted for fewer bytes than its matching send makes Gloo throw on
// its event-loop thread, which ends the process (std::terminate), and one
// posted for more completes with the tail unwritten. So every send starts
// with a *first message* on a slot of its own: a preamble of
// CollectiveCall::kWords words (the dtype and element count, whatever the
// tensor), then the data itself when it is at most kInlineBytes. Every recv
// posts, at once, the first message's receive for the preamble plus
// kInlineBytes, the longest first message there is, so no first message can
// overflow it.
// - Data that rode in the first message is copied into the tensor when the
//   preamble agrees with the recv, else dropped; nothing more is received.
// - Larger data follows as a second message. The recv's waiting thread reads
//   the preamble and then posts the data's receive: into the tensor when
//   the two agree, else into scratch memory of the sent size (so that the
//   pair stays usable and the sender is not left waiting).
// Either way a disagreement raises a kiln::Error on the receiving rank
// naming both sides. Receives from one rank with one tag must post their
// data in the order of their preambles, which separate waiting threads
// would not keep by themselves: each recv waits for its predecessor's
// RecvGate before it posts its data or completes.
// Why the data rides along: Gloo moves a message only once the receiver has
// told the sender that its receive is posted. A receive posted when the
// preamble arrives made the sender's event-loop thread wake up to send the
// data, on a core where the sender was computing by then: in a 2-stage
// pipeline on 2 cores, a transfer cost up to a millisecond of waiting. The
// first message's receive is posted when the recv is, usually long before
// the send, so a small send leaves with the preamble, at the cost of a copy
// on each side (docs/BENCHMARKS.md, issue 24), and of memory: each recv
// holds its preamble + kInlineBytes (256 KiB) until it completes, so a
// program with a thousand receives outstanding at once holds 256 MiB.

struct ProcessGroupGloo::RecvGate {
  std::mutex mutex;
  std::condition_variable opened_cv;
  bool opened = false;

  void open() {
    {
      std::lock_guard lock(mutex);
      opened = true;
    }
    opened_cv.notify_all();
  }
  bool wait_open(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    return opened_cv.wait_for(lock, timeout, [&] { return opened; });
  }
};

namespace {

constexpr uint8_t kPreambleSlotPrefix = gloo_backend::kPointToPointSlotPrefix + 1;
constexpr size_t kPreambleBytes = sizeof(CollectiveCall::Words);
// The most data bytes a send's first message carries after its preamble.
constexpr size_t kInlineBytes = size_t{256} << 10;

// The bytes a preamble announces (one per element for a dtype it cannot
// name, which then disagrees with every recv).
size_t announced_bytes(const CollectiveCall& sent) {
  const size_t element_bytes = sent.dtype >= 0 && sent.dtype <= static_cast<int32_t>(DType::Float64)
                                   ? element_size(static_cast<DType>(sent.dtype))
                                   : 1;
  return static_cast<size_t>(sent.elements) * element_bytes;
}

uint64_t preamble_slot(int tag) {
  return (uint64_t{kPreambleSlotPrefix} << 56) | static_cast<uint32_t>(tag);
}

// What a preamble says: the tensor's dtype and element count.
CollectiveCall message_of(const Tensor& t) { return CollectiveCall::make(0, CollectiveKind::Send, t.dtype(), elements(t)); }

}  // namespace

bool ProcessGroupGloo::track(const std::shared_ptr<::gloo::transport::UnboundBuffer>& buffer, bool is_recv) {
  std::lock_guard lock(pending_mutex_);
  if (closing_) return false;
  pending_.insert({buffer.get(), is_recv});
  return true;
}

void ProcessGroupGloo::wait_tracked(const std::shared_ptr<::gloo::transport::UnboundBuffer>& buffer, bool is_recv,
                                    std::chrono::milliseconds timeout, const std::string& name) {
  bool completed = false;
  try {
    completed = is_recv ? buffer->waitRecv(timeout) : buffer->waitSend(timeout);
  } catch (...) {
    std::lock_guard lock(pending_mutex_);
    pending_.erase({buffer.get(), is_recv});
    throw;
  }
  {
    std::lock_guard lock(pending_mutex_);
    pending_.erase({buffer.get(), is_recv});
  }
  KILN_CHECK(completed, "gloo ", name, ": aborted because the group was destroyed before it completed");
}

WorkPtr ProcessGroupGloo::run_send(const Tensor& tensor, int dst, int tag) {
  const std::string name = detail::str("send to rank ", dst, " tag ", tag);
  Tensor host = host_buffer(tensor, true);
  const size_t bytes = host.nbytes();
  const bool inline_data = bytes <= kInlineBytes;
  // The first message (Note [Point-to-point preamble]): the preamble, then
  // the data if it fits.
  Tensor first_message = kiln::empty({static_cast<int64_t>(kPreambleBytes + (inline_data ? bytes : 0))}, DType::UInt8);
  auto* first = static_cast<uint8_t*>(first_message.data_ptr());
  const CollectiveCall::Words words = message_of(tensor).encode();
  std::memcpy(first, words.data(), kPreambleBytes);
  if (inline_data && bytes > 0) std::memcpy(first + kPreambleBytes, host.data_ptr(), bytes);
  std::shared_ptr<::gloo::transport::UnboundBuffer> first_buffer =
      context_->createUnboundBuffer(first, static_cast<size_t>(first_message.nbytes()));
  std::shared_ptr<::gloo::transport::UnboundBuffer> data_buffer;
  if (!inline_data) data_buffer = context_->createUnboundBuffer(host.data_ptr(), bytes);
  // Posted before being tracked: a post that throws (a peer already gone)
  // must leave no pointer to these buffers behind for the destructor.
  post(name, [&] {
    first_buffer->send(dst, preamble_slot(tag));
    if (data_buffer) data_buffer->send(dst, point_to_point_slot(tag));
  });
  track(first_buffer, false);
  if (data_buffer) track(data_buffer, false);
  return point_to_point_->enqueue(name, [this, name, first_message, first_buffer, data_buffer, host,
                                         timeout = timeout()] {
    try {
      wait_tracked(first_buffer, false, timeout, name);
    } catch (...) {
      // The data buffer dies with this operation: the destructor must not
      // find it among the pending buffers and abort a freed one.
      if (data_buffer) {
        std::lock_guard lock(pending_mutex_);
        pending_.erase({data_buffer.get(), false});
      }
      throw;
    }
    if (data_buffer) wait_tracked(data_buffer, false, timeout, name);
  });
}

WorkPtr ProcessGroupGloo::run_recv(const Tensor& tensor, int src, int tag) {
  const std::string name = detail::str("recv from rank ", src, " tag ", tag);
  Tensor host = host_buffer(tensor, false);
  // The first message's receive, for the longest there is (Note [Point-to-point preamble]).
  Tensor first_message = kiln::empty({static_cast<int64_t>(kPreambleBytes + kInlineBytes)}, DType::UInt8);
  std::shared_ptr<::gloo::transport::UnboundBuffer> first_buffer =
      context_->createUnboundBuffer(first_message.data_ptr(), static_cast<size_t>(first_message.nbytes()));
  auto gate = std::make_shared<RecvGate>();
  std::shared_ptr<RecvGate> previous;
  {
    std::lock_guard lock(pending_mutex_);
    std::shared_ptr<RecvGate>& last = last_recv_gate_[{src, tag}];
    previous = std::move(last);
    last = gate;
  }
  try {
    post(name, [&] { first_buffer->recv(src, preamble_slot(tag)); });
  } catch (...) {
    // Nothing will wait on this recv: its successor must not wait for it.
    gate->open();
    std::lock_guard lock(pending_mutex_);
    auto it = last_recv_gate_.find({src, tag});
    if (it != last_recv_gate_.end() && it->second == gate) last_recv_gate_.erase(it);
    throw;
  }
  track(first_buffer, true);
  const CollectiveCall expected = message_of(tensor);
  return point_to_point_->enqueue(name, [this, name, src, tag, first_message, first_buffer, gate, previous, expected,
                                         tensor, host, timeout = timeout()]() mutable {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto remaining = [&] {
      return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                        deadline - std::chrono::steady_clock::now()));
    };
    // Every path out of here opens the gate, and forgets it if it is still
    // the newest for (src, tag).
    struct Release {
      ProcessGroupGloo* group;
      std::shared_ptr<RecvGate> gate;
      std::pair<int, int> key;
      ~Release() {
        gate->open();
        std::lock_guard lock(group->pending_mutex_);
        auto it = group->last_recv_gate_.find(key);
        if (it != group->last_recv_gate_.end() && it->second == gate) group->last_recv_gate_.erase(it);
      }
    } release{this, gate, {src, tag}};

    wait_tracked(first_buffer, true, remaining(), name);
    const auto* first = static_cast<const uint8_t*>(first_message.data_ptr());
    CollectiveCall::Words words;
    std::memcpy(words.data(), first, kPreambleBytes);
    const CollectiveCall sent = CollectiveCall::decode(words);
    KILN_CHECK(!previous || previous->wait_open(remaining()), "gloo ", name,
               ": an earlier recv from the same rank with the same tag did not complete within ", timeout.count(),
               " ms");
    const bool agree = sent.dtype == expected.dtype && sent.elements == expected.elements;
    const size_t sent_bytes = announced_bytes(sent);
    if (sent_bytes <= kInlineBytes) {
      // The data came in the first message: nothing more to receive.
      KILN_CHECK(agree, "gloo ", name, ": rank ", src, " sends ", sent.describe_payload(), " but rank ", rank(),
                 " receives ", expected.describe_payload(), " (Note [Point-to-point preamble]); the data was dropped");
      if (sent_bytes > 0) std::memcpy(host.data_ptr(), first + kPreambleBytes, sent_bytes);
      copy_to_device(tensor, host);
      return;
    }
    // scratch: the sent bytes, received and dropped when the two disagree.
    Tensor scratch;
    Tensor into = host;
    if (!agree) {
      scratch = kiln::empty({static_cast<int64_t>(sent_bytes)}, DType::UInt8);
      into = scratch;
    }
    if (into.numel() > 0) {
      std::shared_ptr<::gloo::transport::UnboundBuffer> data_buffer =
          context_->createUnboundBuffer(into.data_ptr(), into.nbytes());
      KILN_CHECK(track(data_buffer, true), "gloo ", name, ": the group is being destroyed");
      try {
        data_buffer->recv(src, point_to_point_slot(tag));
      } catch (...) {
        std::lock_guard lock(pending_mutex_);
        pending_.erase({data_buffer.get(), true});
        throw;
      }
      release.gate->open();  // the next recv with this tag may post its data now
      wait_tracked(data_buffer, true, remaining(), name);
    }
    KILN_CHECK(agree, "gloo ", name, ": rank ", src, " sends ", sent.describe_payload(), " but rank ", rank(),
               " receives ", expected.describe_payload(), " (Note [Point-to-point preamble]); the data was dropped");
    copy_to_device(tensor, host);
  });
}

// Gloo is part of libkiln: registered when libkiln loads (distributed/backend_registry.h).
namespace {
[[maybe_unused]] const bool gloo_registered = [] {
  register_process_group_backend(
      "gloo", {[](std::shared_ptr<Store> store, int rank, int world_size, ProcessGroupOptions options) {
                 return std::make_shared<ProcessGroupGloo>(std::move(store), rank, world_size, options);
               },
               {}});
  return true;
}();
}  // namespace

}  // namespace kiln::distributed
