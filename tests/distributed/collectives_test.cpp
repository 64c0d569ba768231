// Every collective of ProcessGroup, on every backend this build has, in
// worlds of 2, 3 and 4 processes, against values computed by hand: rank r
// contributes a pattern of small integers in r and the element index, so
// that sums, maxima, minima and products are exact in every dtype (float16
// and bfloat16 included) and a result can be compared with ==.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "multi_process.h"
#include "store_test_util.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace kiln::distributed::testing {
namespace {

constexpr auto kTimeout = std::chrono::seconds(10);

// ---- which backends run -----------------------------------------------------------

struct BackendCase {
  const char* name;
  Launcher launcher;
};

// One line per backend the build has.
std::vector<BackendCase> backends_under_test() {
  std::vector<BackendCase> backends;
#ifdef KILN_WITH_GLOO
  backends.push_back({"gloo", Launcher::Exec});
#endif
#ifdef KILN_WITH_MPI
  backends.push_back({"mpi", Launcher::Mpirun});
#endif
  return backends;
}

struct CollectiveCase {
  BackendCase backend;
  int world_size;
};

// How gtest prints a case in failure messages.
void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.name; }
void PrintTo(const CollectiveCase& c, std::ostream* os) { *os << c.backend.name << ", " << c.world_size << " ranks"; }

std::vector<CollectiveCase> collective_cases() {
  std::vector<CollectiveCase> cases;
  for (const BackendCase& backend : backends_under_test()) {
    for (int world_size : {2, 3, 4}) cases.push_back({backend, world_size});
  }
  return cases;
}

// ---- values ------------------------------------------------------------------------------

Tensor make(const std::vector<double>& values, DType dtype, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  return from_vector<double>(values, shape).to(dtype);
}

std::vector<double> values_of(const Tensor& t) {
  Tensor d = t.to(DType::Float64).contiguous();
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

std::vector<double> pattern(int64_t n, const std::function<double(int64_t)>& f) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(f(i));
  return v;
}

bool is_unsigned(DType dtype) { return dtype == DType::UInt8 || dtype == DType::Bool; }

// Rank r's element i for `op`: products stay in {1, 2} (16 at most over
// four ranks), the others are +-(2(r+1) + i%3) (|sum| <= 28 over four ranks,
// exact in int8 and bfloat16).
double contribution(int rank, int64_t i, DType dtype, ReduceOp op) {
  if (op == ReduceOp::Product) return 1 + (rank + i) % 2;
  const double magnitude = 2 * (rank + 1) + i % 3;
  return (i % 4 == 3 && !is_unsigned(dtype)) ? -magnitude : magnitude;
}

double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::Sum:
      return a + b;
    case ReduceOp::Product:
      return a * b;
    case ReduceOp::Max:
      return std::max(a, b);
    case ReduceOp::Min:
      return std::min(a, b);
    case ReduceOp::Avg:
      break;
  }
  ADD_FAILURE() << "combine: no rule for " << reduce_op_name(op);
  return 0;
}

std::vector<double> reduced(int size, int64_t n, DType dtype, ReduceOp op) {
  return pattern(n, [&](int64_t i) {
    double result = contribution(0, i, dtype, op);
    for (int r = 1; r < size; ++r) result = combine(op, result, contribution(r, i, dtype, op));
    return result;
  });
}

const std::vector<DType> kAllDTypes = {DType::Float32, DType::Float64, DType::Int32,   DType::Int64,
                                       DType::Int8,    DType::UInt8,   DType::Float16, DType::BFloat16};
const std::vector<DType> kFloatDTypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

// ---- the fixture ----------------------------------------------------------------------------

class Collectives : public ::testing::TestWithParam<CollectiveCase> {
 protected:
  // Runs body(group, rank, size) on every rank of a fresh world group.
  void run(const std::function<void(ProcessGroup&, int, int)>& body) {
    const CollectiveCase c = GetParam();
    RankOptions options;
    options.launcher = c.backend.launcher;
    run_on_ranks(
        c.world_size,
        [&](int rank) {
          std::shared_ptr<ProcessGroup> group = make_test_group(c.backend.name, kTimeout);
          ASSERT_EQ(group->size(), c.world_size);
          ASSERT_EQ(group->rank(), rank);
          body(*group, rank, group->size());
        },
        options);
  }
};

TEST_P(Collectives, AllReduceEveryOpAndDTypeIssuedBeforeAnyWait) {
  run([](ProcessGroup& group, int rank, int size) {
    const int64_t n = 7;
    struct Case {
      DType dtype;
      ReduceOp op;
      Tensor tensor;
      WorkPtr work;
    };
    std::vector<Case> cases;
    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product}) {
        Tensor t = make(pattern(n, [&](int64_t i) { return contribution(rank, i, dtype, op); }), dtype);
        cases.push_back({dtype, op, t, group.all_reduce(t, op)});
      }
    }
    // bool: max is logical or, min logical and. Element i is true on rank r
    // iff bit r of i is set, so i = 0 is false everywhere, 2^size-1 true everywhere.
    const int64_t bools = int64_t{1} << size;
    auto bits = [&](int r) { return pattern(bools, [&](int64_t i) { return double((i >> r) & 1); }); };
    Tensor any = make(bits(rank), DType::Bool);
    Tensor all = make(bits(rank), DType::Bool);
    WorkPtr any_work = group.all_reduce(any, ReduceOp::Max);
    WorkPtr all_work = group.all_reduce(all, ReduceOp::Min);
    // Avg: rank r holds size*(r+1) + size*i, so the average is an integer.
    std::vector<Tensor> averages;
    std::vector<WorkPtr> average_works;
    for (DType dtype : kFloatDTypes) {
      averages.push_back(make(pattern(n, [&](int64_t i) { return double(size * (rank + 1) + size * i); }), dtype));
      average_works.push_back(group.all_reduce(averages.back(), ReduceOp::Avg));
    }
    // A transposed (non-contiguous) tensor: the sum must reach its storage.
    Tensor base = make(pattern(12, [&](int64_t i) { return double(rank + i); }), DType::Float32, {3, 4});
    WorkPtr transposed_work = group.all_reduce(base.t());
    // Large enough for gloo's ring to cut each rank's chunk into segments.
    const int64_t large = 300000;
    Tensor big = make(pattern(large, [&](int64_t i) { return double(rank + i % 5); }), DType::Float32);
    WorkPtr big_work = group.all_reduce(big);

    for (Case& c : cases) {
      c.work->wait();
      EXPECT_EQ(values_of(c.tensor), reduced(size, n, c.dtype, c.op))
          << dtype_name(c.dtype) << " " << reduce_op_name(c.op);
      EXPECT_TRUE(c.work->is_completed());
    }
    any_work->wait();
    all_work->wait();
    EXPECT_EQ(values_of(any), pattern(bools, [](int64_t i) { return double(i != 0); }));
    EXPECT_EQ(values_of(all), pattern(bools, [&](int64_t i) { return double(i == bools - 1); }));
    const double rank_sum = size * (size + 1) / 2.0;
    for (size_t k = 0; k < averages.size(); ++k) {
      average_works[k]->wait();
      EXPECT_EQ(values_of(averages[k]), pattern(n, [&](int64_t i) { return rank_sum + size * i; }))
          << "avg " << dtype_name(averages[k].dtype());
    }
    transposed_work->wait();
    const double rank_total = size * (size - 1) / 2.0;
    EXPECT_EQ(values_of(base), pattern(12, [&](int64_t i) { return rank_total + size * i; }));
    big_work->wait();
    const std::vector<double> got = values_of(big);
    int64_t wrong = 0;
    for (int64_t i = 0; i < large; ++i) wrong += got[i] != rank_total + size * (i % 5);
    EXPECT_EQ(wrong, 0) << "of " << large << " elements";
  });
}

TEST_P(Collectives, QueuedCollectivesRunInTheOrderIssued) {
  run([](ProcessGroup& group, int rank, int size) {
    Tensor t = full({5}, 1.0, DType::Float64);
    Tensor b = full({2}, double(rank), DType::Int64);
    // Three sums of the same tensor with a broadcast between them: each must
    // see the previous one's result.
    std::vector<WorkPtr> works = {group.all_reduce(t), group.all_reduce(t), group.broadcast(b, size - 1),
                                  group.all_reduce(t)};
    works.back()->wait();
    for (const WorkPtr& w : works) {
      w->wait();
      EXPECT_TRUE(w->is_completed());
      EXPECT_EQ(w->exception(), nullptr);
    }
    const double cubed = double(size) * size * size;
    EXPECT_EQ(values_of(t), std::vector<double>(5, cubed));
    EXPECT_EQ(values_of(b), std::vector<double>(2, size - 1));
    group.barrier()->wait();
  });
}

TEST_P(Collectives, BroadcastAndReduceFromEveryRoot) {
  run([](ProcessGroup& group, int rank, int size) {
    for (int root = 0; root < size; ++root) {
      Tensor b = rank == root ? make(pattern(6, [&](int64_t i) { return double(root * 10 + i); }), DType::Int64)
                              : full({6}, -1.0, DType::Int64);
      group.broadcast(b, root)->wait();
      EXPECT_EQ(values_of(b), pattern(6, [&](int64_t i) { return double(root * 10 + i); })) << "root " << root;

      // Every other element of a tensor: only those are broadcast.
      Tensor base = full({10}, -5.0, DType::Float32);
      Tensor strided = base.slice(0, 0, 10, 2);
      if (rank == root) strided.copy_(make(pattern(5, [&](int64_t i) { return double(root + i); }), DType::Float32));
      group.broadcast(strided, root)->wait();
      EXPECT_EQ(values_of(base), pattern(10, [&](int64_t i) { return i % 2 ? -5.0 : double(root + i / 2); }));

      // Sum and max reach the root; every other rank's tensor is unchanged.
      Tensor sum = make(pattern(4, [&](int64_t i) { return double(rank + 1 + i); }), DType::Float64);
      Tensor max = make(pattern(4, [&](int64_t i) { return double((rank + i) % size); }), DType::Float16);
      Tensor avg = make(pattern(4, [&](int64_t i) { return double(size * rank + size * i); }), DType::Float32);
      WorkPtr sum_work = group.reduce(sum, root);
      WorkPtr max_work = group.reduce(max, root, ReduceOp::Max);
      WorkPtr avg_work = group.reduce(avg, root, ReduceOp::Avg);
      sum_work->wait();
      max_work->wait();
      avg_work->wait();
      if (rank == root) {
        EXPECT_EQ(values_of(sum), pattern(4, [&](int64_t i) { return size * (size + 1) / 2.0 + size * i; }));
        EXPECT_EQ(values_of(max), std::vector<double>(4, size - 1));
        EXPECT_EQ(values_of(avg), pattern(4, [&](int64_t i) { return size * (size - 1) / 2.0 + size * i; }));
      } else {
        EXPECT_EQ(values_of(sum), pattern(4, [&](int64_t i) { return double(rank + 1 + i); }));
        EXPECT_EQ(values_of(max), pattern(4, [&](int64_t i) { return double((rank + i) % size); }));
        EXPECT_EQ(values_of(avg), pattern(4, [&](int64_t i) { return double(size * rank + size * i); }));
      }
    }
  });
}

TEST_P(Collectives, GatherFamily) {
  run([](ProcessGroup& group, int rank, int size) {
    // Rank r's element i is 10r + i: exact in bfloat16 for four ranks.
    auto of_rank = [](int r, int64_t n) { return pattern(n, [&](int64_t i) { return double(10 * r + i); }); };
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      Tensor input = make(of_rank(rank, 3), dtype);
      std::vector<Tensor> outputs;
      for (int r = 0; r < size; ++r) outputs.push_back(full({3}, -1.0, dtype));
      group.all_gather(outputs, input)->wait();
      for (int r = 0; r < size; ++r) EXPECT_EQ(values_of(outputs[r]), of_rank(r, 3)) << dtype_name(dtype);
    }

    // Outputs that are columns of one matrix (strided), from an input that
    // is a transposed matrix: rank r's input is [[10r, 10r+3], [10r+1, 10r+4],
    // [10r+2, 10r+5]] and lands in column r.
    Tensor grid = zeros({6, size}, DType::Int32);
    std::vector<Tensor> columns;
    for (int r = 0; r < size; ++r) columns.push_back(grid.select(1, r).view({3, 2}));
    Tensor transposed = make(of_rank(rank, 6), DType::Int32, {2, 3}).t();
    group.all_gather(columns, transposed)->wait();
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(values_of(grid.select(1, r)),
                (std::vector<double>{10. * r, 10. * r + 3, 10. * r + 1, 10. * r + 4, 10. * r + 2, 10. * r + 5}));
    }

    // Into one tensor: (size, 3), rank r's input in row r.
    Tensor gathered = full({size, 3}, -1.0, DType::Int64);
    group.all_gather_into_tensor(gathered, make(of_rank(rank, 3), DType::Int64))->wait();
    std::vector<double> expected;
    for (int r = 0; r < size; ++r) {
      for (double v : of_rank(r, 3)) expected.push_back(v);
    }
    EXPECT_EQ(values_of(gathered), expected);

    // Gather to the last rank only.
    const int root = size - 1;
    std::vector<Tensor> at_root;
    if (rank == root) {
      for (int r = 0; r < size; ++r) at_root.push_back(full({2}, -1.0, DType::Float64));
    }
    group.gather(at_root, make(of_rank(rank, 2), DType::Float64), root)->wait();
    for (int r = 0; r < static_cast<int>(at_root.size()); ++r) EXPECT_EQ(values_of(at_root[r]), of_rank(r, 2));

    // Scatter from rank 0: rank r receives -(10r + i), into a strided output.
    std::vector<Tensor> pieces;
    if (rank == 0) {
      for (int r = 0; r < size; ++r) {
        pieces.push_back(make(pattern(3, [&](int64_t i) { return -(10.0 * r + i); }), DType::Int8));
      }
    }
    Tensor received_base = full({6}, 7.0, DType::Int8);
    group.scatter(received_base.slice(0, 1, 6, 2), pieces, 0)->wait();
    EXPECT_EQ(values_of(received_base),
              (std::vector<double>{7, -10.0 * rank, 7, -10.0 * rank - 1, 7, -10.0 * rank - 2}));
  });
}

TEST_P(Collectives, ReduceScatterAndAllToAll) {
  run([](ProcessGroup& group, int rank, int size) {
    // input element j on rank r: (r+1)(j+1); rank `rank` receives elements
    // rank*n .. rank*n+n-1 reduced: S(j+1) for the sum (S = 1+...+size),
    // size(j+1) for the max, S(j+1)/size for the average.
    const int64_t n = 5;
    const double s = size * (size + 1) / 2.0;
    auto input_of = [&](DType dtype) {
      return make(pattern(size * n, [&](int64_t j) { return double((rank + 1) * (j + 1)); }), dtype);
    };
    auto mine = [&](const std::function<double(int64_t j)>& f) {
      return pattern(n, [&](int64_t i) { return f(rank * n + i); });
    };
    for (DType dtype : {DType::Float64, DType::Int32, DType::BFloat16}) {
      Tensor sum = full({n}, -1.0, dtype);
      Tensor max = full({n}, -1.0, dtype);
      WorkPtr sum_work = group.reduce_scatter_tensor(sum, input_of(dtype));
      WorkPtr max_work = group.reduce_scatter_tensor(max, input_of(dtype), ReduceOp::Max);
      sum_work->wait();
      max_work->wait();
      EXPECT_EQ(values_of(sum), mine([&](int64_t j) { return s * (j + 1); })) << dtype_name(dtype);
      EXPECT_EQ(values_of(max), mine([&](int64_t j) { return double(size * (j + 1)); })) << dtype_name(dtype);
    }
    Tensor avg = full({n}, -1.0, DType::Float32);
    Tensor avg_input =
        make(pattern(size * n, [&](int64_t j) { return double(size * (rank + 1) * (j + 1)); }), DType::Float32);
    group.reduce_scatter_tensor(avg, avg_input, ReduceOp::Avg)->wait();
    EXPECT_EQ(values_of(avg), mine([&](int64_t j) { return s * (j + 1); }));

    // The list form, into a transposed (non-contiguous) output: inputs[k] on
    // rank r is (r+1) * (10k + [0 1; 2 3]).
    std::vector<Tensor> inputs;
    for (int k = 0; k < size; ++k) {
      inputs.push_back(
          make(pattern(4, [&](int64_t i) { return double((rank + 1) * (10 * k + i)); }), DType::Float64, {2, 2}));
    }
    Tensor output_base = zeros({2, 2}, DType::Float64);
    group.reduce_scatter(output_base.t(), inputs)->wait();
    // output.t()[a][b] = S * (10 rank + 2a + b), so output_base[b][a] holds it.
    EXPECT_EQ(values_of(output_base), (std::vector<double>{s * (10 * rank + 0), s * (10 * rank + 2),
                                                           s * (10 * rank + 1), s * (10 * rank + 3)}));

    // Large chunks through the ring.
    const int64_t large = 20000;
    Tensor big_input = make(pattern(size * large, [&](int64_t j) { return double(rank + j % 7); }), DType::Float32);
    Tensor big = zeros({large}, DType::Float32);
    group.reduce_scatter_tensor(big, big_input)->wait();
    const std::vector<double> got = values_of(big);
    int64_t wrong = 0;
    for (int64_t i = 0; i < large; ++i) {
      wrong += got[i] != size * (size - 1) / 2.0 + size * ((rank * large + i) % 7);
    }
    EXPECT_EQ(wrong, 0) << "of " << large << " elements";

    // all_to_all: inputs[k] on rank r is 100r + 10k + i; outputs[k] on rank r
    // receives rank k's inputs[r], 100k + 10r + i.
    std::vector<Tensor> sends, receives;
    for (int k = 0; k < size; ++k) {
      sends.push_back(make(pattern(3, [&](int64_t i) { return double(100 * rank + 10 * k + i); }), DType::Int64));
      receives.push_back(full({3}, -1.0, DType::Int64));
    }
    group.all_to_all(receives, sends)->wait();
    for (int k = 0; k < size; ++k) {
      EXPECT_EQ(values_of(receives[k]), pattern(3, [&](int64_t i) { return double(100 * k + 10 * rank + i); }));
    }
  });
}

TEST_P(Collectives, SendAndRecv) {
  run([](ProcessGroup& group, int rank, int size) {
    const int next = (rank + 1) % size;
    const int previous = (rank + size - 1) % size;
    auto from = [](int r, double offset) { return pattern(4, [&](int64_t i) { return 10.0 * r + i + offset; }); };

    // Every rank sends, then receives, before waiting for either: a send
    // that held up the receive behind it would deadlock the ring.
    Tensor out = make(from(rank, 0), DType::Float32);
    Tensor in = full({4}, -1.0, DType::Float32);
    WorkPtr send_work = group.isend(out, next, 3);
    WorkPtr recv_work = group.irecv(in, previous, 3);
    send_work->wait();
    recv_work->wait();
    EXPECT_TRUE(send_work->is_completed());
    EXPECT_EQ(values_of(in), from(previous, 0));

    // Two tags to the same peer, received in the other order.
    Tensor first = make(from(rank, 100), DType::Int64);
    Tensor second = make(from(rank, 200), DType::Int64);
    Tensor got_second = zeros({4}, DType::Int64);
    Tensor got_first = zeros({4}, DType::Int64);
    std::vector<WorkPtr> works = {group.isend(first, next, 1), group.isend(second, next, 2),
                                  group.irecv(got_second, previous, 2), group.irecv(got_first, previous, 1)};
    for (const WorkPtr& w : works) w->wait();
    EXPECT_EQ(values_of(got_first), from(previous, 100));
    EXPECT_EQ(values_of(got_second), from(previous, 200));

    // Sizes either side of the gloo backend's 256 KiB that ride in a send's
    // first message (Note [Point-to-point preamble]), on one tag: each
    // arrives whole, in order.
    const std::vector<int64_t> sizes = {3, 100000, 0, 70000, 5, 65536, 65537, 1};
    std::vector<Tensor> outs, ins;
    std::vector<WorkPtr> mixed;
    for (size_t k = 0; k < sizes.size(); ++k) {
      outs.push_back(full({sizes[k]}, 1000.0 * double(k) + rank, DType::Float32));
      ins.push_back(full({sizes[k]}, -1.0, DType::Float32));
      mixed.push_back(group.irecv(ins.back(), previous, 5));
    }
    for (const Tensor& o : outs) mixed.push_back(group.isend(o, next, 5));
    for (const WorkPtr& w : mixed) w->wait();
    for (size_t k = 0; k < sizes.size(); ++k) {
      if (sizes[k] == 0) continue;
      const double want = 1000.0 * double(k) + previous;
      EXPECT_EQ(ins[k].min().item<double>(), want) << "message " << k << " of " << sizes[k] << " elements";
      EXPECT_EQ(ins[k].max().item<double>(), want) << "message " << k << " of " << sizes[k] << " elements";
    }

    // Blocking calls, into a strided tensor: even ranks send first.
    Tensor strided_base = full({8}, -1.0, DType::Float64);
    Tensor strided = strided_base.slice(0, 0, 8, 2);
    if (rank % 2 == 0) {
      group.send(make(from(rank, 0), DType::Float64), next);
      group.recv(strided, previous);
    } else {
      group.recv(strided, previous);
      group.send(make(from(rank, 0), DType::Float64), next);
    }
    const std::vector<double> p = from(previous, 0);
    EXPECT_EQ(values_of(strided_base), (std::vector<double>{p[0], -1, p[1], -1, p[2], -1, p[3], -1}));

    // A recv posted before a collective, matched after it: the collective
    // must not wait for it.
    Tensor early = zeros({4}, DType::Float32);
    WorkPtr early_work;
    if (rank == 0) early_work = group.irecv(early, 1, 9);
    Tensor t = full({1}, 1.0, DType::Float32);
    group.all_reduce(t)->wait();
    EXPECT_EQ(values_of(t), std::vector<double>{double(size)});
    if (rank == 1) group.send(make(from(1, 7), DType::Float32), 0, 9);
    if (rank == 0) {
      early_work->wait();
      EXPECT_EQ(values_of(early), from(1, 7));
    }
  });
}

TEST_P(Collectives, SubGroups) {
  if (GetParam().world_size < 3) GTEST_SKIP() << "sub-groups of ranks {0, 2} need at least 3 ranks";
  run([](ProcessGroup& group, int rank, int size) {
    ProcessGroupOptions options;
    options.timeout = kTimeout;
    std::shared_ptr<ProcessGroup> even = group.new_subgroup({0, 2}, options);
    std::shared_ptr<ProcessGroup> tail = group.new_subgroup({1, size - 1}, options);
    if (rank == 0 || rank == 2) {
      ASSERT_NE(even, nullptr);
      EXPECT_EQ(even->size(), 2);
      EXPECT_EQ(even->rank(), rank / 2);
      EXPECT_EQ(even->global_rank(1), 2);
      Tensor t = full({3}, double(rank + 1), DType::Float32);
      even->all_reduce(t)->wait();
      EXPECT_EQ(values_of(t), std::vector<double>(3, 4.0));  // ranks 0 and 2: 1 + 3
      Tensor b = full({2}, double(rank), DType::Int64);
      even->broadcast(b, 1)->wait();
      EXPECT_EQ(values_of(b), std::vector<double>(2, 2.0));
    } else {
      EXPECT_EQ(even, nullptr) << "rank " << rank << " is not in {0, 2}";
    }
    if (rank == 1 || rank == size - 1) {
      ASSERT_NE(tail, nullptr);
      Tensor t = full({2}, double(rank), DType::Int32);
      tail->all_reduce(t, ReduceOp::Max)->wait();
      EXPECT_EQ(values_of(t), std::vector<double>(2, size - 1.0));
    } else {
      EXPECT_EQ(tail, nullptr);
    }
    // The world group still works after its sub-groups did.
    Tensor w = full({1}, 1.0, DType::Float64);
    group.all_reduce(w)->wait();
    EXPECT_EQ(values_of(w), std::vector<double>{double(size)});
  });
}

std::string collective_case_name(const ::testing::TestParamInfo<CollectiveCase>& info) {
  return std::string(info.param.backend.name) + "_" + std::to_string(info.param.world_size);
}

INSTANTIATE_TEST_SUITE_P(Backends, Collectives, ::testing::ValuesIn(collective_cases()), collective_case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Collectives);

// ---- front-end argument errors: the same on every backend -----------------------------------

class CollectiveErrors : public ::testing::TestWithParam<BackendCase> {};

TEST_P(CollectiveErrors, BadArgumentsAreRejectedBeforeAnyCommunication) {
  RankOptions options;
  options.launcher = GetParam().launcher;
  const std::string backend = GetParam().name;
  run_on_ranks(
      2,
      [&](int rank) {
        std::shared_ptr<ProcessGroup> group = make_test_group(backend, kTimeout);
        Tensor x = zeros({2}, DType::Float32);
        EXPECT_EQ(error_of([&] { group->all_gather({zeros({2}, DType::Float32)}, x); }),
                  "all_gather: outputs holds 1 tensors but the group has 2 ranks");
        EXPECT_EQ(error_of([&] {
                    group->all_gather({zeros({2}, DType::Float64), zeros({2}, DType::Float64)}, x);
                  }),
                  "all_gather: outputs[0] has dtype float64 but the input has float32");
        EXPECT_EQ(error_of([&] { group->broadcast(x, 2); }), "broadcast: root 2 is outside group 'default' of size 2");
        EXPECT_EQ(error_of([&] { group->reduce(x, -1); }), "reduce: root -1 is outside group 'default' of size 2");
        EXPECT_EQ(
            error_of([&] { group->reduce_scatter_tensor(zeros({2}, DType::Float32), zeros({3}, DType::Float32)); }),
            "reduce_scatter_tensor: the input has 3 elements but must have 2 x 2 = 4 (group size x output "
            "elements)");
        EXPECT_EQ(error_of([&] { group->all_reduce(zeros({2}, DType::Int32), ReduceOp::Avg); }),
                  "all_reduce: ReduceOp avg needs a floating-point tensor, got int32");
        EXPECT_EQ(error_of([&] { group->send(x, rank); }),
                  "send: destination rank " + std::to_string(rank) +
                      " must be another rank of group 'default' (size 2, this rank " + std::to_string(rank) + ")");
        // Nothing was sent, so the group is still in step.
        Tensor t = full({2}, 1.0, DType::Float32);
        group->all_reduce(t)->wait();
        EXPECT_EQ(values_of(t), std::vector<double>(2, 2.0));
        EXPECT_EQ(group->sequence_number(), 1u);
      },
      options);
}

std::string backend_case_name(const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Backends, CollectiveErrors, ::testing::ValuesIn(backends_under_test()), backend_case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CollectiveErrors);

}  // namespace
}  // namespace kiln::distributed::testing
