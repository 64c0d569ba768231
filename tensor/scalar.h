// Scalar: a number passed to an op (fill value, clamp bound, alpha), kept as
// bool, int64 or double so that integer values stay exact.
#pragma once

#include <cstdint>
#include <ostream>
#include <type_traits>

#include "tensor/dtype.h"

namespace kiln {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() : Scalar(int64_t{0}) {}
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}  // NOLINT: implicit, as numbers are
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}  // NOLINT
  template <class T>
    requires std::is_floating_point_v<T>
  Scalar(T v) : kind_(Kind::Float), d_(static_cast<double>(v)) {}  // NOLINT
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}                 // NOLINT
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}             // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }

  // The value converted to T (16-bit floats round to nearest even).
  template <class T>
  T to() const {
    if (kind_ == Kind::Float) {
      if constexpr (std::is_same_v<T, bool>) return d_ != 0.0;
      else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(d_));
      else return static_cast<T>(d_);
    }
    if constexpr (std::is_same_v<T, bool>) return i_ != 0;
    else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(i_));
    else return static_cast<T>(i_);
  }

  // The dtype a 0-dim tensor holding this value would have.
  DType dtype() const {
    return kind_ == Kind::Float ? DType::Float64 : kind_ == Kind::Int ? DType::Int64 : DType::Bool;
  }

 private:
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

inline std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_floating()) return os << s.to<double>();
  if (s.is_bool()) return os << (s.to<bool>() ? "true" : "false");
  return os << s.to<int64_t>();
}

}  // namespace kiln
