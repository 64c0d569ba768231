// Collate functions: how the examples of one batch become the batch.
//
// Note [Default collate]
// default_collate follows torch.utils.data.default_collate, by type:
//   Tensor                    -> the tensors stacked along a new dim 0: (B, ...); equal shapes
//   bool                      -> a Bool tensor (B,)
//   other integers (int64_t)  -> an Int64 tensor (B,), as torch does for Python ints
//   float, double             -> a Float32, Float64 tensor (B,) (C++ keeps the width it was given)
//   std::string               -> the strings, as they are (a std::vector<std::string>)
//   std::tuple, std::pair,    -> the same structure, each position collated over the
//   std::array                   batch: a vector of (image, label) pairs becomes a pair
//                                (images (B, ...), labels (B,))
//   std::vector<T>            -> a vector of collated positions; every example's vector
//                                must have the same length (torch's rule for lists)
//   std::map<std::string, T>  -> a map of collated values; every example has the same keys
//   data::Example             -> data::Batch: data and target stacked; the target
//                                undefined when the examples have none
// and recursively, so a tuple of (Tensor, std::vector<Tensor>, int64_t) collates too.
// Examples of other types (a struct of your own) have no default: give the
// loader a collate function, any callable Batch(std::vector<Example>), or
// teach default_collate the type by specializing DefaultCollate:
//   template <> struct kiln::data::DefaultCollate<Sample> {
//     static SampleBatch apply(std::vector<Sample> examples);
//   };
//
// Every check names the position in the batch of the example that differs
// ("default_collate: example 3 of the batch has shape [5] but example 0 has
// [4]; make them equal in a collate function (e.g. by padding)"). Collating is
// gradient-free and runs on the loader's worker threads: it calls the raw
// kiln::ops functions, never the autograd ones.
//
//   std::vector<std::pair<Tensor, int64_t>> examples = {{x0, 3}, {x1, 7}};
//   auto [images, labels] = kiln::data::default_collate(std::move(examples));  // (2, ...), (2,)
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "tensor/error.h"
#include "tensor/tensor.h"

namespace kiln::data {

// DefaultCollate<T>::apply(std::vector<T>) collates a batch of T; a type
// without a specialization has no default collate.
template <class T, class = void>
struct DefaultCollate;

// True when default_collate can batch examples of type T.
template <class T>
concept DefaultCollatable = requires(std::vector<T> examples) { DefaultCollate<T>::apply(std::move(examples)); };

// The batch default_collate makes of examples of type T.
template <DefaultCollatable T>
using default_collate_t = decltype(DefaultCollate<T>::apply(std::declval<std::vector<T>>()));

// default_collate is an object, not an overload set, so that it can be
// passed as a collate function and called from one.
struct DefaultCollateFn {
  template <DefaultCollatable T>
  default_collate_t<T> operator()(std::vector<T> examples) const {
    return DefaultCollate<T>::apply(std::move(examples));
  }
};
inline constexpr DefaultCollateFn default_collate{};

// ---- The leaves: tensors, numbers, strings ------------------------------------

template <>
struct DefaultCollate<Tensor> {
  // examples: B tensors of one shape S -> (B, S...)
  static Tensor apply(std::vector<Tensor> examples);
};

template <>
struct DefaultCollate<Example> {
  static Batch apply(std::vector<Example> examples);
};

template <>
struct DefaultCollate<std::string> {
  static std::vector<std::string> apply(std::vector<std::string> examples) { return examples; }
};

namespace collate_detail {
// Throws "default_collate: the batch is empty" for B = 0.
void check_not_empty(size_t batch_size);
Tensor numbers_to_tensor(const std::vector<bool>& values);
Tensor numbers_to_tensor(const std::vector<int64_t>& values);
Tensor numbers_to_tensor(const std::vector<float>& values);
Tensor numbers_to_tensor(const std::vector<double>& values);
}  // namespace collate_detail

template <class T>
struct DefaultCollate<T, std::enable_if_t<std::is_arithmetic_v<T>>> {
  // examples: B numbers -> (B,)
  static Tensor apply(std::vector<T> examples) {
    collate_detail::check_not_empty(examples.size());
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, float> || std::is_same_v<T, double>) {
      return collate_detail::numbers_to_tensor(examples);
    } else if constexpr (std::is_integral_v<T>) {
      return collate_detail::numbers_to_tensor(std::vector<int64_t>(examples.begin(), examples.end()));
    } else {  // long double: float64 is the widest Kiln dtype
      return collate_detail::numbers_to_tensor(std::vector<double>(examples.begin(), examples.end()));
    }
  }
};

// ---- Structures: each position collated over the batch ------------------------

namespace collate_detail {

// Position I of every example (moved out), in batch order.
template <size_t I, class TupleLike>
auto column(std::vector<TupleLike>& examples) {
  std::vector<std::remove_cvref_t<std::tuple_element_t<I, TupleLike>>> out;
  out.reserve(examples.size());
  for (TupleLike& example : examples) out.push_back(std::get<I>(std::move(example)));
  return out;
}

// Result{collate(column 0), collate(column 1), ...}.
template <class Result, class TupleLike, size_t... I>
Result collate_columns(std::vector<TupleLike>& examples, std::index_sequence<I...>) {
  check_not_empty(examples.size());
  return Result{default_collate(column<I>(examples))...};
}

}  // namespace collate_detail

template <DefaultCollatable... T>
struct DefaultCollate<std::tuple<T...>> {
  static std::tuple<default_collate_t<T>...> apply(std::vector<std::tuple<T...>> examples) {
    return collate_detail::collate_columns<std::tuple<default_collate_t<T>...>>(examples,
                                                                               std::index_sequence_for<T...>{});
  }
};

template <DefaultCollatable A, DefaultCollatable B>
struct DefaultCollate<std::pair<A, B>> {
  static std::pair<default_collate_t<A>, default_collate_t<B>> apply(std::vector<std::pair<A, B>> examples) {
    return collate_detail::collate_columns<std::pair<default_collate_t<A>, default_collate_t<B>>>(
        examples, std::make_index_sequence<2>{});
  }
};

template <DefaultCollatable T, size_t N>
struct DefaultCollate<std::array<T, N>> {
  static std::array<default_collate_t<T>, N> apply(std::vector<std::array<T, N>> examples) {
    return collate_detail::collate_columns<std::array<default_collate_t<T>, N>>(examples,
                                                                              std::make_index_sequence<N>{});
  }
};

template <DefaultCollatable T>
struct DefaultCollate<std::vector<T>> {
  // examples: B vectors of L elements -> L collated batches of B
  static std::vector<default_collate_t<T>> apply(std::vector<std::vector<T>> examples) {
    collate_detail::check_not_empty(examples.size());
    const size_t length = examples[0].size();
    for (size_t k = 1; k < examples.size(); ++k) {
      KILN_CHECK(examples[k].size() == length, "default_collate: example ", k, " of the batch is a sequence of ",
                 examples[k].size(), " elements but example 0 has ", length,
                 "; make them equal in a collate function (e.g. by padding)");
    }
    std::vector<default_collate_t<T>> out;
    out.reserve(length);
    for (size_t position = 0; position < length; ++position) {
      std::vector<T> column;
      column.reserve(examples.size());
      for (std::vector<T>& example : examples) column.push_back(std::move(example[position]));
      out.push_back(default_collate(std::move(column)));
    }
    return out;
  }
};

template <DefaultCollatable T>
struct DefaultCollate<std::map<std::string, T>> {
  // examples: B maps with the same keys -> one map of collated values
  static std::map<std::string, default_collate_t<T>> apply(std::vector<std::map<std::string, T>> examples) {
    collate_detail::check_not_empty(examples.size());
    for (size_t k = 1; k < examples.size(); ++k) {
      for (const auto& entry : examples[0]) {
        const std::string& key = entry.first;
        KILN_CHECK(examples[k].count(key) != 0, "default_collate: example ", k, " of the batch has no key '", key,
                   "' but example 0 has");
      }
      for (const auto& entry : examples[k]) {
        const std::string& key = entry.first;
        KILN_CHECK(examples[0].count(key) != 0, "default_collate: example ", k, " of the batch has a key '", key,
                   "' that example 0 has not");
      }
    }
    std::map<std::string, default_collate_t<T>> out;
    for (const auto& entry : examples[0]) {
      const std::string& key = entry.first;
      std::vector<T> column;
      column.reserve(examples.size());
      for (auto& example : examples) column.push_back(std::move(example.at(key)));
      out.emplace(key, default_collate(std::move(column)));
    }
    return out;
  }
};

}  // namespace kiln::data
