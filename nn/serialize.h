#pragma once
// Weights in the safetensors format (https://github.com/huggingface/safetensors), readable and
// writable by Python's `safetensors`:
//   8 bytes   little-endian uint64 N, the header's length
//   N bytes   a JSON object: {"name": {"dtype": "F32", "shape": [2, 3],
//             "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value"}}
//             (offsets relative to the data section; padded with spaces to a multiple of 8)
//   the rest  every tensor's bytes, row-major, little-endian, back to back with no gaps
// Dtypes: F32 F64 F16 BF16 I32 I64 BOOL. A file is checked completely before any tensor is
// made: a truncated file, a bad header, offsets that overlap, leave gaps or run past the end,
// a byte range that does not match shape x dtype, or an unknown dtype is an ember::Error
// naming the file and the problem. Writes are atomic (a temporary file in the same directory,
// then a rename), so a crash never leaves a half-written file under the final name.
#include <map>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"

namespace ember::nn {

using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

struct TensorFile {
  TensorMap tensors;  // on the CPU, contiguous
  Metadata metadata;
};

// Tensors may live on any device and have any strides; they are written contiguous.
void save_tensors(const TensorMap& tensors, const std::string& path, const Metadata& metadata = {});
TensorMap load_tensors(const std::string& path);
TensorFile load_tensor_file(const std::string& path);  // with the "__metadata__" map

// The same format in memory (`source` names the buffer in error messages).
std::string to_safetensors(const TensorMap& tensors, const Metadata& metadata = {});
TensorFile from_safetensors(const void* data, size_t size, const std::string& source);

// A module's named parameters and buffers ("fc1.weight", ...).
void save(const Module& module, const std::string& path);
// Copies a file's tensors into the module's existing parameters and buffers in place (on
// their devices; the tensors keep their identity, so optimizers holding them see the values).
// Names must match exactly; shapes and dtypes must agree. Nothing is changed unless everything
// matches; the error lists the missing and unexpected names and every mismatch.
void load(Module& module, const std::string& path);

// The same through a holder: nn::save(model, "model.safetensors").
template <ModuleHolderLike H>
void save(const H& holder, const std::string& path) {
  save(static_cast<const Module&>(*holder), path);
}
template <ModuleHolderLike H>
void load(const H& holder, const std::string& path) {
  load(static_cast<Module&>(*holder), path);
}

}  // namespace ember::nn
