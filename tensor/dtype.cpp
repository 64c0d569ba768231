#include "tensor/dtype.h"

namespace kiln {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "invalid";
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << dtype_name(dtype); }

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return 1;
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
  }
  KILN_FAIL("element_size: invalid dtype code ", static_cast<int>(dtype));
}

bool is_floating(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32 ||
         dtype == DType::Float64;
}

bool is_integral(DType dtype) {
  return dtype == DType::UInt8 || dtype == DType::Int8 || dtype == DType::Int32 || dtype == DType::Int64;
}

bool is_signed(DType dtype) { return dtype != DType::Bool && dtype != DType::UInt8; }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // The two pairs whose promotion is not simply "the later one in DType order".
  auto is_pair = [&](DType x, DType y) { return (a == x && b == y) || (a == y && b == x); };
  if (is_pair(DType::UInt8, DType::Int8)) return DType::Int32;  // torch gives int16, which Kiln lacks
  if (is_pair(DType::Float16, DType::BFloat16)) return DType::Float32;
  return static_cast<uint8_t>(a) > static_cast<uint8_t>(b) ? a : b;
}

}  // namespace kiln
