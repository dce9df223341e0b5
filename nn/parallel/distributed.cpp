// The gradient reducer behind DistributedDataParallel. Buckets are reduced strictly in their
// index order, whatever order a rank's gradients arrive in: every rank then issues the same
// all-reduces in the same order, which is what keeps collectives matched (a bucket completed
// early waits for the ones before it; the end-of-backward callback flushes the rest).
#include "nn/parallel/distributed.h"

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/ops.h"
#include "core/trace_hooks.h"

namespace ember::nn::parallel {

struct DistributedDataParallel::Reducer : std::enable_shared_from_this<Reducer> {
  struct Bucket {
    std::vector<size_t> params;  // indices into `params`
    size_t pending = 0;          // gradients still to arrive this backward
  };
  // A bucket whose all-reduce runs while backward goes on.
  struct InFlight {
    std::shared_ptr<distributed::Work> work;
    Tensor buffer;
    std::vector<Tensor> grads;  // empty: the buffer is the gradient itself
  };

  distributed::ProcessGroup* group = nullptr;
  std::vector<Tensor> params;
  std::vector<std::string> names;
  std::vector<size_t> bucket_of;
  std::vector<Bucket> buckets;
  std::vector<char> ready;
  std::vector<size_t> hooks;
  size_t next = 0;     // the next bucket to reduce this backward
  bool armed = false;  // the end-of-backward callback is queued
  bool no_sync = false;
  bool overlap = true;
  std::vector<InFlight> in_flight;

  void on_grad(size_t i) {
    if (no_sync) return;
    if (!armed) {
      armed = true;
      std::weak_ptr<Reducer> self = weak_from_this();
      autograd::queue_callback([self] {
        if (auto r = self.lock()) r->finish();
      });
    }
    if (ready[i]) return;
    ready[i] = 1;
    --buckets[bucket_of[i]].pending;
    if (!overlap) return;  // all of them in finish()
    while (next < buckets.size() && buckets[next].pending == 0) reduce(next++);
  }

  // After backward: buckets whose parameters got no gradient on this rank (they may have on
  // another) are reduced too, with zeros, so every rank issued the same collectives.
  void finish() {
    while (next < buckets.size()) reduce(next++);
    for (InFlight& f : in_flight) {
      if (f.work) f.work->wait();
      int64_t offset = 0;
      for (Tensor& g : f.grads) {
        g.copy_(f.buffer.narrow(0, offset, g.numel()).view(g.sizes()));
        offset += g.numel();
      }
    }
    in_flight.clear();
    next = 0;
    armed = false;
    for (Bucket& b : buckets) b.pending = b.params.size();
    std::fill(ready.begin(), ready.end(), 0);
  }

  void reduce(size_t bi) {
    const Bucket& b = buckets[bi];
    std::vector<Tensor> grads;
    std::vector<Tensor> flat;
    for (size_t p : b.params) {
      Tensor g = params[p].grad();
      if (!g.defined()) {
        g = zeros_like(params[p]);
        params[p].set_grad(g);
      }
      grads.push_back(g);
      flat.push_back(g.reshape({-1}));
    }
    // One parameter's contiguous gradient is reduced where it lies; several are packed first.
    const bool alone = grads.size() == 1 && grads[0].is_contiguous();
    Tensor buffer = alone ? flat[0] : cat(flat, 0);
    // Started here, written back in finish(). Eagerly through the group's asynchronous call; in
    // a trace as the op, which a replay starts here and waits for just before the write-back,
    // running the rest of backward in between.
    InFlight f;
    if (trace_hooks())
      distributed::all_reduce(buffer, ReduceOp::Avg, group);
    else
      f.work = group->all_reduce_async(buffer, ReduceOp::Avg);
    f.buffer = buffer;
    if (!alone) f.grads = std::move(grads);
    in_flight.push_back(std::move(f));
  }
};

namespace {

// What a rank's module looks like, hashed: the ranks compare these before anything else.
uint64_t describe_params(const std::vector<Tensor>& params) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
  mix(params.size());
  for (const Tensor& p : params) {
    mix(static_cast<uint64_t>(p.dtype()));
    mix(static_cast<uint64_t>(p.dim()));
    for (int64_t s : p.sizes()) mix(static_cast<uint64_t>(s));
  }
  return h;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options)
    : module_(std::move(module)), reducer_(std::make_shared<Reducer>()) {
  EMBER_CHECK(module_ != nullptr, "DistributedDataParallel: no module");
  EMBER_CHECK(options.bucket_cap_mb > 0,
              "DistributedDataParallel: bucket_cap_mb must be positive, got ",
              options.bucket_cap_mb);
  distributed::ProcessGroup& group = options.group ? *options.group : distributed::default_group();
  Reducer& r = *reducer_;
  r.group = &group;
  r.overlap = options.overlap_backward;
  for (auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    EMBER_CHECK(p.device() == group.device(), "DistributedDataParallel: parameter ", name,
                " is on ", p.device().str(), " but ", group.describe(), " communicates tensors on ",
                group.device().str(), " (move the module before wrapping it)");
    r.names.push_back(name);
    r.params.push_back(p);
  }

  const std::vector<uint64_t> all = group.all_gather_words({describe_params(r.params)});
  for (int k = 1; k < group.size(); ++k)
    EMBER_CHECK(
        all[k] == all[0], "DistributedDataParallel: rank ", k,
        "'s module has other parameters (count, shapes or dtypes) than rank 0's: every rank "
        "must wrap the same model");
  {
    NoGradGuard no_grad;
    for (const Tensor& p : module_->parameters()) distributed::broadcast(p, 0, &group);
    for (const Tensor& b : module_->buffers()) distributed::broadcast(b, 0, &group);
  }

  // Buckets from the last parameter back, each closed when the next would pass the cap, and
  // apart by dtype (a bucket is one flat tensor).
  const double cap = options.bucket_cap_mb * 1024 * 1024;
  r.bucket_of.assign(r.params.size(), 0);
  double bytes = 0;
  for (size_t k = r.params.size(); k-- > 0;) {
    const Tensor& p = r.params[k];
    const double nbytes = static_cast<double>(p.numel() * element_size(p.dtype()));
    const bool fresh = r.buckets.empty() ||
                       r.params[r.buckets.back().params.front()].dtype() != p.dtype() ||
                       (bytes + nbytes > cap && !r.buckets.back().params.empty());
    if (fresh) {
      r.buckets.emplace_back();
      bytes = 0;
    }
    r.buckets.back().params.push_back(k);
    bytes += nbytes;
    r.bucket_of[k] = r.buckets.size() - 1;
  }
  for (Reducer::Bucket& b : r.buckets) b.pending = b.params.size();
  r.ready.assign(r.params.size(), 0);

  std::weak_ptr<Reducer> self = reducer_;
  for (size_t k = 0; k < r.params.size(); ++k)
    r.hooks.push_back(
        autograd::register_post_accumulate_grad_hook(r.params[k], [self, k](const Tensor&) {
          if (auto rr = self.lock()) rr->on_grad(k);
        }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t k = 0; k < reducer_->params.size(); ++k)
    autograd::remove_post_accumulate_grad_hook(reducer_->params[k], reducer_->hooks[k]);
}

void DistributedDataParallel::sync_buffers() {
  NoGradGuard no_grad;
  for (const Tensor& b : module_->buffers()) distributed::broadcast(b, 0, reducer_->group);
}

std::vector<std::vector<std::string>> DistributedDataParallel::buckets() const {
  std::vector<std::vector<std::string>> out;
  for (const Reducer::Bucket& b : reducer_->buckets) {
    out.emplace_back();
    for (size_t p : b.params) out.back().push_back(reducer_->names[p]);
  }
  return out;
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), outer_(ddp.reducer_->no_sync) {
  ddp_.reducer_->no_sync = true;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.reducer_->no_sync = outer_; }

}  // namespace ember::nn::parallel
