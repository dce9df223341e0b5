#pragma once
/// \file
/// Saving and loading weights in the safetensors format
/// (https://github.com/huggingface/safetensors), readable and writable by Python's
/// `safetensors`.
/// \code
///   8 bytes   little-endian uint64 N, the header's length
///   N bytes   a JSON object: {"name": {"dtype": "F32", "shape": [2, 3],
///             "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value"}}
///             (offsets relative to the data section; padded with spaces to a multiple of 8)
///   the rest  every tensor's bytes, row-major, little-endian, back to back with no gaps
/// \endcode
/// Dtypes: F32 F64 F16 BF16 I32 I64 BOOL. A file is checked completely before any tensor is
/// made: a truncated file, a bad header, offsets that overlap, leave gaps or run past the end,
/// a byte range that does not match shape x dtype, or an unknown dtype is an ember::Error
/// naming the file and the problem. Writes are atomic (a temporary file in the same directory,
/// then a rename), so a crash never leaves a half-written file under the final name.
#include <cstddef>
#include <map>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"

namespace ember::nn {

/// Named tensors, keyed and ordered by name.
using TensorMap = std::map<std::string, Tensor>;
/// The file's string-to-string "__metadata__" map.
using Metadata = std::map<std::string, std::string>;

/// The contents of a safetensors file: its tensors and its metadata.
struct TensorFile {
  TensorMap tensors;  ///< On the CPU, contiguous.
  Metadata metadata;  ///< The "__metadata__" map (empty when the file has none).
};

/// Writes `tensors` (and `metadata`) to `path` atomically.
/// Tensors may live on any device and have any strides; they are written contiguous.
/// \throws ember::Error for an undefined tensor, the reserved name "__metadata__", strings
/// that are not valid UTF-8, or a failing write.
void save_tensors(const TensorMap& tensors, const std::string& path, const Metadata& metadata = {});
/// Reads the tensors of the file at `path`, on the CPU and contiguous (like
/// safetensors.torch.load_file). \throws ember::Error for an unreadable or malformed file.
TensorMap load_tensors(const std::string& path);
/// Reads the file at `path`: its tensors and its "__metadata__" map.
/// \throws ember::Error for an unreadable or malformed file.
TensorFile load_tensor_file(const std::string& path);

/// save_tensors() into a byte string instead of a file.
std::string to_safetensors(const TensorMap& tensors, const Metadata& metadata = {});
/// load_tensor_file() from `size` bytes at `data` (the tensors are copied out); `source` names
/// the buffer in error messages. \throws ember::Error for malformed bytes.
TensorFile from_safetensors(const void* data, size_t size, const std::string& source);

/// Saves a module's named parameters and buffers ("fc1.weight", ...) to `path`, like
/// `safetensors.torch.save_file(model.state_dict(), path)`. A tied parameter is saved once,
/// under its first name.
void save(const Module& module, const std::string& path);
/// Copies a file's tensors into the module's existing parameters and buffers in place (on
/// their devices; the tensors keep their identity, so optimizers holding them see the values).
/// Names must match exactly; shapes and dtypes must agree (no casting).
/// \throws ember::Error unless everything matches, changing nothing: the error lists the
/// missing and unexpected names and every mismatch.
void load(Module& module, const std::string& path);

/// save() through a holder: `nn::save(model, "model.safetensors")`.
template <ModuleHolderLike H>
void save(const H& holder, const std::string& path) {
  save(static_cast<const Module&>(*holder), path);
}
/// load() through a holder: `nn::load(model, "model.safetensors")`.
template <ModuleHolderLike H>
void load(const H& holder, const std::string& path) {
  load(static_cast<Module&>(*holder), path);
}

}  // namespace ember::nn
