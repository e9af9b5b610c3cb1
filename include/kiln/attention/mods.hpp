#pragma once
// Ready-made modifiers (the ones of PyTorch's FlexAttention examples). Masks combine with &, | and !:
//   create_block_mask(causal() & document(ids), ...).
#include <cmath>

#include "kiln/attention/modifier.hpp"
#include "kiln/tensor/factory.hpp"

namespace kiln::attention {

// mask_mods
inline auto causal() {
  using namespace placeholders;
  return q_idx >= kv_idx;
}
// Causal within a window: each query sees itself and the window - 1 keys before it.
inline auto sliding_window(int64_t window) {
  using namespace placeholders;
  check<std::invalid_argument>(window >= 1, "sliding_window: the window must be at least 1, got ", window);
  return (q_idx >= kv_idx) & (q_idx - kv_idx < double(window));
}
// Bidirectional over the first prefix_length keys, causal after them.
inline auto prefix_lm(int64_t prefix_length) {
  using namespace placeholders;
  return (kv_idx < double(prefix_length)) | (q_idx >= kv_idx);
}
// Tokens attend only within their document: document_ids [L] (integers; queries and keys from one sequence).
template <Dtype I>
auto document(const Tensor<I>& document_ids) {
  using namespace placeholders;
  check<ShapeError>(document_ids.dim() == 1, "document: expected document ids [L], got ", document_ids.shape());
  const auto doc = captured(document_ids);
  return doc(q_idx) == doc(kv_idx);
}

// score_mods
// ALiBi (Press et al.): score + slope_h * (kv_idx - q_idx), slopes 2^(-8 (h + 1) / H).
inline auto alibi(int64_t heads) {
  using namespace placeholders;
  check<std::invalid_argument>(heads >= 1, "alibi: heads must be at least 1, got ", heads);
  Tensor<float> slopes = empty<float>({heads});
  for (int64_t i = 0; i < heads; ++i) slopes.data_ptr()[i] = float(std::exp2(-8.0 * double(i + 1) / double(heads)));
  return score + captured(slopes)(h) * (kv_idx - q_idx);
}
// A learned bias per head and relative position: table [H, Lq + Lkv - 1], read at q_idx - kv_idx + Lkv - 1.
template <Dtype T>
auto relative_position_bias(const Tensor<T>& table, int64_t Lkv) {
  using namespace placeholders;
  check<ShapeError>(table.dim() == 2, "relative_position_bias: expected a table [H, Lq + Lkv - 1], got ", table.shape());
  return score + captured(table)(h, q_idx - kv_idx + double(Lkv - 1));
}
// Gemma 2 / Grok soft-capping: cap * tanh(score / cap).
inline auto soft_cap(double cap) {
  using namespace placeholders;
  check<std::invalid_argument>(cap > 0, "soft_cap: the cap must be positive, got ", cap);
  return cap * tanh(score / cap);
}

}  // namespace kiln::attention
