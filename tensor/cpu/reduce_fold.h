// Fold<Op, T>: how a reduction op combines elements of type T, and in which
// types it accumulates (the backend contract in tensor/backend.h).
//
//   type     op        Acc (in a block)  Total (across blocks)  Out
//   float    Sum       float             double                 float
//   16-bit   Sum       float             double                 16-bit
//   double   Sum/Prod  double            double                 double
//   float    Prod      double            double                 float
//   integer  Sum/Prod  int64             int64                  int64
//   any      Max/Min   ComputeType<T>    ComputeType<T>         T
//
// Max and Min propagate NaN: once a NaN is seen it wins, as torch.max.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "tensor/backend.h"
#include "tensor/dtype.h"

namespace kiln::cpu {

template <class T>
inline constexpr bool kIsFloatingType =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <ReduceOp Op, class T>
struct Fold {
  using Value = ComputeType<T>;
  static constexpr bool kArithmetic = Op == ReduceOp::Sum || Op == ReduceOp::Prod;
  static constexpr bool kFloating = kIsFloatingType<T>;

  using Acc = std::conditional_t<
      kArithmetic,
      std::conditional_t<kFloating, std::conditional_t<Op == ReduceOp::Sum, Value, double>, int64_t>, Value>;
  using Total = std::conditional_t<kArithmetic, std::conditional_t<kFloating, double, int64_t>, Value>;
  using Out = std::conditional_t<kArithmetic && !kFloating, int64_t, T>;

  template <class A>
  static A identity() {
    if constexpr (Op == ReduceOp::Sum) {
      return A(0);
    } else if constexpr (Op == ReduceOp::Prod) {
      return A(1);
    } else if constexpr (std::is_floating_point_v<A>) {
      return Op == ReduceOp::Max ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    } else {
      return Op == ReduceOp::Max ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
    }
  }

  // a combined with one more element or partial result b.
  template <class A, class B>
  static A step(A a, B b) {
    if constexpr (Op == ReduceOp::Sum) {
      return static_cast<A>(a + b);
    } else if constexpr (Op == ReduceOp::Prod) {
      return static_cast<A>(a * b);
    } else {
      A v = static_cast<A>(b);
      bool wins = Op == ReduceOp::Max ? v > a : v < a;
      if constexpr (std::is_floating_point_v<A>) wins = wins || v != v;  // NaN wins
      return wins ? v : a;
    }
  }

  template <class A>
  static A merge(A a, A b) {
    return step(a, b);
  }

  static Out to_out(Total t) {
    if constexpr (std::is_same_v<Out, Half> || std::is_same_v<Out, BFloat16>) {
      return Out(static_cast<float>(t));
    } else {
      return static_cast<Out>(t);
    }
  }
};

}  // namespace kiln::cpu
