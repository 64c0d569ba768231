// CUDA copies: host->device, device->host and device->device, any strides,
// with or without dtype conversion.
//
// Note [CUDA copies]
// A transfer between host and device moves one contiguous block
// (cudaMemcpy); everything about layout and dtype is done on one side only:
// - host -> device: when the destination is contiguous and has the source's
//   dtype, the source is packed on the host (if it is not already) and
//   uploaded straight into it. Otherwise the source is packed in its own
//   dtype, with its broadcast dims kept at size 1 so an expanded scalar
//   uploads as one element, and a kernel on the device scatters and converts
//   it into the destination.
// - device -> host: a source that is not contiguous in the destination's
//   dtype is first gathered and converted by a kernel into a contiguous
//   device buffer; the block is downloaded into the destination, or into a
//   host buffer that the CPU backend then scatters into a strided destination.
// - device -> device on one GPU: one cudaMemcpy when both are contiguous with
//   one dtype, otherwise one strided/converting kernel. Between two GPUs the
//   source is packed on its own GPU, moved with cudaMemcpyPeer, and laid out
//   on the destination GPU as in the host -> device case.
// Everything is queued on the current stream of the device doing the work
// (Note [Current stream] in stream.h), so a copy is ordered with the kernels
// before and after it on that stream:
// - Host -> device from pinned memory is asynchronous (cudaMemcpyAsync, no
//   wait), as PyTorch's non_blocking copy: the call returns at once and the
//   DMA engine reads the host block while the GPU computes. The block is
//   registered with the pinned allocator (record_pinned_use), which keeps a
//   freed block out of reuse until the copy is done (Note [CUDA pinned
//   allocator]). Writing into the pinned source before the stream has
//   reached the copy changes what is copied, as in PyTorch.
// - Host -> device from pageable memory waits for the stream after queuing
//   the copy: the driver may still be reading the host buffer otherwise, and
//   that buffer is often a temporary (the packed source) freed on return.
// - Device -> host waits for the stream before returning: the values must
//   be in the host tensor when the caller reads it.
// - Between two GPUs, the destination's stream first waits for the source's
//   (which produced the data), and the source's stream then waits for the
//   copy, so that source memory freed on return is not reused on the source
//   stream while the copy still reads it.
#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/kernel_errors.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/pinned_allocator.h"
#include "tensor/cuda/stream.h"
#include "tensor/cuda/strided.cuh"

namespace kiln::cuda {

namespace {

// dst[i] = D(src[i]) through the compute type; D, S are device types.
// dst, src: same shape, any strides (layout operand 0 = dst, 1 = src).
template <class D, class S>
__global__ void copy_kernel(D* dst, const S* src, StridedOffsets<2> layout, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    int64_t offset[2];
    layout.offsets(i, offset);
    if constexpr (std::is_same_v<D, S>) {
      dst[offset[0]] = src[offset[1]];
    } else {
      dst[offset[0]] = from_compute<D>(to_compute(src[offset[1]]));
    }
  }
}

template <class D, class S>
void launch_copy(D* dst, const S* src, const StridedOffsets<2>& layout, int64_t n, cudaStream_t stream) {
  copy_kernel<D, S><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(dst, src, layout, n);
  KILN_CUDA_CHECK_LAUNCH("copy_kernel");
}

// dst = src with both on dst's GPU, which is current, queued on `stream`. A
// copy without conversion moves bits, so it is instantiated per element width.
void copy_on_device(const Tensor& dst, const Tensor& src, cudaStream_t stream) {
  if (dst.dtype() == src.dtype()) {
    visit_element_bits(dst.dtype(), [&]<class B>() {
      for_each_strided_launch<2>({dst, src}, [&](const std::array<Tensor, 2>& part, const StridedOffsets<2>& layout) {
        launch_copy(static_cast<B*>(part[0].data_ptr()), static_cast<const B*>(part[1].data_ptr()), layout,
                    part[0].numel(), stream);
      });
    });
    return;
  }
  visit_dtype(dst.dtype(), [&]<class DT>() {
    visit_dtype(src.dtype(), [&]<class ST>() {
      using D = DeviceType<DT>;
      using S = DeviceType<ST>;
      if constexpr (!std::is_same_v<D, S>) {  // equal dtypes took the branch above
        for_each_strided_launch<2>({dst, src}, [&](const std::array<Tensor, 2>& part,
                                                   const StridedOffsets<2>& layout) {
          launch_copy(static_cast<D*>(part[0].data_ptr()), static_cast<const S*>(part[1].data_ptr()), layout,
                      part[0].numel(), stream);
        });
      }
    });
  });
}

// `t` with every broadcast (stride-0) dim shrunk to size 1: the elements
// that actually exist, to pack and transfer once each.
Tensor without_broadcast(const Tensor& t) {
  Shape sizes = t.shape();
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (t.strides()[d] == 0) sizes[d] = 1;
  }
  return t.as_strided(sizes, t.strides(), t.storage_offset());
}

bool moves_as_one_block(const Tensor& dst, const Tensor& src) {
  return dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous();
}

// Queues the upload of `packed` (a contiguous host tensor) into `device_ptr`
// on `stream` (Note [CUDA copies]): asynchronous from pinned memory,
// finished before returning from pageable memory.
void upload(void* device_ptr, const Tensor& packed, Device device, cudaStream_t stream) {
  KILN_CUDA_CHECK(
      cudaMemcpyAsync(device_ptr, packed.data_ptr(), packed.nbytes(), cudaMemcpyHostToDevice, stream));
  // A pinned storage from another allocator (a test's) is pageable memory.
  const bool asynchronous = packed.is_pinned() && record_pinned_use(packed.storage()->data(), stream, device);
  if (!asynchronous) KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_host_to_device(const Tensor& dst, const Tensor& src) {
  DeviceGuard guard(dst.device(), "copy_");
  cudaStream_t stream = current_raw_stream(dst.device());
  if (dst.dtype() == src.dtype() && dst.is_contiguous()) {
    upload(dst.data_ptr(), src.contiguous(), dst.device(), stream);  // src itself when already contiguous
    return;
  }
  Tensor packed = without_broadcast(src).contiguous();  // host, src's dtype
  Tensor staged = Tensor::empty(packed.shape(), {packed.dtype(), dst.device()});
  upload(staged.data_ptr(), packed, dst.device(), stream);
  copy_on_device(dst, staged.expand(src.shape()), stream);
}

void copy_device_to_host(const Tensor& dst, const Tensor& src) {
  DeviceGuard guard(src.device(), "copy_");
  cudaStream_t stream = current_raw_stream(src.device());
  Tensor packed = src;  // on the device: contiguous, in dst's dtype
  if (!(src.dtype() == dst.dtype() && src.is_contiguous())) {
    packed = Tensor::empty(src.shape(), {dst.dtype(), src.device()});
    copy_on_device(packed, src, stream);
  }
  // The host tensor that receives the block: dst, or a buffer to scatter from.
  Tensor host = dst.is_contiguous() ? dst : Tensor::empty(packed.shape(), packed.dtype());
  KILN_CUDA_CHECK(
      cudaMemcpyAsync(host.data_ptr(), packed.data_ptr(), host.nbytes(), cudaMemcpyDeviceToHost, stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
  check_kernel_errors(src.device(), stream);  // the host waited: Note [CUDA kernel errors]
  if (!dst.is_contiguous()) backend_for(kCPU).copy(dst, host);
}

void copy_between_devices(const Tensor& dst, const Tensor& src) {
  const Stream src_stream = current_stream(src.device());
  const Stream dst_stream = current_stream(dst.device());
  Tensor packed = without_broadcast(src);
  if (!packed.is_contiguous()) {
    DeviceGuard guard(src.device(), "copy_");
    Tensor compact = Tensor::empty(packed.shape(), {packed.dtype(), src.device()});
    copy_on_device(compact, packed, src_stream.handle());
    packed = compact;
  }
  Event produced;
  produced.record(src_stream);
  produced.block(dst_stream);
  {
    DeviceGuard guard(dst.device(), "copy_");
    if (moves_as_one_block(dst, packed) && packed.numel() == dst.numel()) {
      KILN_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), dst.device().index, packed.data_ptr(),
                                          src.device().index, dst.nbytes(), dst_stream.handle()));
    } else {
      // Freed on return into dst's cache for dst_stream, where the kernel
      // that reads it is queued.
      Tensor staged = Tensor::empty(packed.shape(), {packed.dtype(), dst.device()});
      KILN_CUDA_CHECK(cudaMemcpyPeerAsync(staged.data_ptr(), dst.device().index, packed.data_ptr(),
                                          src.device().index, packed.nbytes(), dst_stream.handle()));
      copy_on_device(dst, staged.expand(src.shape()), dst_stream.handle());
    }
  }
  Event copied;
  copied.record(dst_stream);
  copied.block(src_stream);
}

}  // namespace

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.device().is_cuda() || src.device().is_cuda(), "copy_: the CUDA backend cannot copy from ",
             src.device(), " to ", dst.device());
  if (dst.numel() == 0) return;
  if (src.device().is_cpu()) {
    copy_host_to_device(dst, src);
  } else if (dst.device().is_cpu()) {
    copy_device_to_host(dst, src);
  } else if (dst.device() == src.device()) {
    DeviceGuard guard(dst.device(), "copy_");
    if (moves_as_one_block(dst, src)) {
      if (dst.data_ptr() == src.data_ptr()) return;  // x.copy_(x)
      KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice,
                                      current_raw_stream(dst.device())));
    } else {
      copy_on_device(dst, src, current_raw_stream(dst.device()));
    }
  } else {
    copy_between_devices(dst, src);
  }
}

}  // namespace kiln::cuda
