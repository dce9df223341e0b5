#include "jit/cpu_group.h"

#include <algorithm>
#include <unordered_map>

#include "core/allocator.h"
#include "core/dispatch.h"

namespace ember::jit {

CpuGroupRunner::CpuGroupRunner(const Graph& g, const Group& group,
                               const std::vector<std::shared_ptr<TensorImpl>>& slots,
                               const MemoryPlan& plan) {
  // The group's shape: every pointwise member has it; a reduction reads it.
  const Node& first = g.nodes[group.nodes.front()];
  shape_ = g.values[first.out].shape;
  rows_ = shape_.empty() ? 1 : shape_[0];
  const int64_t inner = rows_ > 0 ? std::max<int64_t>(1, numel_of(shape_) / rows_) : 1;
  rows_per_chunk_ = std::max<int64_t>(1, kChunkElems / inner);
  if (shape_.empty()) rows_per_chunk_ = 1;
  const int64_t chunk_elems = rows_per_chunk_ * inner;

  std::unordered_map<ValueId, int32_t> chunk_of;  // value -> index into chunked_
  int32_t scratch_slots = 0;
  auto stored = [&](ValueId v) {
    return plan.arena_of[v] >= 0 || plan.fresh[v] || g.values[v].kind != ValueKind::Node ||
           g.values[v].root != v;
  };
  auto external = [&](ValueId v) -> int32_t {
    auto it = chunk_of.find(v);
    if (it != chunk_of.end()) return it->second;
    Chunked c;
    c.full = slots[v];
    c.chunk = Tensor(slots[v]).detach().impl_ptr();  // its own handle on the same memory
    const TensorImpl& t = *slots[v];
    // Sliced along rows when it has the group's leading dim; otherwise it broadcasts whole.
    if (!shape_.empty() && t.sizes.size() == shape_.size() && t.sizes[0] == rows_ && rows_ > 1)
      c.row_stride = t.strides[0];
    chunked_.push_back(std::move(c));
    chunk_of[v] = static_cast<int32_t>(chunked_.size()) - 1;
    return chunk_of[v];
  };

  for (int32_t ni : group.nodes) {
    const Node& n = g.nodes[ni];
    const OpKind kind = op_info(n.op).kind;
    if (kind == OpKind::Reduce) {
      has_reduce_ = true;
      const Dims& dims = n.attrs.dims;
      reduce_rows_ = !shape_.empty() && std::find(dims.begin(), dims.end(), 0) != dims.end();
      reduce_op_ = n.op;
      reduce_attrs_ = n.attrs;
      const int32_t in_chunk = external(n.inputs[0]);
      if (reduce_rows_) {
        Chunked& c = chunked_[in_chunk];
        if (!c.full) {
          // A member's scratch output: give it whole memory of its own, which the chunks fill.
          const Value& v = g.values[n.inputs[0]];
          c.full = std::make_shared<TensorImpl>();
          c.full->storage = std::make_shared<Storage>(
              static_cast<size_t>(std::max<int64_t>(1, v.numel()) * element_size(v.dtype)),
              Device::cpu(), allocator_for(Device::cpu()));
          c.full->sizes = v.shape;
          c.full->strides = contiguous_strides(v.shape);
          c.full->dtype = v.dtype;
          c.full->device = Device::cpu();
          c.chunk->sizes = v.shape;
          c.chunk->strides = c.full->strides;
          if (rows_ > 1) c.row_stride = c.full->strides[0];
        }
        reduce_in_ = Tensor(c.full);
        reduce_out_ = Tensor(slots[n.out]);
      } else {
        reduce_in_ = Tensor(chunked_[in_chunk].chunk);
        // Rows survive the reduction: each chunk writes its own rows of the output.
        reduce_out_chunk_ = external(n.out);
        Chunked& c = chunked_[reduce_out_chunk_];
        if (rows_ > 1) c.row_stride = c.full->strides[0];
        reduce_out_ = Tensor(c.chunk);
      }
      continue;
    }
    Member m;
    m.op = n.op;
    m.attrs = n.attrs;
    for (ValueId in : n.inputs) m.args.push_back(Tensor(chunked_[external(in)].chunk));
    if (stored(n.out)) {
      m.out = Tensor(chunked_[external(n.out)].chunk);
    } else {
      Chunked c;
      c.chunk = std::make_shared<TensorImpl>();
      c.chunk->dtype = g.values[n.out].dtype;
      c.chunk->device = Device::cpu();
      c.base_offset = scratch_slots++;  // which scratch buffer; resolved below
      chunked_.push_back(std::move(c));
      chunk_of[n.out] = static_cast<int32_t>(chunked_.size()) - 1;
      m.out = Tensor(chunked_.back().chunk);
    }
    members_.push_back(std::move(m));
  }
  // One scratch block: a chunk-sized buffer per unstored intermediate (8 bytes per element
  // covers every dtype and keeps each buffer aligned).
  const int64_t slot_bytes = ((chunk_elems * 8 + 255) / 256) * 256;
  scratch_ = std::make_shared<Storage>(
      static_cast<size_t>(std::max<int64_t>(1, scratch_slots) * slot_bytes), Device::cpu(),
      allocator_for(Device::cpu()));
  for (Chunked& c : chunked_) {
    if (c.full) continue;
    const int64_t esize = element_size(c.chunk->dtype);
    c.chunk->storage = scratch_;
    c.base_offset = c.base_offset * slot_bytes / esize;
    c.chunk->offset = c.base_offset;
  }
}

int32_t CpuGroupRunner::kernel_calls_per_run() const {
  const int64_t chunks = rows_ > 0 ? (rows_ + rows_per_chunk_ - 1) / rows_per_chunk_ : 0;
  const int64_t per_chunk = static_cast<int64_t>(members_.size()) + (has_reduce_ && !reduce_rows_);
  return static_cast<int32_t>(chunks * per_chunk + (reduce_rows_ ? 1 : 0));
}

void CpuGroupRunner::set_chunk(int64_t r0, int64_t n) {
  for (Chunked& c : chunked_) {
    TensorImpl& t = *c.chunk;
    if (c.full) {
      if (c.row_stride == 0) continue;
      t.sizes[0] = n;
      t.offset = c.full->offset + r0 * c.row_stride;
    } else {
      // Scratch: a contiguous [n, ...] block.
      t.sizes = shape_;
      if (!t.sizes.empty()) t.sizes[0] = n;
      t.strides = contiguous_strides(t.sizes);
      t.offset = c.base_offset;
    }
  }
}

void CpuGroupRunner::run() {
  const Device cpu = Device::cpu();
  // Arguments and returned tensors get new memory each call: follow the executor's slots.
  for (Chunked& c : chunked_)
    if (c.full) {
      c.chunk->storage = c.full->storage;
      c.chunk->offset = c.full->offset;
    }
  for (int64_t r0 = 0; r0 < rows_; r0 += rows_per_chunk_) {
    const int64_t n = std::min(rows_per_chunk_, rows_ - r0);
    set_chunk(r0, n);
    for (const Member& m : members_) run_kernel({m.op, m.args, m.attrs, m.out}, cpu);
    if (has_reduce_ && !reduce_rows_)
      run_kernel({reduce_op_, std::span<const Tensor>(&reduce_in_, 1), reduce_attrs_, reduce_out_},
                 cpu);
  }
  if (reduce_rows_)
    run_kernel({reduce_op_, std::span<const Tensor>(&reduce_in_, 1), reduce_attrs_, reduce_out_},
               cpu);
  // Let go of this call's memory (arguments, returned tensors): the next run re-points.
  for (Chunked& c : chunked_)
    if (c.full) c.chunk->storage.reset();
}

}  // namespace ember::jit
