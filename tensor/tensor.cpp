#include "tensor/tensor.h"

#include "tensor/autograd_hooks.h"
#include "tensor/backend.h"

namespace kiln {

// The furthest element a view reaches, in elements past the storage start,
// plus one; 0 for an empty view.
static int64_t view_extent(const Shape& sizes, const Shape& strides, int64_t offset) {
  int64_t last = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    last += (sizes[i] - 1) * strides[i];
  }
  return last + 1;
}

TensorImpl::TensorImpl(std::shared_ptr<Storage> storage, DType dtype, Shape sizes, Shape strides, int64_t offset,
                       std::shared_ptr<VersionCounter> version_counter)
    : version_counter_(version_counter ? std::move(version_counter) : std::make_shared<VersionCounter>()),
      dtype_(dtype),
      offset_(offset) {
  set_view(std::move(storage), std::move(sizes), std::move(strides), offset);
}

void TensorImpl::set_view(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset) {
  KILN_CHECK(storage != nullptr, "TensorImpl: storage is null");
  KILN_CHECK(sizes.size() == strides.size(), "TensorImpl: ", sizes.size(), " sizes but ", strides.size(),
             " strides");
  KILN_CHECK(offset >= 0, "TensorImpl: negative storage offset ", offset);
  for (int64_t s : strides) KILN_CHECK(s >= 0, "TensorImpl: negative stride in ", strides);
  int64_t numel = shape_numel(sizes, "TensorImpl");
  int64_t extent = view_extent(sizes, strides, offset);
  KILN_CHECK(static_cast<size_t>(extent) * element_size(dtype_) <= storage->nbytes(), "TensorImpl: a view of size ",
             sizes, ", strides ", strides, " and offset ", offset, " reaches element ", extent - 1,
             " but the storage holds only ", storage->nbytes() / element_size(dtype_), " elements of ", dtype_);
  storage_ = std::move(storage);
  sizes_ = std::move(sizes);
  strides_ = std::move(strides);
  offset_ = offset;
  numel_ = numel;
}

// Note [Swapping a tensor's storage].
void TensorImpl::set_storage(const Tensor& source, Shape sizes) {
  KILN_CHECK(source.defined(), "set_storage: the source tensor is undefined");
  int64_t numel = shape_numel(sizes, "set_storage");
  KILN_CHECK(numel == source.numel(), "set_storage: sizes ", sizes, " hold ", numel, " elements but the source ",
             source.shape(), " holds ", source.numel());
  Shape strides = source.strides();
  if (sizes != source.shape()) {
    KILN_CHECK(source.is_contiguous(), "set_storage: sizes ", sizes, " differ from the source's ", source.shape(),
               ", which is not contiguous (strides ", source.strides(), ")");
    strides = contiguous_strides(sizes);
  }
  // source is a valid tensor, so the view below cannot fail once the dtype
  // is source's.
  dtype_ = source.dtype();
  set_view(source.storage(), std::move(sizes), std::move(strides), source.storage_offset());
}

Tensor Tensor::empty(const Shape& shape, TensorOptions options) {
  int64_t numel = shape_numel(shape, "empty");
  auto storage = Storage::allocate(static_cast<size_t>(numel) * kiln::element_size(options.dtype), options.device);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), options.dtype, shape, contiguous_strides(shape), 0));
}

int64_t Tensor::size(int64_t d) const {
  KILN_CHECK(dim() > 0, "size: a 0-dim tensor has no dim ", d);
  return shape()[wrap_dim(d, dim(), "size")];
}

int64_t Tensor::stride(int64_t d) const {
  KILN_CHECK(dim() > 0, "stride: a 0-dim tensor has no dim ", d);
  return strides()[wrap_dim(d, dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  // Size-1 dims may have any stride, and an empty tensor is contiguous
  // whatever its strides, as in PyTorch.
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  return static_cast<char*>(storage()->data()) + storage_offset() * static_cast<int64_t>(element_size());
}

Scalar Tensor::item() const {
  KILN_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape());
  Tensor host = to(kCPU);
  return visit_dtype(dtype(), [&]<class T>() { return Scalar(*static_cast<const T*>(host.data_ptr())); });
}

Scalar Tensor::element_at(std::initializer_list<int64_t> index) const {
  KILN_CHECK(device().is_cpu(), "at: the tensor is on ", device(), "; call .cpu() first");
  KILN_CHECK(static_cast<int64_t>(index.size()) == dim(), "at: got ", index.size(), " indices for a tensor of shape ",
             shape());
  int64_t offset = 0;
  int64_t d = 0;
  for (int64_t i : index) {
    KILN_CHECK(i >= -shape()[d] && i < shape()[d], "at: index ", i, " is out of range for dim ", d, " of size ",
               shape()[d]);
    offset += (i < 0 ? i + shape()[d] : i) * strides()[d];
    ++d;
  }
  const char* base = static_cast<const char*>(data_ptr()) + offset * static_cast<int64_t>(element_size());
  return visit_dtype(dtype(), [&]<class T>() { return Scalar(*reinterpret_cast<const T*>(base)); });
}

Tensor Tensor::pin_memory() const {
  KILN_CHECK(device().is_cpu(), "pin_memory: only CPU tensors can be pinned; this one is on ", device());
  if (is_pinned()) return *this;
  auto storage = Storage::allocate_pinned(nbytes(), "pin_memory");
  Tensor pinned(std::make_shared<TensorImpl>(std::move(storage), dtype(), shape(), contiguous_strides(shape()), 0));
  pinned.impl()->set_quant_params(impl()->quant_params());
  backend_for(kCPU).copy(pinned, *this);
  if (impl()->autograd_meta()) autograd_hooks().record_copy("pin_memory", *this, pinned);
  return pinned;
}

}  // namespace kiln
