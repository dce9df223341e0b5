#pragma once
// The tracer: while a jit::compile'd function runs eagerly for the first time with a signature,
// it turns every dispatched op and every host event (core/trace_hooks.h) into a Graph.
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "jit/graph.h"

namespace ember::jit {

// Why a trace cannot become an executable.
struct BreakInfo {
  std::string op;      // "item", "to(cpu)", "randn", ...
  std::string reason;  // one sentence
  std::string where;   // "file:line" of the call site when known
  std::string str() const;
};

class Tracer {
 public:
  // Installs itself on this thread; `fullgraph`: a break throws GraphBreakError at once.
  explicit Tracer(bool fullgraph);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Before the function runs: its tensor arguments, in order.
  void add_input(const Tensor& t, int32_t arg_index);
  // After it returned: stops recording and binds what it returned.
  void finish(const std::vector<Tensor>& outputs);

  bool broken() const { return broken_; }
  const BreakInfo& break_info() const { return break_; }
  Graph& graph() { return graph_; }

  // Hook entry points (static trampolines find the thread's tracer).
  void on_op(OpId op, std::span<const Tensor> inputs, const Attrs& attrs, const Tensor& out,
             bool inplace);
  void on_new_tensor(const Tensor& t);
  void on_host_data(const Tensor& t);
  void on_host_read(const Tensor& t, const char* what, const std::source_location& where);
  void on_grad_set(const Tensor& param, const Tensor& grad);
  void on_grad_read(const Tensor& param, const Tensor& grad);
  void on_untraceable(const char* what, const char* reason, const std::source_location& where);
  void on_backward() { ran_backward_ = true; }
  // The process group of the first collective the traced call ran (broken or not), or -1.
  int64_t collective_group() const { return collective_group_; }
  bool ran_backward() const { return ran_backward_; }

 private:
  struct Known {
    std::weak_ptr<TensorImpl> impl;
    ValueId value = kNoValue;
  };
  struct Root {
    std::weak_ptr<Storage> storage;
    ValueId root = kNoValue;
  };

  void brk(std::string op, std::string reason, const std::source_location* where = nullptr);
  // The value a tensor names; unknown tensors become state, constants or aliases.
  ValueId value_of(const Tensor& t);
  ValueId lookup(const Tensor& t) const;  // kNoValue when unknown
  void bind(const Tensor& t, ValueId v);
  Value meta_of(const Tensor& t, ValueKind kind) const;
  bool is_fresh(const Tensor& t) const;
  void drop_unread_grad_inputs();

  Graph graph_;
  bool fullgraph_;
  bool broken_ = false;
  bool finished_ = false;
  int64_t collective_group_ = -1;
  int suspended_ = 0;  // >0 while the tracer itself runs ops (copying constants)
  BreakInfo break_;
  std::unordered_map<const TensorImpl*, Known> known_;
  std::unordered_map<const Storage*, Root> roots_;
  std::unordered_map<const TensorImpl*, std::weak_ptr<TensorImpl>> fresh_;
  std::unordered_map<int32_t, ValueId> grads_;  // state slot -> last grad value (kNoValue: none)
  std::vector<int32_t> grad_order_;
  std::unordered_set<const TensorImpl*> grad_touched_;  // parameters whose slot was read or set
  bool ran_backward_ = false;
  uint64_t rng_drawn_start_ = 0;  // this thread's default-generator counters at the start
  uint64_t rng_traced_ = 0;       // counters the traced random ops drew
  uint64_t rng_seed_ = 0;
  const void* prev_observer_ = nullptr;
  const void* prev_hooks_ = nullptr;
};

}  // namespace ember::jit
