#pragma once
// The host side of a generated kernel's descriptor block (cuda/codegen.hpp): which variant an evaluation
// needs, and the block's words for the forward and backward kernels. The operand addresses are the
// leaves' data (device memory on the GPU, host memory in the tests' host shim).
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/cuda/codegen.hpp"

namespace kiln::cuda {

// An array the kernel writes or reads besides the leaves: its address and strides over the output's dims.
struct ArrayRef {
  const void* data;
  Strides strides;
};

namespace detail {

// Largest offset an operand of (shape, strides) reaches.
inline int64_t max_offset(const Shape& shape, const Strides& strides) {
  int64_t m = 0;
  for (int i = 0; i < shape.size(); ++i)
    if (shape[i] > 0) m += (shape[i] - 1) * strides[i];
  return m;
}

// Calls f(scalar) for each Scalar node of a tree, in the order the generator numbers them.
template <class T, class F>
void for_each_scalar(const Leaf<T>&, F&&) {}
template <class T, class F>
void for_each_scalar(const Scalar<T>& s, F&& f) { f(s); }
template <class Op, class... A, class F>
void for_each_scalar(const Map<Op, A...>& m, F&& f) {
  apply_args(m.args, [&](const auto&... a) { (for_each_scalar(a, f), ...); });
}

// Whether every index and offset up to `reach` fits in int, with room for one grid-stride step past the end
// (2^26 threads).
inline bool fits_index32(int64_t reach) { return reach < (int64_t(1) << 31) - (int64_t(1) << 26); }

// The largest offset the trees' leaves reach in their storage (at least `reach`).
template <Expression... E>
int64_t leaf_reach(int64_t reach, const E&... e) {
  [[maybe_unused]] const auto visit = [&](const auto& leaf) {
    reach = std::max(reach, max_offset(leaf.impl->shape, leaf.impl->strides));
  };
  (for_each_leaf(e, visit), ...);
  return reach;
}

// The block as built, checked against the size the kernel's struct has.
inline std::vector<uint64_t> checked_block(std::vector<uint64_t> w, const KernelSource& k) {
  check<std::logic_error>(w.size() * 8 == k.descriptor_bytes, "kiln::cuda: descriptor of ", k.entry, " has ",
                          w.size() * 8, " bytes, the kernel expects ", k.descriptor_bytes);
  return w;
}

inline uint64_t word_of(const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); }
inline uint64_t word_of(int64_t v) { return uint64_t(v); }
inline uint64_t word_of(double v) {
  uint64_t w;
  std::memcpy(&w, &v, sizeof w);
  return w;
}

// The trees' scalars as descriptor words, in the generator's order.
template <Expression... E>
void append_scalars(std::vector<uint64_t>& w, const E&... e) {
  const auto add = [&](const auto& s) {
    if constexpr (std::is_floating_point_v<std::remove_cvref_t<decltype(s.value)>>) w.push_back(word_of(double(s.value)));
    else w.push_back(word_of(int64_t(s.value)));
  };
  (for_each_scalar(e, add), ...);
}

// The block for a kernel of the trees e...: n, sizes, outputs, inputs (the trees' leaves, then
// `extra_inputs`), scalars.
template <Expression... E>
std::vector<uint64_t> descriptor(const KernelSource& k, const Shape& shape, const std::vector<ArrayRef>& outputs,
                                 const std::vector<ArrayRef>& extra_inputs, const E&... e) {
  std::vector<ArrayRef> inputs;
  const auto add_leaf = [&](const auto& leaf) {
    inputs.push_back({leaf.impl->device_bytes(), broadcast_strides(leaf.impl->shape, leaf.impl->strides, shape)});
  };
  (for_each_leaf(e, add_leaf), ...);
  inputs.insert(inputs.end(), extra_inputs.begin(), extra_inputs.end());
  check<std::logic_error>(int(inputs.size()) == k.inputs && int(outputs.size()) == k.outputs,
                          "kiln::cuda: kernel ", k.entry, " takes ", k.inputs, " inputs and ", k.outputs,
                          " outputs, given ", inputs.size(), " and ", outputs.size());
  const int r = k.variant.contiguous ? 0 : k.variant.rank;
  check<std::logic_error>(r == 0 || r == shape.size(), "kiln::cuda: kernel ", k.entry, " is for rank ", r,
                          ", the output has shape ", shape);
  std::vector<uint64_t> w;
  w.reserve(k.descriptor_bytes / 8);
  w.push_back(word_of(numel_of(shape)));
  for (int i = 0; i < r; ++i) w.push_back(word_of(shape[i]));
  auto arrays = [&](const std::vector<ArrayRef>& list) {
    for (const ArrayRef& a : list) w.push_back(word_of(a.data));
    for (const ArrayRef& a : list)
      for (int i = 0; i < r; ++i) w.push_back(word_of(a.strides[i]));
  };
  arrays(outputs);
  arrays(inputs);
  append_scalars(w, e...);
  return checked_block(std::move(w), k);
}

}  // namespace detail

// The variant that evaluates trees into outputs of `shape` and `out_strides`: dense when every output and leaf
// is contiguous in that shape, 32-bit indices when every offset fits.
template <Expression... E>
KernelVariant choose_variant(const Shape& shape, const std::vector<Strides>& out_strides, const E&... e) {
  const Strides dense = contiguous_strides(shape);
  bool contiguous = true;
  int64_t reach = numel_of(shape);
  for (const Strides& s : out_strides) {
    contiguous = contiguous && (shape.size() == 0 || s == dense);
    reach = std::max(reach, detail::max_offset(shape, s));
  }
  const auto visit = [&](const auto& leaf) {
    contiguous = contiguous && leaf.impl->shape == shape && leaf.impl->is_contiguous();
  };
  (for_each_leaf(e, visit), ...);
  return {contiguous, contiguous ? 0 : shape.size(), detail::fits_index32(detail::leaf_reach(reach, e...))};
}
template <Expression E>
KernelVariant choose_variant(const E& e, const Shape& shape, const Strides& out_strides) {
  return choose_variant(shape, {out_strides}, e);
}

// The forward kernel's block: e evaluated into `out` (of e's shape).
template <Expression E>
std::vector<uint64_t> forward_descriptor(const E& e, const KernelSource& k, const Shape& shape, const ArrayRef& out) {
  return detail::descriptor(k, shape, {out}, {}, e);
}

// forward_kernel_all's block: e_k evaluated into outs[k], over `shape`.
template <Expression... E>
std::vector<uint64_t> forward_descriptor_all(const KernelSource& k, const Shape& shape, const std::vector<ArrayRef>& outs,
                                             const E&... e) {
  return detail::descriptor(k, shape, outs, {}, e...);
}

// The backward kernel's block: the incoming gradient `grad` (e's shape) and one output per leaf that
// receives a gradient (gradient_outputs<E>()).
template <Expression E>
std::vector<uint64_t> backward_descriptor(const E& e, const KernelSource& k, const Shape& shape, const ArrayRef& grad,
                                          const std::vector<ArrayRef>& leaf_grads) {
  return detail::descriptor(k, shape, leaf_grads, {grad}, e);
}

}  // namespace kiln::cuda
