#pragma once
// The backward pass: walks the graph from the roots in reverse order of creation (a node runs once
// all gradients flowing into it have arrived), sums gradients that meet, runs tensor hooks, and
// accumulates into leaves' .grad (or, for autograd::grad, captures the gradients of the inputs).
#include <queue>
#include <unordered_map>

#include "kiln/autograd/grad_mode.hpp"
#include "kiln/autograd/grad_ops.hpp"
#include "kiln/core/autocast.hpp"
#include "kiln/core/config.hpp"

namespace kiln::autograd {

// The node that accumulates a leaf's gradient into its .grad (in place once a .grad exists).
struct AccumulateGrad : Node {
  explicit AccumulateGrad(ImplPtr leaf) : leaf_(std::move(leaf)) {}
  KILN_DECL std::string name() const override;
  bool accumulates() const override { return true; }
  KILN_DECL GradList apply(GradList&& grads) override;
  ImplPtr leaf_;
};

KILN_DECL AutogradMeta& meta_of(const ImplPtr& impl);

inline bool requires_grad(const TensorImpl& impl) {
  return impl.autograd && (impl.autograd->requires_grad || impl.autograd->grad_fn);
}

// Where a gradient with respect to this tensor goes: its grad_fn, or its leaf accumulator.
KILN_DECL Edge gradient_edge(const ImplPtr& impl);

// A tensor a node keeps for its backward: the same memory without autograd meta (so an output
// saved by its own grad_fn makes no reference cycle), and the version it had, so that a backward
// after an in-place change fails instead of using the new values.
struct SavedTensor {
  ImplPtr impl;
  uint64_t version = 0;

  SavedTensor() = default;
  explicit SavedTensor(const ImplPtr& t) : SavedTensor(t->view_as(t->shape, t->strides, t->offset), t->version()) {}
  // An input of the node that saves it (not its output, so no cycle): kept as it is, as PyTorch's SavedVariable
  // keeps an input (a TensorImpl's shape and memory never change; its data is guarded by the version).
  static SavedTensor input(const ImplPtr& t) { return SavedTensor(t, t->version()); }

  const ImplPtr& unpack(const Node& owner) const {
    if (impl->version() != version)
      throw StaleExpressionError(kiln::detail::cat(
          "backward: a tensor of shape ", impl->shape, " saved by ", owner.name(),
          " was modified in place after the forward pass (version ", version, ", now ", impl->version(),
          "); clone it before modifying it"));
    return impl;
  }

 private:
  SavedTensor(ImplPtr t, uint64_t saved_version) : impl(std::move(t)), version(saved_version) {
    check<std::logic_error>(!impl->storage || !impl->storage->is_inference(),
                            "backward: an inference tensor (made under InferenceMode) of shape ", impl->shape,
                            " cannot be saved for backward; clone() it outside InferenceMode to get a normal tensor");
  }
};

struct BackwardOptions {
  bool retain_graph = false;
  // autograd::grad: capture the gradients arriving at these edges instead of touching any .grad.
  const std::vector<Edge>* capture = nullptr;
  GradList* captured = nullptr;
};

// Runs the backward pass from `roots` with their gradients (Tensor::backward, autograd::grad).
KILN_DECL void run_backward(const std::vector<Edge>& roots, GradList root_grads, const BackwardOptions& options);

#if KILN_HEADER_DEFINITIONS
KILN_DECL std::string AccumulateGrad::name() const { return "AccumulateGrad"; }

KILN_DECL GradList AccumulateGrad::apply(GradList&& grads) {
  ImplPtr g = std::move(grads.at(0));
  if (!g) return {};
  AutogradMeta& meta = *leaf_->autograd;
  for (const auto& hook : meta.hooks)
    if (ImplPtr replaced = hook(g)) g = std::move(replaced);
  // Keep the gradient itself unless someone else holds it (the user's root gradient).
  if (!meta.grad) meta.grad = g.use_count() > 1 || !g->is_contiguous() ? copy_gradient(*g) : std::move(g);
  else meta.grad = add_grads(meta.grad, g);
  return {};
}

KILN_DECL AutogradMeta& meta_of(const ImplPtr& impl) {
  if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
  return *impl->autograd;
}

KILN_DECL Edge gradient_edge(const ImplPtr& impl) {
  if (!requires_grad(*impl)) return {};
  AutogradMeta& meta = *impl->autograd;
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(impl);
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

namespace detail {
// One entry per reachable node: the edges still to arrive, the gradients that did, a handle that
// keeps the node alive while queued, and whether it ran.
struct EngineTask {
  int dependencies = 0;
  GradList grads;
  std::shared_ptr<Node> owner;
  bool done = false;
};
// Found by a scan while the graph is small (a fused model's step has few nodes), by a hash index beyond.
struct EngineTasks {
  std::vector<std::pair<Node*, EngineTask>> entries;
  std::unordered_map<Node*, size_t> index;
  static constexpr size_t kScanned = 16;
  std::pair<EngineTask*, bool> find_or_add(Node* n) {
    if (entries.size() <= kScanned) {
      for (auto& [node, task] : entries)
        if (node == n) return {&task, false};
    } else if (const auto it = index.find(n); it != index.end()) {
      return {&entries[it->second].second, false};
    }
    entries.emplace_back(n, EngineTask{});
    if (entries.size() > kScanned) {
      if (index.empty())
        for (size_t i = 0; i < entries.size(); ++i) index.emplace(entries[i].first, i);
      else
        index.emplace(n, entries.size() - 1);
    }
    return {&entries.back().second, true};
  }
  EngineTask& operator[](Node* n) { return *find_or_add(n).first; }
};
}  // namespace detail

KILN_DECL void run_backward(const std::vector<Edge>& roots, GradList root_grads, const BackwardOptions& options) {
  // Each node's backward runs in the precision its forward op used, also when backward() is called inside an
  // autocast region (core/autocast.hpp).
  const AutocastGuard no_autocast(kCPU, false);
  detail::EngineTasks tasks;
  tasks.entries.reserve(detail::EngineTasks::kScanned);
  // The discovery's stack, then the ready queue.
  std::vector<Node*> nodes;
  nodes.reserve(detail::EngineTasks::kScanned);
  for (const Edge& e : roots)
    if (e.valid() && tasks.find_or_add(e.fn.get()).second) nodes.push_back(e.fn.get());
  while (!nodes.empty()) {
    Node* n = nodes.back();
    nodes.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      auto [task, inserted] = tasks.find_or_add(e.fn.get());
      ++task->dependencies;
      if (inserted) nodes.push_back(e.fn.get());
    }
  }

  auto deliver = [&](const Edge& e, ImplPtr g) {
    detail::EngineTask& t = tasks[e.fn.get()];
    if (t.grads.size() < size_t(e.fn->num_outputs())) t.grads.resize(e.fn->num_outputs());
    t.grads[e.input_nr] = add_grads(t.grads[e.input_nr], std::move(g));
    if (!t.owner) t.owner = e.fn;
  };
  auto captured_index = [&](const Edge& e) -> int {
    if (!options.capture) return -1;
    for (size_t i = 0; i < options.capture->size(); ++i) {
      const Edge& c = (*options.capture)[i];
      if (c.fn == e.fn && c.input_nr == e.input_nr) return int(i);
    }
    return -1;
  };
  auto compare = [](Node* a, Node* b) { return a->sequence_nr < b->sequence_nr; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(compare)> ready(compare, std::move(nodes));

  for (size_t i = 0; i < roots.size(); ++i)
    if (roots[i].valid()) deliver(roots[i], root_grads[i]);
  for (const Edge& e : roots)
    if (e.valid() && tasks[e.fn.get()].dependencies == 0) ready.push(e.fn.get());

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    detail::EngineTask& task = tasks[n];
    if (task.done) continue;
    task.done = true;
    const std::shared_ptr<Node> hold = std::move(task.owner);
    GradList grads = std::move(task.grads);
    for (const Node::PreHook& hook : n->pre_hooks) {
      if (hook.output_nr >= int(grads.size()) || !grads[hook.output_nr]) continue;
      if (ImplPtr replaced = hook.fn(grads[hook.output_nr])) grads[hook.output_nr] = std::move(replaced);
    }
    if (options.capture) {
      // autograd::grad: take the gradients of the captured edges; leaves' .grad are never touched.
      for (int k = 0; k < int(grads.size()); ++k) {
        const int idx = captured_index({hold, k});
        if (idx >= 0) (*options.captured)[idx] = add_grads((*options.captured)[idx], grads[k]);
      }
      if (n->accumulates()) continue;
    }
    if (n->released)
      throw std::logic_error(kiln::detail::cat(
          "backward: trying to backward through ", n->name(),
          " a second time, after its saved values were freed; pass retain_graph=true to the first backward"));
    GradList out = n->apply(std::move(grads));
    if (AnomalyMode::is_enabled()) {
      for (size_t k = 0; k < out.size(); ++k) {
        if (!out[k]) continue;
        const int64_t bad = first_non_finite(*out[k]);
        if (bad >= 0)
          throw std::runtime_error(kiln::detail::cat(
              "backward: ", n->name(), " returned a NaN or Inf in its gradient ", k, " (of shape ", out[k]->shape,
              ", element ", bad, "); anomaly detection is on"));
      }
    }
    if (!options.retain_graph) {
      n->release_saved();
      n->released = !n->accumulates();
    }
    for (size_t k = 0; k < n->next_edges.size(); ++k) {
      const Edge& e = n->next_edges[k];
      if (!e.valid()) continue;
      if (k < out.size() && out[k]) deliver(e, std::move(out[k]));
      if (--tasks[e.fn.get()].dependencies == 0) ready.push(e.fn.get());
    }
  }
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln::autograd
