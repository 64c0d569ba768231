// Reading and writing named tensors in the safetensors format, the checkpoint
// format of Hugging Face (https://github.com/huggingface/safetensors), so that
// Kiln checkpoints load in PyTorch and PyTorch's load in Kiln.
//
// Note [safetensors layout]
// A file is three parts, all little-endian:
//   bytes [0, 8)        N, the header size, as an unsigned 64-bit integer
//   bytes [8, 8+N)      the header: a UTF-8 JSON object
//                         {"__metadata__": {"key": "value", ...},      (optional)
//                          "fc1.weight": {"dtype": "F32", "shape": [120, 400],
//                                         "data_offsets": [begin, end]}, ...}
//   bytes [8+N, EOF)    the data buffer; a tensor's bytes are
//                       buffer[begin, end), row-major, contiguous.
// The header is padded with spaces to a multiple of 8 bytes, and the buffer
// holds tensors of wider elements first, so every tensor starts at an offset
// aligned to its element size (what the reference writer does, and what lets
// readers map a file and use the bytes in place). The header lists tensors in
// the order of the TensorDict; the buffer order is the writer's business.
// A reader must find the tensors covering the buffer exactly: sorted by
// offset, each begins where the previous ended, the first at 0 and the last
// at the end of the file. load_safetensors enforces this as the reference
// does, so a truncated or padded file is an error, not a silent misread.
//
// Kiln's writer adds, for every tensor, the CRC-32 (zlib's, the checksum of
// gzip and PNG) of its bytes to "__metadata__" as "kiln.crc32.<name>":
// "<8 lowercase hex digits>" -- metadata values must be strings for PyTorch
// and the reference to read the file. load_safetensors verifies each before
// it returns the tensor, so a flipped bit is an error naming the tensor, not
// NaN weights that train on. Files from other writers have no checksums and
// load as before; a file with some checksums must have one per tensor. The
// keys are the format's business: the metadata a caller passes may not use
// the prefix, and the metadata load_safetensors returns does not hold them.
//
// A tensor carrying QuantParams (a quantized tensor, or a float one on a
// grid) has them in "__metadata__" too, as "kiln.quant.<name>": a JSON
// object in the string, {"scheme": "per_tensor" | "per_channel", "axis": 0,
// "scales": [...], "zero_points": [...]}, the scales printed with 17
// significant digits so that they read back as the same doubles.
// load_safetensors gives the tensor its params back (a field that does not
// parse or fit the tensor's shape throws naming the file and the tensor);
// other readers see a plain integer tensor. The prefix is Kiln's as well.
//
// dtypes: BOOL U8 I8 I32 I64 F16 BF16 F32 F64 (Kiln's nine). Autograd
// state is not part of a tensor and is not saved.
#pragma once

#include <map>
#include <string>

#include "tensor/tensor_dict.h"

namespace kiln {

// Writes `tensors` (any device, any strides: each is copied to contiguous CPU
// memory one at a time as it is written) and the string `metadata` to `path`.
// The write is atomic: the bytes go to `path + ".tmp.<pid>"` in the same
// directory, which is flushed to disk and then renamed over `path`, so a
// reader sees the old file or the new one, never a mixture. On any failure
// the temporary file is removed, `path` is left as it was, and kiln::Error
// names the file and the reason (a process killed during the write leaves
// the temporary file: safetensors_temp_path says where). A tensor may not be
// named "__metadata__", nor a metadata key start with "kiln.crc32." or "kiln.quant.".
//   save_safetensors("lenet.safetensors", model_state, {{"epoch", "3"}});
void save_safetensors(const std::string& path, const TensorDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of the file at `path` into new contiguous CPU tensors,
// in the order the header lists them; fills *metadata with "__metadata__"
// when it is given (the checksum and quantization fields taken out). Every size and offset in the file is checked against the
// rules of Note [safetensors layout] before any tensor is read; a violation
// throws kiln::Error naming the file and what is wrong with it.
//   std::map<std::string, std::string> meta;
//   TensorDict state = load_safetensors("lenet.safetensors", &meta);
TensorDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// The temporary file save_safetensors(path, ...) writes in this process
// before renaming it over `path`: "<path>.tmp.<pid>". A signal handler that
// ends the process during a save removes it (trainer.cpp).
std::string safetensors_temp_path(const std::string& path);

}  // namespace kiln
