// Tensor: a typed, strided view of a Storage on some device.
//
// Note [Tensor and TensorImpl]
// A Tensor is a handle: copying it shares the same TensorImpl, exactly as
// `b = a` shares an object in Python. A TensorImpl holds the sizes, strides,
// storage offset and dtype; several TensorImpls (views) may share one Storage.
// Element (i0, i1, ...) lives at
//   storage.data() + element_size * (offset + i0*stride[0] + i1*stride[1] + ...).
//
// The tensor layer knows nothing of gradients. It leaves one slot for the
// autograd layer (AutogradMeta, an opaque pointer) and one for quantization
// parameters, so the layers above can attach their data without this file
// knowing what it is.
#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/scalar.h"
#include "tensor/shape.h"
#include "tensor/storage.h"

namespace kiln {

class Tensor;
class Generator;     // tensor/random.h
struct ValuesIndices;  // tensor/reduce.h: what x.max(dim) returns
struct TopK;           // tensor/select.h: what x.topk(k) returns

// An integer dim given to a reduction method (x.sum(1)); bool is left out,
// and a braced list ({}, {1}, {0, 1}) is a Shape, never a dim.
template <class I>
concept DimIndex = std::integral<I> && !std::same_as<I, bool>;

// Note [Tensor methods]
// LibTorch users write math as methods: x.relu(), x.sum({1}, true),
// x.matmul(w).softmax(-1), x.mul_(2). Kiln's math is the differentiable
// kiln:: functions of autograd/ops.h, which the tensor layer cannot see. So
// the math methods of Tensor are split as the autograd methods are (Note
// [Autograd hooks]): declared here, so that they read as LibTorch's, and
// defined in autograd/tensor_methods.cpp, each as one call of its free
// function. x.relu() is exactly kiln::relu(x): the same value, the same
// recorded node (grad_fn "ReluBackward"), the same errors; the in-place ones
// are kiln::add_(x, ...) and refuse the same tensors.
//
// The tensor layer must never call these methods. Inside tensor/ they would
// record autograd nodes from code that knows no gradients (a kernel's
// front-end composing x.exp() would put a node in the user's graph), and
// they would make tensor/ depend on autograd/, the layer above it. Code in
// tensor/ calls the kiln::ops:: function (ops::relu(x)) instead; a grep for
// the method names under tensor/ finds none. The view and copy methods
// above them (view, reshape, to, clone, ...) are different: they are the
// tensor layer's own, and only report to autograd through the hooks.
//
// Where Tensor already has a member of a name with another meaning, the
// member keeps it (x.select(dim, index) is the view, not a selection op).
// A method for a new op: declare it in the marked list at the end of the
// math methods, and define it beside the others in
// autograd/tensor_methods.cpp as `return kiln::name(*this, ...);`.

// Note [Version counter]
// Every in-place write to a tensor bumps its version. Autograd saves the
// version of each tensor it keeps for backward and compares it when the
// backward runs (SavedTensor in autograd/node.h), so that "x was modified in
// place after being saved" is an error instead of a silently wrong gradient.
//
// One counter belongs to a tensor and every view made from it: the views of
// view.cpp (view, slice, select, transpose, as_strided, ...), detach(), and
// views of those, so that a write through any of them is seen by all of them.
// A copy (clone, contiguous or to when they copy) starts a counter of its
// own. The counter is held by the TensorImpl, not by the Storage, because the
// memory under a tensor can change while the tensor stays the same:
// set_storage (Note [Swapping a tensor's storage]) moves a parameter between
// its shard and a gathered buffer, and Module::to between devices and dtypes;
// a saved version must go on meaning "this tensor's values", whichever
// memory holds them. As PyTorch's VariableVersion, the price is that
// TensorImpls which share memory without one being a view of the other (two
// built on one Storage by hand; a swapped tensor and the tensor whose memory
// it took) do not see each other's writes.
class VersionCounter {
 public:
  uint64_t get() const { return value_.load(std::memory_order_relaxed); }
  void bump() { value_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// Attached by autograd/ to tensors that take part in differentiation; the
// tensor layer only stores and copies the pointer.
struct AutogradMeta {
  virtual ~AutogradMeta() = default;
};

// Affine quantization parameters carried by int8/uint8/int32 tensors:
// real = scale * (q - zero_point), per tensor or per channel along `axis`.
struct QuantParams {
  enum class Scheme : uint8_t { PerTensor, PerChannel };
  Scheme scheme = Scheme::PerTensor;
  std::vector<double> scales;         // 1 value, or one per channel
  std::vector<int64_t> zero_points;  // same count as scales
  int64_t axis = 0;                   // the channel dim for PerChannel
};

// Where new tensors go and what they hold: zeros({2, 3}, DType::Int64),
// zeros({2, 3}, {DType::Float64, cuda_device(0)}).
struct TensorOptions {
  DType dtype = DType::Float32;
  Device device = kCPU;
  // False when the caller left the dtype at its default, so that factories
  // with their own rule (arange(5) is int64, as torch) can apply it.
  bool dtype_given = false;

  TensorOptions() = default;
  TensorOptions(DType d) : dtype(d), dtype_given(true) {}  // NOLINT: implicit by design
  TensorOptions(Device dev) : device(dev) {}               // NOLINT
  TensorOptions(DType d, Device dev) : dtype(d), device(dev), dtype_given(true) {}
};

class TensorImpl {
 public:
  // A view of `storage`; throws if it would reach outside it. A view of an
  // existing tensor passes that tensor's version_counter() to share it (Note
  // [Version counter]); without one the tensor starts a counter of its own.
  TensorImpl(std::shared_ptr<Storage> storage, DType dtype, Shape sizes, Shape strides, int64_t offset,
             std::shared_ptr<VersionCounter> version_counter = nullptr);

  const std::shared_ptr<Storage>& storage() const { return storage_; }
  DType dtype() const { return dtype_; }
  const Shape& sizes() const { return sizes_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t numel() const { return numel_; }

  // Note [Swapping a tensor's storage]
  // set_storage points this tensor at the elements of `source`, viewed with
  // `sizes`, under the same TensorImpl, so that whoever holds the handle (a
  // module's member, an optimizer, autograd's AccumulateGrad and SavedTensor)
  // sees the new memory. FSDP moves a parameter between the gathered full
  // tensor and its 1-d shard this way:
  //   weight.impl()->set_storage(gathered.narrow(0, start, out * in), {out, in});  // before forward/backward
  //   weight.impl()->set_storage(shard, {shard.numel()});                          // after them
  // What changes: the storage, sizes (and so the number of dims), strides and
  // offset, together. The sizes must hold exactly source.numel() elements;
  // with source's own sizes, source's strides and offset are taken as they
  // are; with other sizes, source must be contiguous and is read in row-major
  // order from its offset. The dtype and the device become source's: FSDP
  // computes with a bfloat16 copy gathered from float32 shards (Note [FSDP
  // mixed precision] in distributed/fsdp/flat_param.h), and on a GPU from
  // shards kept in host memory (cpu_offload), under the handle the optimizer
  // steps in float32 on the host. What does not change is what belongs to
  // the tensor rather than to its memory: the version counter, the autograd
  // metadata and the quantization parameters.
  // A swap is not a write and does not bump the version (torch's
  // `param.data = x`, not its in-place `set_`). So a parameter saved for
  // backward, swapped to its shard after forward and to a freshly gathered
  // buffer before backward, reads as unmodified; an in-place write to it in
  // between (an optimizer step on the shard) reads as modified. The counter
  // sees writes, not values: the caller promises that what it swaps in holds
  // the parameter's values, as all-gathering its shards does. Views taken
  // before a swap still view the old memory (as after torch's set_), though
  // they share the counter; take views again after swapping.
  void set_storage(const Tensor& source, Shape sizes);

  // Note [Version counter].
  uint64_t version() const { return version_counter_->get(); }
  void bump_version() const { version_counter_->bump(); }
  const std::shared_ptr<VersionCounter>& version_counter() const { return version_counter_; }

  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return autograd_meta_; }
  void set_autograd_meta(std::shared_ptr<AutogradMeta> meta) { autograd_meta_ = std::move(meta); }

  const std::shared_ptr<const QuantParams>& quant_params() const { return quant_params_; }
  void set_quant_params(std::shared_ptr<const QuantParams> params) { quant_params_ = std::move(params); }

 private:
  // Checks that the view fits in `storage`, then takes it.
  void set_view(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset);

  std::shared_ptr<Storage> storage_;
  std::shared_ptr<VersionCounter> version_counter_;
  DType dtype_;
  Shape sizes_;
  Shape strides_;
  int64_t offset_;
  int64_t numel_;
  std::shared_ptr<AutogradMeta> autograd_meta_;
  std::shared_ptr<const QuantParams> quant_params_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds no TensorImpl
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised memory of the given shape, contiguous.
  static Tensor empty(const Shape& shape, TensorOptions options = {});

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // True when both handles share one TensorImpl (not merely equal values).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata ----
  const Shape& shape() const { return checked_impl().sizes(); }
  const Shape& strides() const { return checked_impl().strides(); }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t dim) const;    // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t numel() const { return checked_impl().numel(); }
  int64_t storage_offset() const { return checked_impl().offset(); }
  DType dtype() const { return checked_impl().dtype(); }
  Device device() const { return checked_impl().storage()->device(); }
  const std::shared_ptr<Storage>& storage() const { return checked_impl().storage(); }
  size_t element_size() const { return kiln::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  // A UInt8, Int8 or Int32 tensor carrying QuantParams (tensor/quantize.h).
  bool is_quantized() const { return checked_impl().quant_params() != nullptr && is_integral(dtype()) && dtype() != DType::Int64; }

  // ---- raw data ----
  // Address of element (0, 0, ...).
  void* data_ptr() const;
  // Typed address of element (0, 0, ...); throws if T does not match dtype().
  template <class T>
  T* data() const {
    KILN_CHECK(dtype_of<T>() == dtype(), "Tensor::data: requested ", dtype_of<T>(), " but the tensor is ",
               dtype());
    return static_cast<T*>(data_ptr());
  }
  // The single element of a one-element tensor, converted to T (copies from
  // the device if needed).
  template <class T>
  T item() const {
    return item().to<T>();
  }
  Scalar item() const;
  // Element at a full index on a CPU tensor, converted to T; bounds checked.
  //   double v = t.at<double>({1, 2});
  template <class T>
  T at(std::initializer_list<int64_t> index) const {
    return element_at(index).to<T>();
  }
  Scalar element_at(std::initializer_list<int64_t> index) const;

  // ---- views (share storage, no copy; tensor/view.cpp) ----
  Tensor view(const Shape& shape) const;      // needs compatible strides; one size may be -1
  Tensor reshape(const Shape& shape) const;   // a view when possible, else a copy
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-d tensor (1-d and 0-d unchanged)
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // clamps like Python
  Tensor select(int64_t dim, int64_t index) const;  // removes `dim`
  Tensor expand(const Shape& shape) const;          // -1 keeps a size; new dims on the left
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  // A view with the given sizes, strides and offset into the same storage;
  // throws if it would reach outside the storage.
  Tensor as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const;

  // ---- copies and conversions (tensor/copy.cpp) ----
  // Copies `src` into this tensor, broadcasting src to this shape, converting
  // dtype and crossing devices as needed. Bumps the version counter.
  Tensor& copy_(const Tensor& src);
  Tensor contiguous() const;  // this tensor if already contiguous, else a copy
  Tensor clone() const;       // always a new contiguous copy
  Tensor to(DType dtype) const;  // this tensor if dtype matches, else a converted copy
  Tensor to(Device device) const;
  Tensor to(DType dtype, Device device) const;
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda(int index = 0) const { return to(cuda_device(index)); }  // to CUDA device `index`

  // ---- pinned host memory (Note [Pinned memory] in tensor/allocator.h) ----
  // A contiguous copy of this CPU tensor in page-locked host memory (same
  // shape, dtype and values; recorded by autograd as clone() is), or this
  // tensor if its storage is pinned already. Throws kiln::Error for non-CPU tensors, and
  // when no pinned allocator is registered ("pin_memory: no CUDA device is
  // available to page-lock host memory (...)").
  //   Tensor staged = batch.pin_memory();  // then staged.to(cuda_device(0))
  Tensor pin_memory() const;
  bool is_pinned() const { return storage()->is_pinned(); }

  // ---- versions: every in-place write bumps the counter this tensor shares
  // with its views (Note [Version counter]) ----
  uint64_t version() const { return checked_impl().version(); }
  void bump_version() const { checked_impl().bump_version(); }

  // ---- autograd (implemented by autograd/, Note [Autograd hooks]) ----
  // As LibTorch: w.requires_grad_(); loss.backward(); w.grad().
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);  // leaves only; floating dtypes only
  Tensor grad() const;                                 // undefined until a backward reaches it
  void set_grad(const Tensor& grad) const;             // undefined clears it
  bool is_leaf() const;                                // true unless an op recorded this tensor
  std::string grad_fn_name() const;                    // "MulBackward"-like name; "" for leaves
  // Backpropagates from this tensor; `gradient` may be omitted for a
  // one-element tensor (it is then 1). Frees the graph unless retain_graph.
  // With create_graph, a leaf's .grad() holds the graph that computed it,
  // and that graph holds the leaf: a reference cycle, as in PyTorch. Clear
  // it with set_grad(Tensor()) (or zero_grad) when done, or memory leaks.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  // The same data with no autograd history (shares storage and version).
  Tensor detach() const;
  // Keeps .grad() of a non-leaf after backward.
  void retain_grad() const;
  // `hook(grad)` runs when this tensor's gradient is computed; a defined
  // return value replaces the gradient. Returns a handle for remove_hook.
  int64_t register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Leaves only: `hook(leaf)` runs right after backward wrote leaf.grad().
  int64_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  void remove_hook(int64_t handle) const;

  // ---- math, as LibTorch's methods: each is the differentiable kiln::
  // function of the same name in autograd/ops.h, called with this tensor
  // first (Note [Tensor methods]; never called from tensor/) ----
  // unary
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor clamp_min(Scalar min) const;  // clamp(min, nullopt)
  Tensor clamp_max(Scalar max) const;  // clamp(nullopt, max)
  Tensor logical_not() const;
  // binary, with a tensor or a scalar
  Tensor add(const Tensor& other, Scalar alpha = 1) const;  // this + alpha * other
  Tensor add(Scalar other) const;
  Tensor sub(const Tensor& other, Scalar alpha = 1) const;  // this - alpha * other
  Tensor sub(Scalar other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(Scalar other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(Scalar other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(Scalar exponent) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  // torch's x.max(other) and x.min(other): maximum and minimum.
  Tensor max(const Tensor& other) const;
  Tensor min(const Tensor& other) const;
  // condition ? this : other, as torch's x.where(condition, y).
  Tensor where(const Tensor& condition, const Tensor& other) const;
  Tensor where(const Tensor& condition, Scalar other) const;
  // comparisons and logic (Bool results, no gradient)
  Tensor eq(const Tensor& other) const;
  Tensor eq(Scalar other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(Scalar other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(Scalar other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(Scalar other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(Scalar other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(Scalar other) const;
  Tensor logical_and(const Tensor& other) const;
  Tensor logical_or(const Tensor& other) const;
  Tensor logical_xor(const Tensor& other) const;
  // reductions: `dims` empty means all dims; x.sum(1) is x.sum({1})
  Tensor sum(const Shape& dims = {}, bool keepdim = false) const;
  Tensor sum(const Shape& dims, bool keepdim, DType dtype) const;
  Tensor sum(DType dtype) const;  // over all dims, accumulated and returned in dtype
  Tensor mean(const Shape& dims = {}, bool keepdim = false) const;
  Tensor prod(const Shape& dims = {}, bool keepdim = false) const;
  Tensor amax(const Shape& dims = {}, bool keepdim = false) const;
  Tensor amin(const Shape& dims = {}, bool keepdim = false) const;
  Tensor var(const Shape& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const Shape& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor logsumexp(const Shape& dims, bool keepdim = false) const;
  template <DimIndex I>
  Tensor sum(I dim, bool keepdim = false) const { return sum(Shape{static_cast<int64_t>(dim)}, keepdim); }
  template <DimIndex I>
  Tensor mean(I dim, bool keepdim = false) const { return mean(Shape{static_cast<int64_t>(dim)}, keepdim); }
  template <DimIndex I>
  Tensor prod(I dim, bool keepdim = false) const { return prod(Shape{static_cast<int64_t>(dim)}, keepdim); }
  template <DimIndex I>
  Tensor amax(I dim, bool keepdim = false) const { return amax(Shape{static_cast<int64_t>(dim)}, keepdim); }
  template <DimIndex I>
  Tensor amin(I dim, bool keepdim = false) const { return amin(Shape{static_cast<int64_t>(dim)}, keepdim); }
  template <DimIndex I>
  Tensor var(I dim, int64_t correction = 1, bool keepdim = false) const {
    return var(Shape{static_cast<int64_t>(dim)}, correction, keepdim);
  }
  template <DimIndex I>
  Tensor std(I dim, int64_t correction = 1, bool keepdim = false) const {
    return std(Shape{static_cast<int64_t>(dim)}, correction, keepdim);
  }
  template <DimIndex I>
  Tensor logsumexp(I dim, bool keepdim = false) const {
    return logsumexp(Shape{static_cast<int64_t>(dim)}, keepdim);
  }
  Tensor max() const;  // over all elements, 0-dim
  Tensor min() const;
  // Values and Int64 indices along `dim`: auto [values, indices] = x.max(1);
  ValuesIndices max(int64_t dim, bool keepdim = false) const;
  ValuesIndices min(int64_t dim, bool keepdim = false) const;
  // Int64 indices (no gradient); without a dim, into the flattened tensor.
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  // matrix products
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;
  Tensor bmm(const Tensor& other) const;
  // splitting, indexing, selecting
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  TopK topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor multinomial(int64_t num_samples, bool replacement = false, Generator* gen = nullptr) const;
  // reordering, sorting, scans
  Tensor flip(const Shape& dims) const;
  Tensor roll(const Shape& shifts, const Shape& dims = {}) const;
  Tensor repeat(const Shape& repeats) const;
  Tensor tile(const Shape& reps) const;
  ValuesIndices sort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor cumprod(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor sign() const;
  // ---- a method for a new op: one line here, its definition in
  // autograd/tensor_methods.cpp (Note [Tensor methods]) ----

  // ---- in place, as kiln::add_(x, ...): no gradient, refused on a tensor
  // that requires grad while grad mode is on; each returns this tensor ----
  Tensor& add_(const Tensor& other, Scalar alpha = 1);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other, Scalar alpha = 1);
  Tensor& sub_(Scalar other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar other);
  Tensor& pow_(Scalar exponent);
  Tensor& neg_();
  Tensor& abs_();
  Tensor& exp_();
  Tensor& log_();
  Tensor& sqrt_();
  Tensor& relu_();
  Tensor& sigmoid_();
  Tensor& tanh_();
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  Tensor& clamp_min_(Scalar min);
  Tensor& clamp_max_(Scalar max);
  Tensor& fill_(Scalar value);
  Tensor& zero_();
  Tensor& masked_fill_(const Tensor& mask, Scalar value);
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src);

  // ---- printing (tensor/print.cpp) ----
  std::string str() const;

 private:
  const TensorImpl& checked_impl() const {
    KILN_CHECK(impl_ != nullptr, "Tensor: the tensor is undefined (default-constructed)");
    return *impl_;
  }

  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// The default dtype for floating tensors made without one (float32).
inline constexpr DType kDefaultFloat = DType::Float32;

}  // namespace kiln
