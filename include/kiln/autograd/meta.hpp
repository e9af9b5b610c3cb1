#pragma once
// The autograd graph's pieces: a Node computes the gradients of its inputs from the gradients of
// its outputs; an Edge points at the node (and which of its outputs) a gradient flows to; a
// tensor's AutogradMeta holds requires_grad, .grad, the node that produced it and its hooks.
// Gradients travel type-erased, as TensorImpl handles (null means zero).
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor_impl.hpp"

namespace kiln::autograd {

using ImplPtr = std::shared_ptr<TensorImpl>;
using GradList = std::vector<ImplPtr>;

struct Node;

struct Edge {
  std::shared_ptr<Node> fn;
  int input_nr = 0;  // which output of fn this gradient belongs to
  bool valid() const { return bool(fn); }
};

inline uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

struct Node {
  virtual ~Node() = default;
  // For printing and error messages: "MulBackward", "FusedBackward(a * b + sin(a))".
  virtual std::string name() const = 0;
  // Gradients of the inputs, one per next edge, from the gradients of the outputs.
  virtual GradList apply(GradList&& grad_outputs) = 0;
  // Drops what the node saved for backward (after a backward without retain_graph).
  virtual void release_saved() {}
  virtual int num_outputs() const { return 1; }
  // True for the node that accumulates into a leaf's .grad (it keeps no saved state to free).
  virtual bool accumulates() const { return false; }

  std::vector<Edge> next_edges;
  uint64_t sequence_nr = next_sequence_nr();  // later nodes run first
  bool released = false;
  // Tensor hooks (t.register_hook): run on the gradient of output `output_nr` before apply.
  struct PreHook {
    int output_nr;
    std::function<ImplPtr(const ImplPtr&)> fn;  // returns a replacement gradient, or null to keep it
  };
  std::vector<PreHook> pre_hooks;
};

struct AutogradMeta {
  bool requires_grad = false;
  ImplPtr grad;
  std::shared_ptr<Node> grad_fn;           // null for leaves
  int output_nr = 0;                       // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;    // leaves: the node that accumulates into .grad
  // A leaf's hooks (t.register_hook), run by its accumulator; a non-leaf's are pre-hooks of its grad_fn.
  std::vector<std::function<ImplPtr(const ImplPtr&)>> hooks;
};

}  // namespace kiln::autograd
