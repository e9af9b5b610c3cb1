#pragma once
// nn::MultiheadAttention, as torch.nn.MultiheadAttention: parameters named as PyTorch's state_dict
// (in_proj_weight [3E, E] and in_proj_bias [3E], or q/k/v_proj_weight when kdim or vdim differ from E;
// out_proj.weight, out_proj.bias), xavier-uniform projections and zero biases, inputs [L, N, E] or with
// batch_first [N, L, E]. forward returns (output, weights) as libtorch's; the weights (averaged over heads
// unless average_attn_weights is false) are computed only with need_weights, which materializes the
// probabilities; otherwise the attention is flex_attention, with dropout in training fused into it. Masks follow PyTorch's module
// (not F.scaled_dot_product_attention): a bool attn_mask [L, S] or [N * H, L, S] and key_padding_mask [N, S]
// are true where attention is NOT allowed; a float attn_mask is added to the scores. is_causal is PyTorch's hint
// that attn_mask is the causal mask: it needs that mask (std::invalid_argument without one, as PyTorch's
// RuntimeError), and without key_padding_mask and need_weights the causal flex path runs in the mask's place.
// forward_flex(query, key, value, score_mod, block_mask) takes a flex_attention modifier instead of masks.
#include <cmath>
#include <tuple>

#include "kiln/attention/sdpa.hpp"
#include "kiln/nn/module.hpp"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads) : embed_dim(embed_dim), num_heads(num_heads) {}
  int64_t embed_dim, num_heads;
  double dropout_ = 0;
  bool bias_ = true, batch_first_ = false;
  int64_t kdim_ = 0, vdim_ = 0;  // 0: embed_dim
  MultiheadAttentionOptions& dropout(double p) { dropout_ = p; return *this; }
  MultiheadAttentionOptions& bias(bool b) { bias_ = b; return *this; }
  MultiheadAttentionOptions& batch_first(bool b) { batch_first_ = b; return *this; }
  MultiheadAttentionOptions& kdim(int64_t d) { kdim_ = d; return *this; }
  MultiheadAttentionOptions& vdim(int64_t d) { vdim_ = d; return *this; }
};

// A class template (instantiated as MultiheadAttentionImpl) so that its code, which compiles the attention kernels,
// is compiled only where a program uses the module, not in every translation unit that includes the header (3.6 s:
// docs/performance.md).
template <class = void>
class MultiheadAttentionImplT : public Module {
 public:
  MultiheadAttentionImplT(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttentionImplT(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  explicit MultiheadAttentionImplT(const MultiheadAttentionOptions& o)
      : Module("MultiheadAttention"), options(o), kdim_(o.kdim_ ? o.kdim_ : o.embed_dim), vdim_(o.vdim_ ? o.vdim_ : o.embed_dim) {
    const int64_t e = o.embed_dim;
    check<std::invalid_argument>(e > 0 && o.num_heads > 0 && e % o.num_heads == 0, "MultiheadAttention: embed_dim ", e,
                                 " must be a positive multiple of num_heads ", o.num_heads);
    check<std::invalid_argument>(o.dropout_ >= 0 && o.dropout_ < 1, "MultiheadAttention: dropout must be in [0, 1), got ", o.dropout_);
    if (packed()) {
      in_proj_weight = register_parameter("in_proj_weight", xavier_uniform({3 * e, e}));
    } else {
      q_proj_weight = register_parameter("q_proj_weight", xavier_uniform({e, e}));
      k_proj_weight = register_parameter("k_proj_weight", xavier_uniform({e, kdim_}));
      v_proj_weight = register_parameter("v_proj_weight", xavier_uniform({e, vdim_}));
    }
    if (o.bias_) in_proj_bias = register_parameter("in_proj_bias", zeros<float>({3 * e}));
    out_proj = register_module("out_proj", std::make_shared<LinearImpl>(LinearOptions(e, e).bias(o.bias_)));
    if (o.bias_) out_proj->bias.detach().zero_();
  }

  std::tuple<Tensor<float>, Tensor<float>> forward(const Tensor<float>& query, const Tensor<float>& key,
                                                   const Tensor<float>& value, const Tensor<bool>& key_padding_mask = {},
                                                   bool need_weights = true, const Tensor<float>& attn_mask = {},
                                                   bool average_attn_weights = true, bool is_causal = false) {
    return attend(query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal);
  }
  // attn_mask as bools: true where attention is not allowed.
  std::tuple<Tensor<float>, Tensor<float>> forward(const Tensor<float>& query, const Tensor<float>& key,
                                                   const Tensor<float>& value, const Tensor<bool>& key_padding_mask,
                                                   bool need_weights, const Tensor<bool>& attn_mask,
                                                   bool average_attn_weights = true, bool is_causal = false) {
    return attend(query, key, value, key_padding_mask, need_weights, blocked(attn_mask), average_attn_weights, is_causal);
  }

  // flex_attention with a score modifier and block mask over (b, h, q_idx, kv_idx) instead of masks.
  template <class F, class M>
  Tensor<float> forward_flex(const Tensor<float>& query, const Tensor<float>& key, const Tensor<float>& value,
                             const F& score_mod, const attention::BlockMask<M>& block_mask) {
    const auto [q, k, v] = project(query, key, value);
    return finish(attention::flex_attention(q, k, v, score_mod, block_mask));
  }

  void pretty_print(std::ostream& out) const override {
    out << "MultiheadAttention(embed_dim=" << options.embed_dim << ", num_heads=" << options.num_heads
        << ", dropout=" << options.dropout_ << ", batch_first=" << (options.batch_first_ ? "true" : "false") << ')';
  }

  MultiheadAttentionOptions options;
  Tensor<float> in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias;
  std::shared_ptr<LinearImpl> out_proj;

 private:
  int64_t kdim_, vdim_;
  bool packed() const { return kdim_ == options.embed_dim && vdim_ == options.embed_dim; }
  int64_t head_dim() const { return options.embed_dim / options.num_heads; }

  static Tensor<float> xavier_uniform(const Shape& shape) {
    const double bound = std::sqrt(6.0 / double(shape[0] + shape[1]));
    return uniform_(empty<float>(shape), -bound, bound);
  }
  // PyTorch's module masks say where attention is blocked: an additive -inf there.
  static Tensor<float> blocked(const Tensor<bool>& m) {
    if (!m.defined()) return {};
    return masked_fill(zeros<float>(m.shape(), m.device()), m, -std::numeric_limits<float>::infinity());
  }

  // [L, N, E] (or batch-first [N, L, E]) -> [N, H, L, head_dim], a view where the layout allows.
  Tensor<float> split_heads(const Tensor<float>& x) const {
    const Tensor<float> nle = options.batch_first_ ? x : x.transpose(0, 1);
    return nle.reshape({nle.size(0), nle.size(1), options.num_heads, head_dim()}).transpose(1, 2);
  }
  std::tuple<Tensor<float>, Tensor<float>, Tensor<float>> project(const Tensor<float>& query, const Tensor<float>& key,
                                                                  const Tensor<float>& value) const {
    const int64_t e = options.embed_dim;
    const int64_t batch = options.batch_first_ ? 0 : 1;
    check<ShapeError>(query.dim() == 3 && key.dim() == 3 && value.dim() == 3 && query.size(2) == e &&
                          key.size(2) == kdim_ && value.size(2) == vdim_ && key.size(0) == value.size(0) &&
                          key.size(1) == value.size(1) && query.size(batch) == key.size(batch),
                      "MultiheadAttention: expected query [L, N, ", e, "], key [S, N, ", kdim_, "], value [S, N, ", vdim_,
                      "] (batch first: N before L and S), got ", query.shape(), ", ", key.shape(), ", ", value.shape());
    auto bias = [&](int64_t i) { return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * e, e) : Tensor<float>(); };
    if (packed() && query.impl_ptr() == key.impl_ptr() && key.impl_ptr() == value.impl_ptr()) {  // self-attention: one GEMM
      const Tensor<float> qkv = functional::linear(query, in_proj_weight, in_proj_bias);
      return {split_heads(qkv.narrow(2, 0, e)), split_heads(qkv.narrow(2, e, e)), split_heads(qkv.narrow(2, 2 * e, e))};
    }
    auto weight = [&](int64_t i) {
      if (packed()) return in_proj_weight.narrow(0, i * e, e);
      return i == 0 ? q_proj_weight : i == 1 ? k_proj_weight : v_proj_weight;
    };
    return {split_heads(functional::linear(query, weight(0), bias(0))),
            split_heads(functional::linear(key, weight(1), bias(1))),
            split_heads(functional::linear(value, weight(2), bias(2)))};
  }
  // [N, H, L, head_dim] -> out_proj of [L, N, E] (or [N, L, E]).
  Tensor<float> finish(const Tensor<float>& heads) const {
    const int64_t n = heads.size(0), l = heads.size(2);
    Tensor<float> merged = heads.transpose(1, 2).reshape({n, l, options.embed_dim});
    if (!options.batch_first_) merged = merged.transpose(0, 1);
    return out_proj->forward(merged);
  }

  std::tuple<Tensor<float>, Tensor<float>> attend(const Tensor<float>& query, const Tensor<float>& key,
                                                  const Tensor<float>& value, const Tensor<bool>& key_padding_mask,
                                                  bool need_weights, Tensor<float> mask, bool average_attn_weights,
                                                  bool is_causal) {
    check<std::invalid_argument>(!is_causal || mask.defined(),
                                 "MultiheadAttention: is_causal is a hint that attn_mask is the causal mask and needs "
                                 "that attn_mask (as PyTorch); pass it (true above the diagonal), or is_causal = false");
    const auto [q, k, v] = project(query, key, value);
    const int64_t n = q.size(0), h = q.size(1), l = q.size(2), s = k.size(2);
    if (mask.defined()) {
      check<ShapeError>((mask.dim() == 2 && mask.size(0) == l && mask.size(1) == s) ||
                            (mask.dim() == 3 && mask.size(0) == n * h && mask.size(1) == l && mask.size(2) == s),
                        "MultiheadAttention: attn_mask of shape ", mask.shape(), " is neither [", l, ", ", s, "] nor [",
                        n * h, ", ", l, ", ", s, "]");
      mask = mask.dim() == 3 ? mask.view({n, h, l, s}) : mask.view({1, 1, l, s});
    }
    if (key_padding_mask.defined()) {
      check<ShapeError>(key_padding_mask.shape() == Shape{n, s}, "MultiheadAttention: key_padding_mask of shape ",
                        key_padding_mask.shape(), ", expected [", n, ", ", s, "]");
      const Tensor<float> padding = blocked(key_padding_mask).view({n, 1, 1, s});
      mask = mask.defined() ? Tensor<float>(mask + padding) : padding;
    }
    const double dropout = is_training() ? options.dropout_ : 0.0;
    if (need_weights) {
      const auto r = attention::materialized_attention(q, k, v, mask, dropout);
      return {finish(r.output), average_attn_weights ? mean(r.weights, {1}) : r.weights};
    }
    // PyTorch takes the hint where the mask is attn_mask alone: the causal path (its empty tiles skipped) instead.
    const bool causal = is_causal && !key_padding_mask.defined();
    return {finish(functional::scaled_dot_product_attention(q, k, v, causal ? Tensor<float>() : mask, dropout, causal)), {}};
  }
};
using MultiheadAttentionImpl = MultiheadAttentionImplT<>;
KILN_MODULE(MultiheadAttention);

}  // namespace kiln::nn
