#pragma once
// F::scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa), as torch's:
// q [B, H, Lq, E] (or [B, Lq, E]), k [B, Hkv, Lkv, E], v [B, Hkv, Lkv, Ev]; attn_mask broadcastable to
// [B, H, Lq, Lkv], boolean (true takes part) or floating (added to the scores); is_causal keeps kv_idx <= q_idx.
// It runs flex_attention (the mask captured, read in place through its broadcast strides, and its empty tiles
// skipped; dropout fused into the kernels, drawing the mask that materialized_attention's dropout would draw from
// the same generator state). materialized_attention stores the probabilities: what returns the attention weights
// (nn::MultiheadAttention with need_weights) and the baseline the benchmarks compare with.
#include <limits>
#include <optional>

#include "kiln/attention/flex_attention.hpp"
#include "kiln/attention/mods.hpp"
#include "kiln/nn/layers.hpp"
#include "kiln/tensor/gather.hpp"
#include "kiln/tensor/linalg.hpp"
#include "kiln/tensor/softmax.hpp"

namespace kiln::attention {

template <Dtype T>
struct MaterializedAttention {
  Tensor<T> output;   // [B, H, Lq, Ev]
  Tensor<T> weights;  // [B, H, Lq, Lkv]: the probabilities (after dropout)
};

namespace detail {
// k or v [B, Hkv, L, E] with each head repeated for its Hq / Hkv query heads.
template <Dtype T>
Tensor<T> repeat_heads(const Tensor<T>& x, int64_t hq) {
  const int64_t b = x.size(0), hkv = x.size(1), l = x.size(2), e = x.size(3);
  if (hkv == hq) return x;
  return x.unsqueeze(2).expand({b, hkv, hq / hkv, l, e}).reshape({b, hq, l, e});
}
// The causal mask of PyTorch's is_causal (top-left aligned): true where kv_idx > q_idx.
inline Tensor<bool> above_diagonal(int64_t lq, int64_t lkv) {
  Tensor<bool> m = empty<bool>({lq, lkv});
  for (int64_t i = 0; i < lq; ++i)
    for (int64_t j = 0; j < lkv; ++j) m.data_ptr()[i * lkv + j] = j > i;
  return m;
}
}  // namespace detail

// softmax(q k^T scale + mask) (dropout) v with every intermediate stored: O(L^2) memory.
template <Dtype T, class Mask = Tensor<bool>>
MaterializedAttention<T> materialized_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                                                const Mask& attn_mask = {}, double dropout_p = 0, bool is_causal = false,
                                                std::optional<double> scale = {}, bool training = true) {
  const int64_t hq = q.size(1);
  const double s = scale.value_or(1 / std::sqrt(double(q.size(3))));
  Tensor<T> scores(matmul(q, detail::repeat_heads(k, hq).transpose(2, 3)) * compute_t<T>(s));
  constexpr auto kNegInf = -std::numeric_limits<float>::infinity();
  if (is_causal) scores = masked_fill(scores, detail::above_diagonal(q.size(2), k.size(2)).to(q.device()), kNegInf);
  if (attn_mask.defined()) {
    if constexpr (std::is_same_v<Mask, Tensor<bool>>) scores = masked_fill(scores, Tensor<bool>(!attn_mask), kNegInf);
    else scores = Tensor<T>(scores + attn_mask);
  }
  Tensor<T> weights = softmax(scores, 3);
  if (dropout_p > 0 && training) {
    if constexpr (std::is_same_v<T, float>) weights = nn::functional::dropout(weights, dropout_p, true);
    else throw std::invalid_argument("scaled_dot_product_attention: dropout is implemented for float tensors only");
  }
  return {matmul(weights, detail::repeat_heads(v, hq)), weights};
}

}  // namespace kiln::attention

namespace kiln::nn::functional {

template <Dtype T, class Mask = Tensor<bool>>
Tensor<T> scaled_dot_product_attention(const Tensor<T>& query, const Tensor<T>& key, const Tensor<T>& value,
                                       const Mask& attn_mask = {}, double dropout_p = 0, bool is_causal = false,
                                       std::optional<double> scale = {}, bool enable_gqa = false) {
  static_assert(std::is_same_v<Mask, Tensor<bool>> || std::is_same_v<Mask, Tensor<T>>,
                "scaled_dot_product_attention: attn_mask is a bool tensor or a tensor of the inputs' dtype");
  check<ShapeError>((query.dim() == 3 || query.dim() == 4) && key.dim() == query.dim() && value.dim() == query.dim(),
                    "scaled_dot_product_attention: expected q, k, v all [B, H, L, E] or all [B, L, E], got ",
                    query.shape(), ", ", key.shape(), ", ", value.shape());
  check<std::invalid_argument>(dropout_p >= 0 && dropout_p < 1, "scaled_dot_product_attention: dropout_p must be in [0, 1), got ", dropout_p);
  check<std::invalid_argument>(!(is_causal && attn_mask.defined()),
                               "scaled_dot_product_attention: give attn_mask or is_causal, not both (as PyTorch)");
  if (query.dim() == 3) {
    Mask mask = attn_mask;
    if (mask.defined() && mask.dim() == 3) mask = mask.unsqueeze(1);
    return scaled_dot_product_attention(query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1), mask, dropout_p,
                                        is_causal, scale, enable_gqa)
        .squeeze(1);
  }
  const int64_t B = query.size(0), H = query.size(1), Lq = query.size(2), Lkv = key.size(2);
  check<ShapeError>(H % key.size(1) == 0 && (H == key.size(1) || enable_gqa), "scaled_dot_product_attention: ", H,
                    " query heads and ", key.size(1), " key/value heads need enable_gqa and a multiple");
  const attention::FlexOptions o{scale, enable_gqa, dropout_p};
  if (is_causal) return attention::flex_attention(query, key, value, attention::NoScoreMod{},
                                                  attention::create_block_mask(attention::causal(), 1, 1, Lq, Lkv), o);
  if (!attn_mask.defined()) return attention::flex_attention(query, key, value, attention::NoScoreMod{}, o);
  check<ShapeError>(attn_mask.dim() <= 4, "scaled_dot_product_attention: attn_mask of shape ", attn_mask.shape(),
                    " has more than 4 dims");
  Shape target{B, H, Lq, Lkv};
  check<ShapeError>(broadcast_shapes(attn_mask.shape(), target, "scaled_dot_product_attention: attn_mask") == target,
                    "scaled_dot_product_attention: attn_mask of shape ", attn_mask.shape(),
                    " does not broadcast to the scores' shape ", target);
  Mask m = attn_mask;
  while (m.dim() < 4) m = m.unsqueeze(0);
  const bool per_b = m.size(0) != 1, per_h = m.size(1) != 1;
  const auto table = attention::captured(m.expand(target));
  if constexpr (std::is_same_v<Mask, Tensor<bool>>) {
    auto mask_mod = [&](auto b, auto h, auto q, auto kv) { return table(b, h, q, kv) != 0.0; };
    return attention::flex_attention(query, key, value, attention::NoScoreMod{},
                                     attention::create_block_mask(mask_mod, per_b ? B : 1, per_h ? H : 1, Lq, Lkv), o);
  } else {
    auto score_mod = [&](auto score, auto b, auto h, auto q, auto kv) { return score + table(b, h, q, kv); };
    return attention::flex_attention(query, key, value, score_mod, o);
  }
}

}  // namespace kiln::nn::functional
