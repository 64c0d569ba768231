// Tensor printing, laid out as torch's repr so that output reads the same:
//
//   tensor([[ 1.0000,  2.5000],
//           [-3.0000,  4.0000]], dtype=float32)
//
// One format per tensor, chosen from the elements that are shown: floats in
// fixed notation with 4 decimals, or scientific (1.0000e+10) when the nonzero
// magnitudes are very large, very small or span more than a factor of 1000
// (torch's rule); integers plain; bools True/False. Every element is padded
// to the widest so that columns line up. Tensors with more than 1000
// elements show only the first and last 3 entries of each dim, with "...",
// and their shape. The dtype is always shown, the device when not the CPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace kiln {

namespace {

constexpr int64_t kThreshold = 1000;  // more elements than this are elided
constexpr int64_t kEdgeItems = 3;     // entries kept at each end of an elided dim
constexpr int64_t kLineWidth = 80;

// Where dim `dim` of `t` shows the entry at each position: an index, or -1
// for the "..." that stands for the elided middle.
std::vector<int64_t> shown_indices(const Tensor& t, int64_t dim, bool summarize) {
  int64_t size = t.shape()[dim];
  std::vector<int64_t> indices;
  if (summarize && size > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) indices.push_back(i);
    indices.push_back(-1);
    for (int64_t i = size - kEdgeItems; i < size; ++i) indices.push_back(i);
  } else {
    for (int64_t i = 0; i < size; ++i) indices.push_back(i);
  }
  return indices;
}

// Calls fn(element address) for every element that will be printed.
template <class Fn>
void for_each_shown(const Tensor& t, int64_t dim, const char* base, bool summarize, const Fn& fn) {
  if (dim == t.dim()) {
    fn(base);
    return;
  }
  auto byte_stride = t.strides()[dim] * static_cast<int64_t>(t.element_size());
  for (int64_t i : shown_indices(t, dim, summarize)) {
    if (i >= 0) for_each_shown(t, dim + 1, base + i * byte_stride, summarize, fn);
  }
}

double read_double(const char* p, DType dtype) {
  return visit_dtype(dtype, [&]<class T>() { return static_cast<double>(*reinterpret_cast<const T*>(p)); });
}

int64_t read_int(const char* p, DType dtype) {
  return visit_dtype(dtype, [&]<class T>() {
    if constexpr (std::is_integral_v<T>) return static_cast<int64_t>(*reinterpret_cast<const T*>(p));
    else return int64_t{0};  // only called for integer and bool tensors
  });
}

std::string format_float(double v, bool scientific) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, scientific ? "%.4e" : "%.4f", v);
  return buffer;
}

// Turns one element into its padded text; the mode and width are fixed by
// looking at all shown elements first.
class ElementFormatter {
 public:
  ElementFormatter(const Tensor& t, bool summarize) : dtype_(t.dtype()) {
    std::vector<const char*> shown;
    for_each_shown(t, 0, static_cast<const char*>(t.data_ptr()), summarize,
                   [&](const char* p) { shown.push_back(p); });
    if (is_floating(dtype_)) {
      double lo = INFINITY, hi = 0.0;
      for (const char* p : shown) {
        double v = std::fabs(read_double(p, dtype_));
        if (std::isfinite(v) && v != 0.0) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
      }
      scientific_ = hi > 0.0 && (hi / lo > 1000.0 || hi > 1.0e8 || lo < 1.0e-4);
    }
    for (const char* p : shown) width_ = std::max(width_, raw(p).size());
  }

  size_t width() const { return width_; }

  std::string format(const char* p) const {
    std::string text = raw(p);
    text.insert(0, width_ - text.size(), ' ');
    return text;
  }

 private:
  std::string raw(const char* p) const {
    if (dtype_ == DType::Bool) return *reinterpret_cast<const bool*>(p) ? "True" : "False";
    if (is_floating(dtype_)) return format_float(read_double(p, dtype_), scientific_);
    return std::to_string(read_int(p, dtype_));
  }

  DType dtype_;
  bool scientific_ = false;
  size_t width_ = 0;
};

// The bracketed text of dims [dim, ndim) starting at `base`; `indent` is the
// column of the opening bracket, so continuation lines align under it.
std::string format_dims(const Tensor& t, int64_t dim, const char* base, size_t indent, bool summarize,
                        const ElementFormatter& formatter) {
  auto byte_stride = t.strides()[dim] * static_cast<int64_t>(t.element_size());
  std::vector<int64_t> indices = shown_indices(t, dim, summarize);
  std::string out = "[";
  if (dim == t.dim() - 1) {
    // The innermost dim wraps to the line width, as many entries per line as fit.
    auto per_line = static_cast<size_t>(std::max<int64_t>(
        1, (kLineWidth - static_cast<int64_t>(indent)) / static_cast<int64_t>(formatter.width() + 2)));
    for (size_t k = 0; k < indices.size(); ++k) {
      if (k > 0 && k % per_line == 0) {
        out += ",\n";
        out.append(indent + 1, ' ');
      } else if (k > 0) {
        out += ", ";
      }
      out += indices[k] < 0 ? " ..." : formatter.format(base + indices[k] * byte_stride);
    }
  } else {
    // Blocks of a 3-d tensor are separated by one blank line, of a 4-d by two, ...
    std::string separator = ",";
    separator.append(t.dim() - dim - 1, '\n');
    separator.append(indent + 1, ' ');
    for (size_t k = 0; k < indices.size(); ++k) {
      if (k > 0) out += separator;
      out += indices[k] < 0 ? "..."
                            : format_dims(t, dim + 1, base + indices[k] * byte_stride, indent + 1, summarize,
                                          formatter);
    }
  }
  return out + "]";
}

// Appends ", suffix" per suffix, starting a new line when one would pass the
// line width.
void add_suffixes(std::string& text, const std::vector<std::string>& suffixes, size_t indent) {
  size_t newline = text.rfind('\n');
  size_t line_length = newline == std::string::npos ? text.size() : text.size() - newline - 1;
  for (const std::string& suffix : suffixes) {
    if (line_length + suffix.size() + 2 > static_cast<size_t>(kLineWidth)) {
      text += ",\n";
      text.append(indent, ' ');
      text += suffix;
      line_length = indent + suffix.size();
    } else {
      text += ", ";
      text += suffix;
      line_length += suffix.size() + 2;
    }
  }
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  Tensor host = device().is_cpu() ? *this : cpu();
  bool summarize = host.numel() > kThreshold;

  std::vector<std::string> suffixes;
  if (!device().is_cpu()) suffixes.push_back(detail::str("device='", device().str(), "'"));
  // A 1-d empty tensor is fully described by "[]"; other empty shapes are not.
  if ((host.numel() == 0 && host.dim() != 1) || summarize) suffixes.push_back(detail::str("size=", host.shape()));
  suffixes.push_back(detail::str("dtype=", dtype_name(host.dtype())));

  std::string text = prefix;
  if (host.numel() == 0) {
    text += "[]";
  } else {
    ElementFormatter formatter(host, summarize);
    const char* base = static_cast<const char*>(host.data_ptr());
    text += host.dim() == 0 ? formatter.format(base)
                            : format_dims(host, 0, base, prefix.size(), summarize, formatter);
  }
  add_suffixes(text, suffixes, prefix.size());
  return text + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln
