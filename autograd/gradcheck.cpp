#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace kiln::autograd {

namespace {

// A copy of `t` over a copy of its whole storage, with t's sizes, strides
// and offset: fn then sees the same layout as the caller's tensor, while the
// perturbations never touch the caller's memory.
Tensor copy_with_layout(const Tensor& t) {
  int64_t extent = static_cast<int64_t>(t.storage()->nbytes() / t.element_size());
  Tensor whole(std::make_shared<TensorImpl>(t.storage(), t.dtype(), Shape{extent}, Shape{1}, 0));
  Tensor copy = whole.clone();
  return Tensor(std::make_shared<TensorImpl>(copy.storage(), t.dtype(), t.shape(), t.strides(), t.storage_offset()));
}

// Element `k` (row-major order) of `t` as a 0-dim view, through t's strides.
Tensor element(const Tensor& t, int64_t k) {
  int64_t offset = t.storage_offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    offset += (k % t.size(d)) * t.stride(d);
    k /= t.size(d);
  }
  return t.as_strided({}, {}, offset);
}

// The values of `t` in row-major order.
std::vector<double> values_of(const Tensor& t) {
  Tensor host = t.detach().to(DType::Float64, kCPU).contiguous();
  const double* p = host.data<double>();
  return std::vector<double>(p, p + host.numel());
}

// One block of a Jacobian: d output / d input, rows = output elements,
// columns = input elements, row-major.
struct JacobianBlock {
  int64_t rows = 0, cols = 0;
  std::vector<double> values;
  double& at(int64_t r, int64_t c) { return values[r * cols + c]; }
};

// The outputs gradcheck compares: the floating point ones.
std::vector<size_t> checked_outputs(const TensorList& outputs) {
  std::vector<size_t> checked;
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (outputs[o].defined() && outputs[o].is_floating_point()) checked.push_back(o);
  }
  return checked;
}

}  // namespace

void gradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& options) {
  // Private copies of the inputs that require grad; the others pass through.
  TensorList work;
  std::vector<size_t> diff;  // positions of the inputs that require grad
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined() || !in.requires_grad()) {
      work.push_back(in);
      continue;
    }
    KILN_CHECK(in.dtype() == DType::Float64, "gradcheck: input ", i, " requires grad but is ", in.dtype(),
               "; finite differences need float64 inputs (use .to(DType::Float64))");
    Tensor copy = copy_with_layout(in.detach());
    copy.requires_grad_();
    work.push_back(copy);
    diff.push_back(i);
  }
  KILN_CHECK(!diff.empty(), "gradcheck: no input requires grad, so there is nothing to check");
  TensorList diff_inputs;
  for (size_t i : diff) diff_inputs.push_back(work[i]);

  TensorList outputs;
  {
    EnableGradGuard enable;
    outputs = fn(work);
  }
  std::vector<size_t> checked = checked_outputs(outputs);

  // blocks[c][j]: output checked[c] against input diff[j].
  std::vector<std::vector<JacobianBlock>> analytic(checked.size()), numerical(checked.size());
  for (size_t c = 0; c < checked.size(); ++c) {
    for (const Tensor& in : diff_inputs) {
      JacobianBlock block{outputs[checked[c]].numel(), in.numel(), {}};
      block.values.assign(static_cast<size_t>(block.rows * block.cols), 0.0);
      analytic[c].push_back(block);
      numerical[c].push_back(block);
    }
  }

  // Analytic: row r of d output / d inputs is the gradient of output element r.
  for (size_t c = 0; c < checked.size(); ++c) {
    const Tensor& out = outputs[checked[c]];
    if (!out.requires_grad()) continue;  // constant in the inputs: all zeros
    for (int64_t r = 0; r < out.numel(); ++r) {
      Tensor one_hot = zeros(out.shape(), {out.dtype(), out.device()});
      Tensor hot = element(one_hot, r);
      ops::fill_(hot, 1);
      TensorList grads = grad({out}, diff_inputs, {one_hot}, /*retain_graph=*/true, /*create_graph=*/false,
                              /*allow_unused=*/true);
      for (size_t j = 0; j < diff.size(); ++j) {
        if (!grads[j].defined()) continue;
        KILN_CHECK(grads[j].shape() == diff_inputs[j].shape(), "gradcheck: the gradient of output ", checked[c],
                   " for input ", diff[j], " has shape ", grads[j].shape(), " but the input has shape ",
                   diff_inputs[j].shape());
        std::vector<double> row = values_of(grads[j]);
        for (int64_t e = 0; e < static_cast<int64_t>(row.size()); ++e) analytic[c][j].at(r, e) = row[e];
      }
    }
  }

  // Numerical: column e of d output / d input j by central differences.
  {
    NoGradGuard no_grad;
    auto evaluate = [&]() {
      TensorList outs = fn(work);
      KILN_CHECK(outs.size() == outputs.size(), "gradcheck: fn returned ", outs.size(), " outputs, then ",
                 outputs.size());
      std::vector<std::vector<double>> values;
      for (size_t o : checked) values.push_back(values_of(outs[o]));
      return values;
    };
    for (size_t j = 0; j < diff.size(); ++j) {
      for (int64_t e = 0; e < diff_inputs[j].numel(); ++e) {
        Tensor x = element(diff_inputs[j], e);
        double original = x.item<double>();
        ops::fill_(x, original + options.eps);
        auto plus = evaluate();
        ops::fill_(x, original - options.eps);
        auto minus = evaluate();
        ops::fill_(x, original);
        for (size_t c = 0; c < checked.size(); ++c) {
          for (int64_t r = 0; r < numerical[c][j].rows; ++r) {
            numerical[c][j].at(r, e) = (plus[c][r] - minus[c][r]) / (2 * options.eps);
          }
        }
      }
    }
  }

  std::ostringstream report;
  int64_t mismatches = 0, entries = 0;
  for (size_t c = 0; c < checked.size(); ++c) {
    for (size_t j = 0; j < diff.size(); ++j) {
      JacobianBlock& a = analytic[c][j];
      JacobianBlock& n = numerical[c][j];
      for (int64_t r = 0; r < a.rows; ++r) {
        for (int64_t e = 0; e < a.cols; ++e) {
          ++entries;
          double av = a.at(r, e), nv = n.at(r, e);
          bool close = std::abs(av - nv) <= options.atol + options.rtol * std::abs(nv);
          if (close || (std::isnan(av) && std::isnan(nv))) continue;
          if (mismatches++ < options.max_reported) {
            report << "\n  output " << checked[c] << " element " << r << ", input " << diff[j] << " element " << e
                   << ": analytic " << av << " vs numerical " << nv;
          }
        }
      }
    }
  }
  KILN_CHECK(mismatches == 0, "gradcheck: the analytic and numerical Jacobians differ in ", mismatches, " of ",
             entries, " entries (atol ", options.atol, ", rtol ", options.rtol, ", eps ", options.eps,
             "; elements are flat row-major indices):", report.str());
}

void gradgradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& options) {
  TensorList outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  std::vector<size_t> checked = checked_outputs(outputs);
  Generator generator(0x5eed);
  TensorList all = inputs;  // the inputs, then one gradient per checked output
  for (size_t o : checked) {
    TensorOptions options64(DType::Float64, outputs[o].device());
    Tensor v = outputs[o].numel() == 0 ? zeros(outputs[o].shape(), options64)
                                       : randn(outputs[o].shape(), options64, &generator);
    all.push_back(v.requires_grad_());
  }
  size_t n = inputs.size();
  auto first_derivative = [&](const TensorList& args) -> TensorList {
    EnableGradGuard enable;
    TensorList in(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(n));
    TensorList outs = fn(in);
    TensorList roots, root_grads, wrt;
    for (size_t c = 0; c < checked.size(); ++c) {
      if (!outs[checked[c]].requires_grad()) continue;
      roots.push_back(outs[checked[c]]);
      root_grads.push_back(args[n + c]);
    }
    for (const Tensor& t : in) {
      if (t.defined() && t.requires_grad()) wrt.push_back(t);
    }
    TensorList grads(wrt.size());
    if (!roots.empty()) {
      grads = grad(roots, wrt, root_grads, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
    }
    for (size_t j = 0; j < grads.size(); ++j) {
      if (!grads[j].defined()) grads[j] = zeros_like(wrt[j]);
    }
    return grads;
  };
  gradcheck(first_derivative, all, options);
}

}  // namespace kiln::autograd
