#pragma once
// flex_attention(q, k, v, score_mod, block_mask, options), as torch.nn.attention.flex_attention:
//   q [B, Hq, Lq, D], k [B, Hkv, Lkv, D], v [B, Hkv, Lkv, Dv] -> [B, Hq, Lq, Dv]
//   score = (q . k) * scale (default 1 / sqrt(D)), then score_mod(score, b, h, q_idx, kv_idx), masked where
//   the block mask's mask_mod is false, softmax over the keys. Hq a multiple of Hkv with enable_gqa (each
//   key/value head serves Hq / Hkv query heads). A row whose keys are all masked gives zeros (lse -inf).
// flex_attention_with_lse also returns the log-sum-exp of each row (float; double for double tensors).
// Gradients reach q, k, v and every floating-point tensor the score_mod captured, through one node whose
// backward recomputes the probabilities tile by tile from the saved lse (attention/flex_cpu.hpp).
#include <optional>
#include <utility>
#include <vector>

#include "kiln/attention/flex_cpu.hpp"
#include "kiln/core/autocast.hpp"
#include "kiln/tensor/autocast_cast.hpp"
#include "kiln/autograd/engine.hpp"

namespace kiln::attention {

struct FlexOptions {
  std::optional<double> scale = std::nullopt;  // default 1 / sqrt(D)
  bool enable_gqa = false;
  // Dropout on the probabilities, in [0, 1), fused into the kernels (an extension: torch's flex_attention has
  // none; F::scaled_dot_product_attention's dropout_p comes here). The mask is drawn from the default generator
  // as bernoulli_(1 - p) on a [B, Hq, Lq, Lkv] tensor would draw it, and the backward regenerates it.
  double dropout_p = 0;
};

template <Dtype T>
using lse_t = kiln::HWY_NAMESPACE::flex::Acc<T>;

template <Dtype T>
struct AttentionOutput {
  Tensor<T> output;
  Tensor<lse_t<T>> lse;  // [B, Hq, Lq]
};

namespace detail {
namespace flex = kiln::HWY_NAMESPACE::flex;

#ifdef KILN_WITH_CUDA
// On the device (attention/flex_device.hpp, included at the end of this header).
template <Dtype T, class S, class M>
void cuda_flex_forward(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const S& score_mod,
                       const BlockMask<M>& bm, double scale, const flex::Dropout& dropout, const Tensor<T>& out,
                       const Tensor<lse_t<T>>& lse);
template <Dtype T, class S, class M>
void cuda_flex_backward(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& out,
                        const Tensor<lse_t<T>>& lse, const Tensor<T>& dout, const Tensor<lse_t<T>>& dlse,
                        const S& score_mod, const BlockMask<M>& bm, double scale, const flex::Dropout& dropout,
                        const Tensor<T>& dq, const Tensor<T>& dk, const Tensor<T>& dv,
                        const std::vector<std::pair<const TensorImpl*, Tensor<lse_t<T>>>>& captured);
#endif

template <Dtype T>
flex::Rows<T> rows_of(const Tensor<T>& t) {
  return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)};
}
// The kernels want the last dim contiguous; any other layout is fine.
template <Dtype T>
Tensor<T> inner_contiguous(const Tensor<T>& t) {
  return t.size(3) <= 1 || t.stride(3) == 1 ? t : t.contiguous();
}

// A tensor the score modifier reads: kept (version-checked) for backward; gradients for floating types.
struct CapturedSlot {
  autograd::ImplPtr tensor;     // the captured tensor itself: its gradient edge
  autograd::SavedTensor saved;  // a view of it, for the version check
  ScalarType dtype;
  int64_t numel;
  bool floating() const { return dtype == ScalarType::Float || dtype == ScalarType::Double; }
};

template <class S>
std::vector<CapturedSlot> number_captured(S& score_mod) {
  std::vector<CapturedSlot> slots;
  score_mod.each_captured([&](auto& gather) {
    gather.slot = int(slots.size());
    const auto& impl = gather.table.impl_ptr();
    slots.push_back({impl, autograd::SavedTensor(impl), impl->dtype, gather.table.numel()});
  });
  return slots;
}

// The captured tensors' gradients: per-thread buffers summed into a tensor of each one's dtype and shape.
template <class A>
struct CapturedGrads {
  std::vector<std::vector<std::vector<A>>> per_thread;  // [thread][slot]
  std::vector<std::vector<A*>> pointers;                // [thread][slot], null where not wanted

  CapturedGrads(const std::vector<CapturedSlot>& slots, const std::vector<bool>& wanted) {
    const int threads = get_num_threads();
    per_thread.resize(size_t(threads));
    pointers.resize(size_t(threads));
    for (int t = 0; t < threads; ++t)
      for (size_t s = 0; s < slots.size(); ++s) {
        per_thread[size_t(t)].emplace_back(wanted[s] ? size_t(slots[s].numel) : 0, A(0));
        pointers[size_t(t)].push_back(wanted[s] ? per_thread[size_t(t)][s].data() : nullptr);
      }
  }
  template <Dtype U>
  Tensor<U> sum(size_t slot, const Shape& shape) const {
    Tensor<U> g = zeros<U>(shape);
    U* out = g.data_ptr();
    for (const auto& thread : per_thread)
      for (size_t i = 0; i < thread[slot].size(); ++i) out[i] += U(thread[slot][i]);
    return g;
  }
};

template <Dtype T, class S, class M>
struct FlexAttentionBackward : autograd::Node {
  using A = lse_t<T>;
  FlexAttentionBackward(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& out,
                        const Tensor<A>& lse, S mod, const BlockMask<M>& bm, flex::Sizes sizes, double scale,
                        flex::Dropout dropout, std::vector<CapturedSlot> captured)
      : q_(q.impl_ptr()), k_(k.impl_ptr()), v_(v.impl_ptr()), out_(out.impl_ptr()), lse_(lse.impl_ptr()),
        mod_(std::move(mod)), bm_(bm), sizes_(sizes), scale_(scale), dropout_(dropout), captured_(std::move(captured)) {
    next_edges.push_back(autograd::gradient_edge(q.impl_ptr()));
    next_edges.push_back(autograd::gradient_edge(k.impl_ptr()));
    next_edges.push_back(autograd::gradient_edge(v.impl_ptr()));
    for (const CapturedSlot& c : captured_) next_edges.push_back(autograd::gradient_edge(c.tensor));
  }
  std::string name() const override { return "FlexAttentionBackward"; }
  int num_outputs() const override { return 2; }
  void release_saved() override {
    q_ = k_ = v_ = out_ = lse_ = {};
    captured_.clear();
  }

  autograd::GradList apply(autograd::GradList&& grads) override {
    autograd::GradList result(next_edges.size());
    if (!grads.at(0) && !(grads.size() > 1 && grads[1])) return result;
    const Tensor<T> q(q_.unpack(*this)), k(k_.unpack(*this)), v(v_.unpack(*this)), out(out_.unpack(*this));
    const Tensor<A> lse(lse_.unpack(*this));
    for (const CapturedSlot& c : captured_) c.saved.unpack(*this);
    const Tensor<T> dout = grads[0] ? inner_contiguous(Tensor<T>(grads[0])) : zeros_like(out);
    const Tensor<A> dlse = grads.size() > 1 && grads[1] ? Tensor<A>(grads[1]).contiguous() : Tensor<A>();
    // Only the gradients some edge takes are computed (a frozen q, k or v gets none).
    auto wanted_grad = [&](size_t edge, const Shape& shape) {
      return next_edges[edge].valid() ? empty<T>(shape, q.device()) : Tensor<T>();
    };
    const Tensor<T> dq = wanted_grad(0, q.shape()), dk = wanted_grad(1, {sizes_.B, sizes_.Hkv, sizes_.Lkv, sizes_.D}),
                    dv = wanted_grad(2, {sizes_.B, sizes_.Hkv, sizes_.Lkv, sizes_.Dv});
    std::vector<bool> wanted;
    for (size_t s = 0; s < captured_.size(); ++s)
      wanted.push_back(captured_[s].floating() && next_edges[3 + s].valid());
    for (size_t i = 0; i < 3; ++i) {
      const Tensor<T>& g = i == 0 ? dq : i == 1 ? dk : dv;
      if (g.defined()) result[i] = g.impl_ptr();
    }
    // Each captured tensor's gradient, from the compute type into its own dtype.
    const auto captured_grad = [&](size_t s, const auto& gradient) {
      result[3 + s] = captured_[s].dtype == ScalarType::Float ? gradient.template operator()<float>().impl_ptr()
                                                              : gradient.template operator()<double>().impl_ptr();
    };
#ifdef KILN_WITH_CUDA
    if (q.is_cuda()) {
      std::vector<std::pair<const TensorImpl*, Tensor<A>>> cg;
      for (size_t s = 0; s < captured_.size(); ++s)
        cg.emplace_back(captured_[s].tensor.get(), wanted[s] ? zeros<A>(captured_[s].tensor->shape, q.device()) : Tensor<A>());
      cuda_flex_backward(q, k, v, out, lse, dout, dlse, mod_, bm_, scale_, dropout_, dq, dk, dv, cg);
      for (size_t s = 0; s < captured_.size(); ++s)
        if (wanted[s]) captured_grad(s, [&]<Dtype U>() { return cg[s].second.template to<U>(); });
      return result;
    }
#endif
    auto data = [](const Tensor<T>& t) { return t.defined() ? t.data_ptr() : nullptr; };
    CapturedGrads<A> cg(captured_, wanted);
    const bool ok = flex::backward(rows_of(q), rows_of(k), rows_of(v), out.data_ptr(), lse.data_ptr(), rows_of(dout),
                                   dlse.defined() ? dlse.data_ptr() : nullptr, sizes_, scale_, mod_, bm_, dropout_,
                                   data(dq), data(dk), data(dv),
                                   [&](int thread) { return cg.pointers[size_t(thread)]; });
    check<std::out_of_range>(ok, "flex_attention backward: the score_mod or mask_mod reads a captured tensor out of its "
                                 "bounds or at a fractional index");
    for (size_t s = 0; s < captured_.size(); ++s)
      if (wanted[s]) captured_grad(s, [&]<Dtype U>() { return cg.template sum<U>(s, captured_[s].tensor->shape); });
    return result;
  }

 private:
  autograd::SavedTensor q_, k_, v_, out_, lse_;
  S mod_;
  BlockMask<M> bm_;
  flex::Sizes sizes_;
  double scale_;
  flex::Dropout dropout_;
  std::vector<CapturedSlot> captured_;
};

template <Dtype T, class F, class M>
AttentionOutput<T> flex_attention(const Tensor<T>& query, const Tensor<T>& key, const Tensor<T>& value,
                                  const F& score_mod_fn, const BlockMask<M>& bm, const FlexOptions& o) {
  static_assert(is_floating_v<T>, "flex_attention: q, k and v must be floating point");
  if constexpr (std::is_same_v<T, float>) {
    if (autocast::applies_to(query))  // q, k, v in the autocast type; the lse is float either way (core/autocast.hpp)
      return autocast::with_dtype(query.device().type(), [&](auto h) {
        using H = decltype(h);
        const AttentionOutput<H> low = detail::flex_attention(query.template to<H>(), key.template to<H>(),
                                                              value.template to<H>(), score_mod_fn, bm, o);
        return AttentionOutput<float>{low.output.template to<float>(), low.lse};
      });
  }
  using A = lse_t<T>;
  auto score_mod = as_score_mod(score_mod_fn);
  static_assert(!decltype(score_mod)::is_bool, "flex_attention: score_mod must give a number (a mask goes in the block mask)");
  check<ShapeError>(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
                    "flex_attention: expected q [B, Hq, Lq, D], k [B, Hkv, Lkv, D], v [B, Hkv, Lkv, Dv], got ",
                    query.shape(), ", ", key.shape(), ", ", value.shape());
  const flex::Sizes g{query.size(0), query.size(1), key.size(1), query.size(2), key.size(2), query.size(3), value.size(3)};
  check<ShapeError>(key.size(0) == g.B && value.size(0) == g.B && value.size(1) == g.Hkv && value.size(2) == g.Lkv &&
                        key.size(3) == g.D,
                    "flex_attention: q ", query.shape(), ", k ", key.shape(), " and v ", value.shape(),
                    " do not fit (batch, key/value heads, key length and head dim must agree)");
  check<ShapeError>(g.Hkv >= 1 && g.Hq % g.Hkv == 0 && (g.Hq == g.Hkv || o.enable_gqa),
                    "flex_attention: ", g.Hq, " query heads and ", g.Hkv, " key/value heads ",
                    g.Hkv >= 1 && g.Hq % g.Hkv == 0 ? "need enable_gqa" : "(query heads must be a multiple)");
  check<ShapeError>(bm.Lq == g.Lq && bm.Lkv == g.Lkv && (bm.B == 1 || bm.B == g.B) && (bm.H == 1 || bm.H == g.Hq),
                    "flex_attention: a block mask for B = ", bm.B, ", H = ", bm.H, ", Lq = ", bm.Lq, ", Lkv = ", bm.Lkv,
                    " used with q ", query.shape(), " and k ", key.shape());
  check<std::invalid_argument>(o.dropout_p >= 0 && o.dropout_p < 1, "flex_attention: dropout_p must be in [0, 1), got ",
                               o.dropout_p);
  // (The block mask's mask_mod was checked by create_block_mask, against float's 2^24, the tighter bound.)
  check_exact_in<A>(score_mod, {g.B, g.Hq, g.Lq, g.Lkv}, "flex_attention");
  const double scale = o.scale.value_or(g.D > 0 ? 1.0 / std::sqrt(double(g.D)) : 1.0);
  flex::Dropout dropout{o.dropout_p};
  if (dropout.active()) {  // the counters bernoulli_ would reserve for the [B, Hq, Lq, Lkv] mask
    const PhiloxState st = default_generator().philox_state((uint64_t(g.B * g.Hq * g.Lq) * uint64_t(g.Lkv) + 3) / 4);
    dropout.seed = st.seed;
    dropout.start = st.counter;
  }
  const Tensor<T> q = inner_contiguous(query), k = inner_contiguous(key), v = inner_contiguous(value);
  std::vector<CapturedSlot> captured = number_captured(score_mod);
  const Device device = q.device();
  check<std::invalid_argument>(k.device() == device && v.device() == device, "flex_attention: q on ", device.str(),
                               ", k on ", k.device().str(), " and v on ", v.device().str(), "; move them to one device");
  Tensor<T> out(TensorImpl::allocate({g.B, g.Hq, g.Lq, g.Dv}, scalar_type_of<T>(), "flex_attention", device));
  Tensor<A> lse(TensorImpl::allocate({g.B, g.Hq, g.Lq}, scalar_type_of<A>(), "flex_attention", device));
  if (device.is_cuda()) {
#ifdef KILN_WITH_CUDA
    cuda_flex_forward(q, k, v, score_mod, bm, scale, dropout, out, lse);
#endif
  } else {
    const bool ok =
        flex::forward(rows_of(q), rows_of(k), rows_of(v), g, scale, score_mod, bm, dropout, out.data_ptr(), lse.data_ptr());
    check<std::out_of_range>(ok, "flex_attention: the score_mod or mask_mod reads a captured tensor out of its bounds "
                                 "or at a fractional index");
  }
  bool needs_grad = autograd::requires_grad(q.impl()) || autograd::requires_grad(k.impl()) ||
                    autograd::requires_grad(v.impl());
  for (const CapturedSlot& c : captured) needs_grad |= autograd::requires_grad(*c.tensor);
  if (GradMode::is_enabled() && needs_grad) {
    auto node = std::make_shared<FlexAttentionBackward<T, decltype(score_mod), M>>(q, k, v, out, lse, score_mod, bm, g,
                                                                                  scale, dropout, std::move(captured));
    autograd::meta_of(out.impl_ptr()).grad_fn = node;
    autograd::AutogradMeta& lse_meta = autograd::meta_of(lse.impl_ptr());
    lse_meta.grad_fn = node;
    lse_meta.output_nr = 1;
  }
  return {out, lse};
}

}  // namespace detail

// With a block mask (create_block_mask).
template <Dtype T, class F, class M>
AttentionOutput<T> flex_attention_with_lse(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const F& score_mod,
                                           const BlockMask<M>& block_mask, const FlexOptions& options = {}) {
  return detail::flex_attention(q, k, v, score_mod, block_mask, options);
}
// Without a mask (pass NoScoreMod{} for no score modifier either).
template <Dtype T, class F = NoScoreMod>
AttentionOutput<T> flex_attention_with_lse(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                                           const F& score_mod = {}, const FlexOptions& options = {}) {
  check<ShapeError>(q.dim() == 4 && k.dim() == 4, "flex_attention: expected 4-d q [B, Hq, Lq, D] and k [B, Hkv, Lkv, D], got ",
                    q.shape(), " and ", k.shape());
  return detail::flex_attention(q, k, v, score_mod, dense_block_mask(q.size(2), k.size(2)), options);
}
template <Dtype T, class F, class M>
Tensor<T> flex_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const F& score_mod,
                         const BlockMask<M>& block_mask, const FlexOptions& options = {}) {
  return flex_attention_with_lse(q, k, v, score_mod, block_mask, options).output;
}
template <Dtype T, class F = NoScoreMod>
Tensor<T> flex_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const F& score_mod = {},
                         const FlexOptions& options = {}) {
  return flex_attention_with_lse(q, k, v, score_mod, options).output;
}

}  // namespace kiln::attention

#ifdef KILN_WITH_CUDA
#include "kiln/attention/flex_device.hpp"
#endif
