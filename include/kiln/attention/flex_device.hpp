#pragma once
// flex_attention of CUDA tensors: the kernels of attention/flex_cuda.hpp, generated for the call's modifiers, dtype and
// head dims, compiled through NVRTC and cached by their source (cuda/kernel_cache.hpp: a second call with the same
// modifiers compiles nothing), and launched on the tensors' device. attention/flex_attention.hpp calls these in
// programs built with KILN_WITH_CUDA, after the checks both paths share, and includes this header at its end.
//
// A captured tensor read out of its bounds sets an error word that the host reads after the kernel (one
// synchronization per call, only when the modifiers capture a tensor), and the CPU path's exception follows.
#include <algorithm>
#include <vector>

#include "kiln/attention/flex_attention.hpp"
#include "kiln/attention/flex_cuda.hpp"
#include "kiln/cuda/evaluate.hpp"

namespace kiln::attention::detail {

// Tiles that the NVRTC tests compile without spills and within sm_80's shared memory (tests/cuda_null/
// test_flex_kernels.cpp): 64 query rows x 64 keys for head dims up to 64, 64 x 32 up to 128, 32 x 32 up to 256; half
// of each for double (twice the shared memory per element); and never more than the block mask's tiles, which the
// kernel's must divide. The forward runs on tensor cores where `mma` (16-bit tensors on sm_80 or later) and the
// head dims are multiples of 16 up to 128 and the tiles come to at least 16 x 16.
inline FlexKernelConfig device_flex_config(int64_t D, int64_t Dv, size_t compute_bytes, const auto& bm, bool dropout,
                                           bool mma) {
  const int64_t widest = std::max(D, Dv);
  check<std::invalid_argument>(widest <= 256, "flex_attention: head dims D = ", D, ", Dv = ", Dv,
                               " on CUDA; the kernels take at most 256");
  int64_t bq = widest <= 128 ? 64 : 32, bkv = widest <= 64 ? 64 : 32;
  if (compute_bytes == 8) bq /= 2, bkv /= 2;
  const auto dividing = [](int64_t tile, int64_t block) {  // (a power of two: 1 at worst)
    while (block % tile != 0) tile /= 2;
    return int(tile);
  };
  const int block_q = dividing(bq, bm.q_block), block_kv = dividing(bkv, bm.kv_block);
  const bool tensor_cores = mma && D % 16 == 0 && Dv % 16 == 0 && widest <= 128 && block_q % 16 == 0 && block_kv % 16 == 0;
  return {.D = D, .Dv = Dv, .block_q = block_q, .block_kv = block_kv, .threads_per_row = 4, .entry = "kiln_flex",
          .dropout = dropout, .tensor_cores = tensor_cores};
}

// The modifier as the kernels read it: every captured tensor on the attention's device. A host tensor that needs no
// gradient (alibi's slopes, a document's ids) is copied there for the call; one on another device, or a host tensor
// whose gradient is wanted, is refused (moved with .to(device), its gradient flows back through the copy).
template <class Mod>
void move_captured(Mod& mod, Device device, const char* which) {
  mod.each_captured([&](auto& gather) {
    const auto& t = gather.table;
    const bool movable = t.is_cpu() && !t.requires_grad();
    check<std::invalid_argument>(t.device() == device || movable, "flex_attention: the ", which, " reads a tensor of shape ",
                                 t.shape(), " on ", t.device().str(), t.requires_grad() ? " that requires grad" : "",
                                 " while q, k and v are on ", device.str(), "; move it with .to(device)");
    if (t.device() != device) gather.table = t.to(device);
  });
}

// What one call's kernels share: the tile shape, the four kernels, the block mask's states and the error word on the
// device, and the buffers' addresses (filled per pass).
template <Dtype T, class S, class M>
struct DeviceFlex {
  using A = typename FlexBuffers<T>::A;
  Device device;
  S score_mod;
  BlockMask<M> bm;
  cuda::DeviceContext& context;
  FlexKernelConfig cfg;
  FlexKernels kernels;
  Tensor<bool> states, error;  // (bytes: the block mask's states; one int)
  FlexBuffers<T> x;

  DeviceFlex(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const S& mod, const BlockMask<M>& mask,
             double scale, const flex::Dropout& dropout)
      : device(q.device()), score_mod(score_mod_on_device(mod, device)), bm(mask_on_device(mask, device)),
        context(cuda::DeviceContext::get(device.index())),
        cfg(device_flex_config(q.size(3), v.size(3), sizeof(A), mask, dropout.active(), is_half_v<T> && context.arch() >= 80)),
        kernels(flex_kernels<T>(score_mod, bm, cfg)),
        states(empty<bool>({int64_t(mask.state.size())}, device)), error(zeros<bool>({int64_t(sizeof(int))}, device)) {
    static_assert(sizeof(BlockState) == 1);
    if (!mask.state.empty()) context.copy_to_device(states.impl().device_bytes(), mask.state.data(), mask.state.size());
    x.B = q.size(0), x.Hq = q.size(1), x.Hkv = k.size(1), x.Lq = q.size(2), x.Lkv = k.size(2);
    x.q = rows(q), x.k = rows(k), x.v = rows(v);
    x.scale = scale;
    x.dropout_p = dropout.p, x.dropout_seed = dropout.seed, x.dropout_start = dropout.start;
    x.error = reinterpret_cast<int*>(error.impl().device_bytes());
  }
  static BlockMask<M> mask_on_device(const BlockMask<M>& mask, Device device) {
    BlockMask<M> copy = mask;
    move_captured(copy.mask_mod, device, "mask_mod");
    return copy;
  }
  static S score_mod_on_device(S mod, Device device) {
    move_captured(mod, device, "score_mod");
    return mod;
  }
  static typename FlexBuffers<T>::Rows rows(const Tensor<T>& t) {
    return {reinterpret_cast<const T*>(t.impl().device_bytes()), t.stride(0), t.stride(1), t.stride(2)};
  }
  template <Dtype U>
  static U* on_device(const Tensor<U>& t) {
    return t.defined() ? reinterpret_cast<U*>(t.impl().device_bytes()) : nullptr;
  }
  std::vector<uint64_t> descriptor() const { return flex_descriptor(kernels, x, score_mod, bm, states.impl().device_bytes(), cfg); }
  void launch(const cuda::KernelSource& k, const std::vector<uint64_t>& words, int64_t tiles, int threads) {
    context.launch(k, words, {.grid = unsigned(std::clamp<int64_t>(tiles, 1, int64_t(1) << 30)), .block = unsigned(threads)});
  }
  // Throws the CPU path's message if a live pair read a captured tensor out of bounds (waits for the kernels).
  void check_reads(const char* what) {
    if (kernels.captured == 0) return;
    int word = 0;
    context.copy_to_host(&word, error.impl().device_bytes(), sizeof word);
    check<std::out_of_range>(word == 0, what, ": the score_mod or mask_mod reads a captured tensor out of its bounds or at "
                                              "a fractional index");
  }
};

// out [B, Hq, Lq, Dv] and lse [B, Hq, Lq] (contiguous, on q's device) from q, k, v (last dims contiguous).
template <Dtype T, class S, class M>
void cuda_flex_forward(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const S& score_mod,
                       const BlockMask<M>& bm, double scale, const flex::Dropout& dropout, const Tensor<T>& out,
                       const Tensor<lse_t<T>>& lse) {
  DeviceFlex<T, S, M> f(q, k, v, score_mod, bm, scale, dropout);
  f.x.out = f.on_device(out);
  f.x.lse = f.on_device(lse);
  const int64_t q_tiles = (f.x.Lq + f.cfg.block_q - 1) / f.cfg.block_q;
  f.launch(f.kernels.forward, f.descriptor(), f.x.B * f.x.Hq * q_tiles, f.cfg.forward_threads());
  f.check_reads("flex_attention");
}

// The backward on the device: dq, dk, dv (each written where defined) and the gradient of each captured tensor of
// score_mod whose slot in `captured` is defined (zeroed, [its shape] in the compute type; accumulated by atomics).
// dout has its last dim contiguous; dlse is contiguous or undefined.
template <Dtype T, class S, class M>
void cuda_flex_backward(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& out,
                        const Tensor<lse_t<T>>& lse, const Tensor<T>& dout, const Tensor<lse_t<T>>& dlse,
                        const S& score_mod, const BlockMask<M>& bm, double scale, const flex::Dropout& dropout,
                        const Tensor<T>& dq, const Tensor<T>& dk, const Tensor<T>& dv,
                        const std::vector<std::pair<const TensorImpl*, Tensor<lse_t<T>>>>& captured) {
  using A = lse_t<T>;
  DeviceFlex<T, S, M> f(q, k, v, score_mod, bm, scale, dropout);
  auto& x = f.x;
  // The kernels write all three gradients: scratch where the caller wants none.
  const auto target = [&](const Tensor<T>& g, const Shape& shape) { return g.defined() ? g : empty<T>(shape, f.device); };
  const Tensor<T> gq = target(dq, q.shape()), gk = target(dk, k.shape()), gv = target(dv, v.shape());
  // dq is summed by atomic adds: into itself for float and double, into a float accumulator for 16-bit types.
  constexpr bool kSeparateAccumulator = !std::is_same_v<T, A>;
  const Tensor<A> dq_acc = kSeparateAccumulator ? zeros<A>(q.shape(), f.device) : Tensor<A>();
  if constexpr (!kSeparateAccumulator) f.context.fill_zero(gq.impl().device_bytes(), size_t(gq.numel()) * sizeof(T));
  const Tensor<A> delta = empty<A>(lse.shape(), f.device);
  x.out = f.on_device(out);
  x.lse = f.on_device(lse);
  x.dout = f.rows(dout);
  x.dlse = f.on_device(dlse);
  x.delta = f.on_device(delta);
  if constexpr (kSeparateAccumulator) x.dq_acc = f.on_device(dq_acc);
  else x.dq_acc = reinterpret_cast<A*>(f.on_device(gq));
  x.dq = f.on_device(gq), x.dk = f.on_device(gk), x.dv = f.on_device(gv);
  for (const auto& [table, grad] : captured)
    if (grad.defined()) x.captured_grads.push_back({table, f.on_device(grad)});
  const std::vector<uint64_t> words = f.descriptor();
  const int64_t rows = x.B * x.Hq * x.Lq, kv_tiles = (x.Lkv + f.cfg.block_kv - 1) / f.cfg.block_kv;
  f.context.launch(f.kernels.delta, words, kiln::detail::launch_for(rows));
  f.launch(f.kernels.backward, words, x.B * x.Hkv * kv_tiles, f.cfg.backward_threads());
  if constexpr (kSeparateAccumulator) f.context.launch(f.kernels.store_dq, words, kiln::detail::launch_for(rows * q.size(3)));
  f.check_reads("flex_attention backward");
}

}  // namespace kiln::attention::detail
