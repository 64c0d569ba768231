// A float tensor carrying per-tensor QuantParams (fake-quantized values on a
// grid, quant/) keeps them through relu and max pooling when autograd records
// them too (tensor/quantized_grid.h): the autograd ops return the tensor
// ops' outputs, whose params the history does not touch; and quantized
// tensors go through nn::ReLU and nn::MaxPool2d on their integers.
#include <gtest/gtest.h>

#include "kiln.h"
#include "tensor/quantize.h"

namespace kiln {
namespace {

namespace F = nn::functional;

Tensor on_grid(const Tensor& x, double scale) {
  auto params = ops::quantize_per_tensor(x.detach(), scale, 0, DType::UInt8).impl()->quant_params();
  x.impl()->set_quant_params(params);
  return x;
}

TEST(QuantizedGridAutograd, ReluAndMaxPoolKeepTheGridWithRequiresGrad) {
  Tensor x = on_grid(randn({1, 2, 4, 4}), 0.1).requires_grad_();
  auto grid = x.impl()->quant_params();
  Tensor r = F::relu(x);
  EXPECT_EQ(r.grad_fn_name(), "ReluBackward");
  EXPECT_EQ(r.impl()->quant_params(), grid);
  nn::MaxPool2d pool(2);
  Tensor p = pool.forward(r);
  EXPECT_EQ(p.grad_fn_name(), "MaxPool2dBackward");
  EXPECT_EQ(p.impl()->quant_params(), grid);
  EXPECT_EQ(nn::ReLU().forward(x).impl()->quant_params(), grid);
  // Gradients flow as without the params.
  kiln::sum(p).backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().impl()->quant_params(), nullptr);
}

TEST(QuantizedGridAutograd, QuantizedTensorsGoThroughTheModules) {
  Tensor x = randn({2, 3, 6, 6});
  Tensor q = ops::quantize_per_tensor(x, 0.05, 128, DType::UInt8);
  Tensor pooled = nn::MaxPool2d(2).forward(nn::ReLU().forward(q));
  EXPECT_TRUE(pooled.is_quantized());
  EXPECT_EQ(pooled.shape(), (Shape{2, 3, 3, 3}));
  // max and relu commute with dequantize exactly.
  Tensor expected = F::max_pool2d(F::relu(ops::dequantize(q)), {.kernel = 2});
  EXPECT_TRUE(equal(ops::dequantize(pooled), expected));
}

}  // namespace
}  // namespace kiln
