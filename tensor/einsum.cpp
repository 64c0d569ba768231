// einsum: the equation parsed and checked, every operand lined up on one
// list of dims, then the operands contracted left to right with the
// caller's arithmetic (Note [Einsum by composition] in tensor/einsum.h).
#include "tensor/einsum.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <string>

#include "tensor/elementwise.h"
#include "tensor/linalg.h"
#include "tensor/reduce.h"

namespace kiln::ops {
namespace {

constexpr int kLetters = 52;
constexpr int kEllipsis = -1;  // "..." in a term's list of subscripts

// 'A'..'Z' -> 0..25, 'a'..'z' -> 26..51 (so ascending labels are ASCII
// order, as torch sorts the implicit output), anything else -> -1.
int label_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -1;
}

char letter_of(int label) { return static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26)); }

struct Equation {
  std::vector<std::vector<int>> terms;     // per operand: labels and kEllipsis, in order
  std::optional<std::vector<int>> output;  // after "->"
};

// Appends the subscripts of equation[begin, end) to `terms` (a new term at
// each comma, which only the inputs may have); spaces are skipped.
void read_terms(std::string_view equation, size_t begin, size_t end, bool output,
                std::vector<std::vector<int>>& terms) {
  terms.emplace_back();
  bool ellipsis = false;
  auto whose = [&] { return output ? std::string("the output") : "operand " + std::to_string(terms.size() - 1); };
  for (size_t i = begin; i < end; ++i) {
    const char c = equation[i];
    if (c == ' ') continue;
    if (c == ',' && !output) {
      terms.emplace_back();
      ellipsis = false;
      continue;
    }
    if (c == '.') {
      KILN_CHECK(!ellipsis, "einsum: found '.' at index ", i, " of '", equation, "' in the term of ", whose(),
                 ", which already has an ellipsis (...)");
      KILN_CHECK(i + 2 < end && equation[i + 1] == '.' && equation[i + 2] == '.', "einsum: found '.' at index ", i,
                 " of '", equation, "' in the term of ", whose(), " that is not part of an ellipsis (...)");
      i += 2;
      terms.back().push_back(kEllipsis);
      ellipsis = true;
      continue;
    }
    const int label = label_of(c);
    KILN_CHECK(label >= 0, "einsum: invalid subscript '", c, "' at index ", i, " of '", equation,
               "'; subscripts must be letters in [a-zA-Z]");
    terms.back().push_back(label);
  }
}

Equation parse(std::string_view equation) {
  Equation eq;
  const size_t arrow = equation.find("->");
  read_terms(equation, 0, std::min(arrow, equation.size()), /*output=*/false, eq.terms);
  if (arrow != std::string_view::npos) {
    std::vector<std::vector<int>> out;
    read_terms(equation, arrow + 2, equation.size(), /*output=*/true, out);
    eq.output = std::move(out[0]);
  }
  return eq;
}

// t without the dims marked in `remove`: summed where their size is not 1,
// dropped where it is.
Tensor remove_dims(const Tensor& t, const std::vector<bool>& remove, const EinsumArithmetic& arithmetic) {
  Shape summed, kept_shape;
  for (int64_t k = 0; k < t.dim(); ++k) {
    if (!remove[k]) {
      kept_shape.push_back(t.size(k));
    } else if (t.size(k) != 1) {
      summed.push_back(k);
    }
  }
  if (static_cast<int64_t>(kept_shape.size()) == t.dim()) return t;
  Tensor r = summed.empty() ? t : arithmetic.sum(t, summed);
  return r.reshape(kept_shape);
}

// The product of left and right summed over the dims marked in `contract`,
// both of the same rank with sizes equal or 1, as one bmm: the other dims
// are batch dims when both have them (size > 1), else rows of the side that
// has them. The result keeps the uncontracted dims in order.
Tensor contract_pair(const Tensor& left, const Tensor& right, const std::vector<bool>& contract,
                     const EinsumArithmetic& arithmetic) {
  Shape batch, rows, cols, summed;
  int64_t b = 1, m = 1, n = 1, k = 1;
  for (int64_t d = 0; d < left.dim(); ++d) {
    if (contract[d]) {
      summed.push_back(d);
      k *= left.size(d);
    } else if (left.size(d) != 1 && right.size(d) != 1) {
      batch.push_back(d);
      b *= left.size(d);
    } else if (left.size(d) != 1) {
      rows.push_back(d);
      m *= left.size(d);
    } else {
      cols.push_back(d);
      n *= right.size(d);
    }
  }
  auto join = [](std::initializer_list<const Shape*> parts) {
    Shape all;
    for (const Shape* p : parts) all.insert(all.end(), p->begin(), p->end());
    return all;
  };
  // left: (batch, rows, summed) -> (b, m, k); right: (batch, summed, cols) -> (b, k, n).
  // Each side's dims of size 1 that belong to the other ride along at the end.
  Tensor l = left.permute(join({&batch, &rows, &summed, &cols})).reshape({b, m, k});
  Tensor r = right.permute(join({&batch, &summed, &cols, &rows})).reshape({b, k, n});
  const Shape order = join({&batch, &rows, &cols});  // the dims of the product, as dims of left/right
  Shape sizes;
  for (int64_t d : order) sizes.push_back(std::max(left.size(d), right.size(d)));
  Tensor out = arithmetic.bmm(l, r).reshape(sizes);
  Shape back(order.size());
  std::iota(back.begin(), back.end(), 0);
  std::sort(back.begin(), back.end(), [&](int64_t i, int64_t j) { return order[i] < order[j]; });
  return out.permute(back);
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands, const EinsumArithmetic& arithmetic) {
  KILN_CHECK(!operands.empty(), "einsum: expected at least one operand for '", equation, "'");
  for (size_t i = 0; i < operands.size(); ++i) {
    KILN_CHECK(operands[i].defined(), "einsum: operand ", i, " is undefined");
    KILN_CHECK(operands[i].dtype() == operands[0].dtype(), "einsum: operand ", i, " is ", operands[i].dtype(),
               " but operand 0 is ", operands[0].dtype(), "; the operands must share a dtype");
    KILN_CHECK(operands[i].device() == operands[0].device(), "einsum: operand ", i, " is on ", operands[i].device(),
               " but operand 0 is on ", operands[0].device());
  }
  const Equation eq = parse(equation);
  const int64_t num_ops = static_cast<int64_t>(operands.size());
  KILN_CHECK(static_cast<int64_t>(eq.terms.size()) == num_ops, "einsum: the equation '", equation, "' has ",
             eq.terms.size(), " input terms but ", num_ops, " operands were given");

  // How many dims each operand's "..." covers, and how often each subscript occurs.
  std::vector<int64_t> covered(num_ops, 0);
  int64_t ellipsis_dims = 0;  // the most any operand's "..." covers: the broadcast ellipsis
  std::array<int64_t, kLetters> count{};
  for (int64_t i = 0; i < num_ops; ++i) {
    const std::vector<int>& term = eq.terms[i];
    const bool has_ellipsis = std::find(term.begin(), term.end(), kEllipsis) != term.end();
    const int64_t named = static_cast<int64_t>(term.size()) - (has_ellipsis ? 1 : 0);
    const int64_t dims = operands[i].dim();
    if (has_ellipsis) {
      KILN_CHECK(named <= dims, "einsum: operand ", i, " of shape ", operands[i].shape(), " has ", dims,
                 " dims, fewer than the ", named, " subscripts of its term in '", equation, "'");
      covered[i] = dims - named;
      ellipsis_dims = std::max(ellipsis_dims, covered[i]);
    } else {
      KILN_CHECK(named == dims, "einsum: operand ", i, " of shape ", operands[i].shape(), " has ", dims,
                 " dims but its term in '", equation, "' has ", named, " subscripts and no ellipsis (...)");
    }
    for (int label : term)
      if (label != kEllipsis) ++count[label];
  }

  // The output's subscripts: as given after "->", or "..." and then those
  // that occur once, in ascending order.
  std::vector<int> output;
  if (eq.output) {
    std::array<bool, kLetters> seen{};
    for (int label : *eq.output) {
      if (label != kEllipsis) {
        KILN_CHECK(count[label] > 0, "einsum: output subscript ", letter_of(label),
                   " does not appear in any input term of '", equation, "'");
        KILN_CHECK(!seen[label], "einsum: output subscript ", letter_of(label), " appears more than once in '",
                   equation, "'");
        seen[label] = true;
      }
      output.push_back(label);
    }
  } else {
    output.push_back(kEllipsis);
    for (int label = 0; label < kLetters; ++label)
      if (count[label] == 1) output.push_back(label);
  }

  // The lined-up dims: the output's in order, then the summed ones (the
  // ellipsis first when the output lacks it, then the subscripts in order).
  std::array<int64_t, kLetters> position;
  position.fill(-1);
  int64_t ellipsis_at = -1, num_dims = 0;
  for (int label : output) {
    if (label == kEllipsis) {
      ellipsis_at = num_dims;
      num_dims += ellipsis_dims;
    } else {
      position[label] = num_dims++;
    }
  }
  const int64_t out_dims = num_dims;
  if (ellipsis_at < 0) {
    ellipsis_at = num_dims;
    num_dims += ellipsis_dims;
  }
  for (int label = 0; label < kLetters; ++label)
    if (count[label] > 0 && position[label] < 0) position[label] = num_dims++;
  std::vector<int> label_at(num_dims, kEllipsis);  // for messages
  for (int label = 0; label < kLetters; ++label)
    if (position[label] >= 0) label_at[position[label]] = label;

  // Each operand as a view of num_dims dims, size 1 where it lacks one.
  std::vector<Tensor> lined_up;
  for (int64_t i = 0; i < num_ops; ++i) {
    Tensor x = operands[i];
    Shape at;  // the lined-up position of each dim of x
    for (int label : eq.terms[i]) {
      if (label != kEllipsis) {
        at.push_back(position[label]);
        continue;
      }
      // "..." aligns from the right with the broadcast ellipsis.
      for (int64_t k = 0; k < covered[i]; ++k) at.push_back(ellipsis_at + ellipsis_dims - covered[i] + k);
    }
    Shape distinct = at;
    std::sort(distinct.begin(), distinct.end());
    if (std::unique(distinct.begin(), distinct.end()) != distinct.end()) {
      // A subscript repeated within the term: its dims become one, the
      // diagonal, through strides (a view of a contiguous x, as autograd
      // needs to send a gradient back through it).
      Tensor base = x.contiguous();
      Shape sizes, strides, merged_at;
      for (int64_t d = 0; d < base.dim(); ++d) {
        auto it = std::find(merged_at.begin(), merged_at.end(), at[d]);
        if (it == merged_at.end()) {
          merged_at.push_back(at[d]);
          sizes.push_back(base.size(d));
          strides.push_back(base.stride(d));
          continue;
        }
        const size_t j = static_cast<size_t>(it - merged_at.begin());
        KILN_CHECK(sizes[j] == base.size(d), "einsum: subscript ", letter_of(label_at[at[d]]),
                   " is repeated in the term of operand ", i, " of shape ", base.shape(),
                   " but its sizes differ (", sizes[j], " != ", base.size(d), ")");
        strides[j] += base.stride(d);
      }
      x = base.as_strided(sizes, strides, base.storage_offset());
      at = merged_at;
    }
    Shape order(at.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return at[a] < at[b]; });
    x = x.permute(order);
    std::sort(at.begin(), at.end());
    for (int64_t p = 0, next = 0; p < num_dims; ++p) {
      if (next < static_cast<int64_t>(at.size()) && at[next] == p) {
        ++next;
      } else {
        x = x.unsqueeze(p);
      }
    }
    lined_up.push_back(x);
  }

  // Sizes must agree or be 1 across operands; a dim can be summed once no
  // later operand has it with a size other than 1.
  Shape size(num_dims, 1);
  std::vector<int64_t> last_op(num_dims, 0);
  for (int64_t i = 0; i < num_ops; ++i) {
    for (int64_t p = 0; p < num_dims; ++p) {
      const int64_t s = lined_up[i].size(p);
      if (s == 1) continue;
      if (size[p] != 1 && size[p] != s) {
        if (label_at[p] != kEllipsis) {
          KILN_FAIL("einsum: subscript ", letter_of(label_at[p]), " has size ", s, " in operand ", i,
                    ", which does not broadcast with size ", size[p], " in an earlier operand ('", equation, "')");
        }
        KILN_FAIL("einsum: the ellipsis (...) of operand ", i, " of shape ", operands[i].shape(),
                  " does not broadcast with the earlier operands' (size ", s, " against ", size[p], ")");
      }
      size[p] = s;
      last_op[p] = i;
    }
  }

  // Contract left to right. `kept` lists the lined-up positions result has.
  auto summed_after = [&](int64_t p, int64_t i) { return p >= out_dims && last_op[p] == i; };
  std::vector<int64_t> kept;
  std::vector<bool> done(num_dims);
  for (int64_t p = 0; p < num_dims; ++p) {
    done[p] = summed_after(p, 0);
    if (!done[p]) kept.push_back(p);
  }
  Tensor result = remove_dims(lined_up[0], done, arithmetic);
  for (int64_t i = 1; i < num_ops; ++i) {
    // The dims already summed out are of size 1 in this operand too.
    std::vector<bool> absent(num_dims, true);
    for (int64_t p : kept) absent[p] = false;
    Tensor operand = remove_dims(lined_up[i], absent, arithmetic);
    // A dim last needed here is summed on its own by the side that has it,
    // or contracted by the product when both do.
    const size_t n = kept.size();
    std::vector<bool> alone(n, false), contract(n, false);
    std::vector<int64_t> next;
    for (size_t k = 0; k < n; ++k) {
      if (!summed_after(kept[k], i)) {
        next.push_back(kept[k]);
      } else if (result.size(k) == 1 || operand.size(k) == 1) {
        alone[k] = true;
      } else {
        contract[k] = true;
      }
    }
    result = remove_dims(result, alone, arithmetic);
    operand = remove_dims(operand, alone, arithmetic);
    std::vector<bool> contract_left;
    for (size_t k = 0; k < n; ++k)
      if (!alone[k]) contract_left.push_back(contract[k]);
    const bool any = std::find(contract_left.begin(), contract_left.end(), true) != contract_left.end();
    result = any ? contract_pair(result, operand, contract_left, arithmetic) : arithmetic.mul(result, operand);
    kept = next;
  }
  return result;
}

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  static constexpr EinsumArithmetic kTensorLayer{
      [](const Tensor& a, const Tensor& b) { return mul(a, b); },
      [](const Tensor& x, const Shape& dims) { return sum(x, dims, /*keepdim=*/true); },
      [](const Tensor& a, const Tensor& b) { return bmm(a, b); },
  };
  return einsum(equation, operands, kTensorLayer);
}

}  // namespace kiln::ops
