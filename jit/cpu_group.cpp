#include "jit/cpu_group.h"

#include <algorithm>
#include <unordered_map>

#include "core/allocator.h"
#include "core/dispatch.h"
#include "core/parallel.h"

namespace ember::jit {

namespace {

// Whether the plan gives `v` memory of its own (or it is not the group's to hold): otherwise it
// is an intermediate of the group, computed into scratch.
bool stored_by_plan(const Graph& g, const MemoryPlan& plan, ValueId v) {
  return plan.arena_of[v] >= 0 || plan.fresh[v] || g.values[v].kind != ValueKind::Node ||
         g.values[v].root != v;
}

// The bytes rounded up to the arena's alignment.
int64_t aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

std::optional<Group> cpu_chunked_group(const Graph& g, const Group& group) {
  switch (group.kind) {
    case GroupKind::Pointwise:
    case GroupKind::Reduction:
      return group;
    case GroupKind::GemmEpilogue:
      // The product runs as itself; its tail, if any, chunked.
      if (group.nodes.size() > 1) return sub_group(g, group, 1);
      return std::nullopt;
    case GroupKind::CrossEntropy:
    case GroupKind::Casts:
      return std::nullopt;
  }
  return std::nullopt;
}

CpuGroupRunner::Cut CpuGroupRunner::cut_of(const Graph& g, const Group& group) {
  // The group's shape: every pointwise member has it; a reduction reads it.
  Cut c;
  const Node& first = g.nodes[group.nodes.front()];
  c.shape = g.values[first.out].shape;
  c.rows = c.shape.empty() ? 1 : c.shape[0];
  const int64_t inner = c.rows > 0 ? std::max<int64_t>(1, numel_of(c.shape) / c.rows) : 1;
  c.rows_per_chunk = std::max<int64_t>(1, kChunkElems / inner);
  if (c.shape.empty()) c.rows_per_chunk = 1;
  c.chunk_elems = c.rows_per_chunk * inner;
  c.chunks = c.rows > 0 ? (c.rows + c.rows_per_chunk - 1) / c.rows_per_chunk : 0;
  c.lanes = std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), c.chunks));
  return c;
}

int64_t CpuGroupRunner::Cut::slot_bytes(DType dtype) const {
  return aligned(chunk_elems * element_size(dtype));
}

CpuGroupRunner::Scratch CpuGroupRunner::scratch_of(const Graph& g, const Group& group,
                                                   const MemoryPlan& plan) {
  Scratch s;
  s.cut = cut_of(g, group);
  for (int32_t ni : group.nodes) {
    const Node& n = g.nodes[ni];
    if (op_info(n.op).kind == OpKind::Reduce) {
      const Dims& dims = n.attrs.dims;
      const bool over_rows =
          !s.cut.shape.empty() && std::find(dims.begin(), dims.end(), 0) != dims.end();
      const ValueId in = n.inputs[0];
      if (over_rows && !stored_by_plan(g, plan, in))
        s.whole_bytes =
            aligned(std::max<int64_t>(1, g.values[in].numel()) * element_size(g.values[in].dtype));
      continue;
    }
    if (!stored_by_plan(g, plan, n.out)) s.lane_bytes += s.cut.slot_bytes(g.values[n.out].dtype);
  }
  return s;
}

int64_t CpuGroupRunner::workspace_bytes(const Graph& g, const Group& group,
                                        const MemoryPlan& plan) {
  return scratch_of(g, group, plan).total();
}

CpuGroupRunner::CpuGroupRunner(const Graph& g, const Group& group,
                               const std::vector<std::shared_ptr<TensorImpl>>& slots,
                               const MemoryPlan& plan, const Workspace& workspace) {
  const Scratch scratch = scratch_of(g, group, plan);
  shape_ = scratch.cut.shape;
  rows_ = scratch.cut.rows;
  rows_per_chunk_ = scratch.cut.rows_per_chunk;
  chunk_elems_ = scratch.cut.chunk_elems;
  EMBER_CHECK(workspace.bytes >= scratch.total() && (workspace.storage || workspace.bytes == 0),
              "CpuGroupRunner: a workspace of ", workspace.bytes, " bytes for a group needing ",
              scratch.total());
  for (int64_t i = 0; i < scratch.cut.lanes; ++i)
    lanes_.push_back(build_lane(g, group, slots, plan, workspace, scratch, i));
}

CpuGroupRunner::Lane CpuGroupRunner::build_lane(
    const Graph& g, const Group& group, const std::vector<std::shared_ptr<TensorImpl>>& slots,
    const MemoryPlan& plan, const Workspace& workspace, const Scratch& scratch,
    int64_t lane_index) {
  Lane lane;
  std::vector<Chunked>& chunked_ = lane.chunked;
  std::unordered_map<ValueId, int32_t> chunk_of;  // value -> index into chunked
  const Cut& cut = scratch.cut;
  const int64_t lane_bytes = scratch.lane_bytes;
  int64_t scratch_bytes = 0;  // of this lane's chunk buffers so far
  auto stored = [&](ValueId v) { return stored_by_plan(g, plan, v); };
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
          // A member's scratch output: whole memory of its own in the workspace, after every
          // lane's chunk buffers (shared by the lanes, which fill different rows of it).
          const Value& v = g.values[n.inputs[0]];
          if (!reduce_full_) {
            reduce_full_ = std::make_shared<TensorImpl>();
            reduce_full_->storage = workspace.storage;
            reduce_full_->offset =
                (workspace.offset + lane_bytes * cut.lanes) / element_size(v.dtype);
            reduce_full_->sizes = v.shape;
            reduce_full_->strides = contiguous_strides(v.shape);
            reduce_full_->dtype = v.dtype;
            reduce_full_->device = Device::cpu();
          }
          c.full = reduce_full_;
          c.chunk->sizes = v.shape;
          c.chunk->strides = c.full->strides;
          if (rows_ > 1) c.row_stride = c.full->strides[0];
        }
        lane.reduce_in = Tensor(c.full);
        lane.reduce_out = Tensor(slots[n.out]);
      } else {
        lane.reduce_in = Tensor(chunked_[in_chunk].chunk);
        // Rows survive the reduction: each chunk writes its own rows of the output.
        Chunked& c = chunked_[external(n.out)];
        if (rows_ > 1) c.row_stride = c.full->strides[0];
        lane.reduce_out = Tensor(c.chunk);
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
      c.base_offset = scratch_bytes;  // bytes into the lane's scratch; elements below
      scratch_bytes += cut.slot_bytes(c.chunk->dtype);
      chunked_.push_back(std::move(c));
      chunk_of[n.out] = static_cast<int32_t>(chunked_.size()) - 1;
      m.out = Tensor(chunked_.back().chunk);
    }
    lane.members.push_back(std::move(m));
  }
  // This lane's part of the workspace: a chunk-sized buffer per unstored intermediate.
  EMBER_CHECK(scratch_bytes == lane_bytes, "CpuGroupRunner: ", scratch_bytes,
              " bytes of scratch buffers in a lane of ", lane_bytes);
  lane.scratch = workspace.storage;
  const int64_t lane_start = workspace.offset + lane_index * lane_bytes;
  for (Chunked& c : chunked_) {
    if (c.full) continue;
    const int64_t esize = element_size(c.chunk->dtype);
    c.chunk->storage = lane.scratch;
    c.base_offset = (lane_start + c.base_offset) / esize;
    c.chunk->offset = c.base_offset;
  }
  return lane;
}

int32_t CpuGroupRunner::kernel_calls_per_run() const {
  const int64_t chunks = rows_ > 0 ? (rows_ + rows_per_chunk_ - 1) / rows_per_chunk_ : 0;
  const int64_t per_chunk =
      static_cast<int64_t>(lanes_.front().members.size()) + (has_reduce_ && !reduce_rows_);
  return static_cast<int32_t>(chunks * per_chunk + (reduce_rows_ ? 1 : 0));
}

void CpuGroupRunner::set_chunk(Lane& lane, int64_t r0, int64_t n) const {
  for (Chunked& c : lane.chunked) {
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

void CpuGroupRunner::run_chunks(Lane& lane, int64_t c0, int64_t c1) const {
  const Device cpu = Device::cpu();
  for (int64_t ci = c0; ci < c1; ++ci) {
    const int64_t r0 = ci * rows_per_chunk_;
    set_chunk(lane, r0, std::min(rows_per_chunk_, rows_ - r0));
    for (const Member& m : lane.members) run_kernel({m.op, m.args, m.attrs, m.out}, cpu);
    if (has_reduce_ && !reduce_rows_)
      run_kernel(
          {reduce_op_, std::span<const Tensor>(&lane.reduce_in, 1), reduce_attrs_, lane.reduce_out},
          cpu);
  }
}

void CpuGroupRunner::run() {
  // Arguments and returned tensors get new memory each call: follow the executor's slots.
  for (Lane& lane : lanes_)
    for (Chunked& c : lane.chunked)
      if (c.full) {
        c.chunk->storage = c.full->storage;
        c.chunk->offset = c.full->offset;
      }
  const int64_t chunks = rows_ > 0 ? (rows_ + rows_per_chunk_ - 1) / rows_per_chunk_ : 0;
  const auto nlanes = static_cast<int64_t>(lanes_.size());
  if (nlanes == 1 || get_num_threads() == 1) {
    run_chunks(lanes_.front(), 0, chunks);
  } else {
    // At most one range per lane: each range takes a lane of its own.
    next_lane_.store(0, std::memory_order_relaxed);
    parallel_for(chunks, (chunks + nlanes - 1) / nlanes, [&](int64_t c0, int64_t c1) {
      Lane& lane = lanes_[static_cast<size_t>(next_lane_.fetch_add(1, std::memory_order_relaxed))];
      run_chunks(lane, c0, c1);
    });
  }
  if (reduce_rows_) {
    Lane& lane = lanes_.front();
    run_kernel(
        {reduce_op_, std::span<const Tensor>(&lane.reduce_in, 1), reduce_attrs_, lane.reduce_out},
        Device::cpu());
  }
  // Let go of this call's memory (arguments, returned tensors): the next run re-points.
  for (Lane& lane : lanes_)
    for (Chunked& c : lane.chunked)
      if (c.full) c.chunk->storage.reset();
}

}  // namespace ember::jit
