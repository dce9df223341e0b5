// The backward engine: finds the nodes reachable from the roots, counts how many gradients each
// will receive, then runs them in dependency order (latest-created first among the ready ones,
// which keeps the run deterministic), summing gradients that meet at a node.
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/ops.h"
#include "core/trace_hooks.h"

namespace ember::autograd {
namespace {

// The callbacks of the backward running on this thread (null outside one).
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

// Installs a callback list for one backward and restores the outer one (a hook may run a
// nested backward).
class CallbackScope {
 public:
  CallbackScope() : outer_(t_callbacks) { t_callbacks = &list; }
  ~CallbackScope() { t_callbacks = outer_; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
  std::vector<std::function<void()>> list;

 private:
  std::vector<std::function<void()>>* outer_;
};

struct Later {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  EMBER_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " tensors but ",
              grads.size(), " gradients");
  NoGradGuard no_grad;  // formulas build plain tensors (no double backward)
  // Each backward op runs in the dtypes its forward op saw (the casts' backward converts the
  // gradient back), as PyTorch's engine does: autocast is off here whatever region is open.
  AutocastGuard no_autocast_cpu(DeviceType::CPU, kBFloat16, false);
  AutocastGuard no_autocast_cuda(DeviceType::CUDA, kBFloat16, false);
  if (const TraceHooks* h = trace_hooks(); h && h->on_backward) h->on_backward();
  CallbackScope callbacks;
  std::unordered_map<Node*, Tensor> buffer;
  std::unordered_map<Node*, int> pending;
  std::vector<std::shared_ptr<Node>> root_nodes;

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& t = roots[i];
    EMBER_CHECK(t.defined(), "backward: undefined tensor");
    const Edge e = gradient_edge(t);
    EMBER_CHECK(e.valid(), "backward: tensor ", i, " of shape ", t.sizes(),
                " does not require grad and has no grad_fn");
    Tensor g = grads[i];
    if (!g.defined()) {
      EMBER_CHECK(t.numel() == 1,
                  "backward: a gradient must be given for a non-scalar tensor "
                  "of shape ",
                  t.sizes());
      g = ones_like(t);
    } else {
      EMBER_CHECK(g.sizes() == t.sizes(), "backward: gradient of shape ", g.sizes(),
                  " does not match the tensor's shape ", t.sizes());
      EMBER_CHECK(g.device() == t.device(), "backward: gradient on ", g.device().str(),
                  ", tensor on ", t.device().str());
      if (g.dtype() != t.dtype()) g = g.to(t.dtype());
    }
    Node* n = e.fn.get();
    buffer[n] = buffer.count(n) ? add(buffer[n], g) : g;
    root_nodes.push_back(e.fn);
  }

  // Count the gradients each reachable node will receive.
  {
    std::vector<Node*> stack;
    std::unordered_map<Node*, bool> seen;
    for (const auto& r : root_nodes)
      if (!seen[r.get()]) {
        seen[r.get()] = true;
        stack.push_back(r.get());
      }
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next) {
        if (!e.valid()) continue;
        ++pending[e.fn.get()];
        if (!seen[e.fn.get()]) {
          seen[e.fn.get()] = true;
          stack.push_back(e.fn.get());
        }
      }
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  for (const auto& r : root_nodes)
    if (pending[r.get()] == 0) {
      pending[r.get()] = -1;  // queued once even if it is the root of several tensors
      ready.push(r.get());
    }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    // A node that received no gradient (every path to it was zero by absence) still runs its
    // edges' bookkeeping, so the nodes below it become ready.
    std::vector<Tensor> out;
    auto it = buffer.find(n);
    if (it != buffer.end()) {
      Tensor g = std::move(it->second);
      buffer.erase(it);
      out = n->apply(std::move(g));
    }
    if (!retain_graph) n->release_saved();
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      if (!e.valid()) continue;
      Node* m = e.fn.get();
      if (i < out.size() && out[i].defined()) {
        auto it = buffer.find(m);
        if (it == buffer.end())
          buffer.emplace(m, std::move(out[i]));
        else
          it->second = add(it->second, out[i]);
      }
      if (--pending[m] == 0) ready.push(m);
    }
  }
  for (size_t i = 0; i < callbacks.list.size(); ++i) {
    std::function<void()> f = std::move(callbacks.list[i]);  // f may queue more (growing list)
    f();
  }
}

size_t register_post_accumulate_grad_hook(const Tensor& leaf,
                                          std::function<void(const Tensor&)> hook) {
  EMBER_CHECK(leaf.defined() && leaf.requires_grad() && !leaf.grad_fn(),
              "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad",
              leaf.defined() ? "" : " (got an undefined tensor)");
  EMBER_CHECK(hook != nullptr, "register_post_accumulate_grad_hook: empty hook");
  AutogradMeta& m = meta(leaf);
  m.post_accumulate_grad_hooks.push_back(std::move(hook));
  return m.post_accumulate_grad_hooks.size() - 1;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, size_t handle) {
  if (!leaf.defined() || !leaf.impl()->autograd) return;
  auto& hooks = leaf.impl()->autograd->post_accumulate_grad_hooks;
  if (handle < hooks.size()) hooks[handle] = nullptr;
}

void queue_callback(std::function<void()> callback) {
  EMBER_CHECK(t_callbacks != nullptr,
              "queue_callback: no backward is running on this thread (call it from a hook)");
  t_callbacks->push_back(std::move(callback));
}

}  // namespace ember::autograd
