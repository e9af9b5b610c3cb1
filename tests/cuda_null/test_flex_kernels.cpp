// flex_attention's generated CUDA kernels (attention/flex_cuda.hpp) without a GPU: run on the host shim (a thread per
// CUDA thread, barriers for __syncthreads) against the CPU kernels (output, log-sum-exp, dq, dk, dv and captured
// tensors' gradients) for the ready-made modifiers, GQA, lengths that are not multiples of the tiles, fully masked
// rows, bfloat16 and double, and the tensor-core kernels for bfloat16 and float16 (the shim emulating mma.sync's
// fragments); and compiled by NVRTC for sm_80 and sm_90 without register spills at the tile shapes a
// GPU would run.
#include <doctest/doctest.h>

#include <memory>

#include "compare.hpp"
#include "host_shim.hpp"
#include "kiln/attention.hpp"
#include "kiln/attention/flex_cuda.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_null_flex_kernels {

using namespace kiln;
using namespace kiln::test;
namespace at = kiln::attention;

namespace {

// Small tiles (8 x 8 kernel tiles inside the block mask's 16 x 16), so short sequences cross several tiles and
// the mask's state is shared by sub-tiles; 2 threads per row and key.
at::FlexKernelConfig small_config(int64_t D, int64_t Dv, const std::string& entry) {
  return {.D = D, .Dv = Dv, .block_q = 8, .block_kv = 8, .threads_per_row = 2, .entry = entry};
}

// The tensor-core forward's small tiles: two warps of 16 query rows, 16 keys a step (inside the block mask's 32 x 32).
at::FlexKernelConfig mma_config(int64_t D, int64_t Dv, const std::string& entry) {
  return {.D = D, .Dv = Dv, .block_q = 32, .block_kv = 16, .threads_per_row = 2, .entry = entry, .tensor_cores = true};
}

// How a problem runs: on which forward, and with q, k and v's rows `row_pad` elements apart beyond their length (the
// tensor-core forward's copies are 16 bytes at a time only where every row starts 16-byte aligned).
struct Variant {
  bool tensor_cores = false;
  int64_t row_pad = 0;
};

// A copy of t, a leaf of its own, whose rows lie `pad` elements apart beyond their length.
template <Dtype T>
Tensor<T> with_row_padding(const Tensor<T>& t, int64_t pad) {
  const int64_t B = t.size(0), H = t.size(1), L = t.size(2), D = t.size(3), row = D + pad;
  T* data = new T[size_t(B * H * L * row)]();
  Tensor<T> copy = from_blob(data, t.shape(), {H * L * row, L * row, row, 1}, [](void* p) { delete[] static_cast<T*>(p); });
  copy.copy_(t);
  return copy;
}

// One attention problem: the four kernels run in order on the shim (forward, delta, backward, store_dq), each
// output checked against flex_attention on the CPU with the same inputs, block mask and modifier.
template <Dtype T>
struct Problem {
  using A = typename at::FlexBuffers<T>::A;
  Tensor<T> q, k, v, dout;
  std::vector<Tensor<float>> captured;  // float tensors the score_mod reads, whose gradients are checked
  Tensor<T> out, dq, dk, dv;
  Tensor<A> lse, delta, dq_acc;
  std::vector<Tensor<A>> captured_grads;
  std::vector<uint8_t> states;
  int error = 0;
  std::shared_ptr<const void> modifiers;  // the score_mod and block mask, whose captured tensors the kernels read
};

template <Dtype T, class F, class M>
void add_problem(ShimSuite& s, const std::string& label, Tensor<T> q, Tensor<T> k, Tensor<T> v,
                 std::vector<Tensor<float>> captured, const F& score_mod, const at::BlockMask<M>& bm, double tol,
                 at::FlexOptions options = {}, Variant variant = {}) {
  using A = typename Problem<T>::A;
  auto p = std::make_shared<Problem<T>>();
  const int64_t B = q.size(0), Hq = q.size(1), Hkv = k.size(1), Lq = q.size(2), Lkv = k.size(2), D = q.size(3),
                Dv = v.size(3);
  Generator g(uint64_t(label.size()) * 7919);
  for (Tensor<T>* t : {&q, &k, &v}) *t = with_row_padding(*t, variant.row_pad);  // (their gradients are this problem's alone)
  p->q = q;
  p->k = k;
  p->v = v;
  p->dout = randn<float>({B, Hq, Lq, Dv}, &g).to<T>();
  p->captured = captured;
  p->modifiers = std::make_shared<const std::pair<F, at::BlockMask<M>>>(score_mod, bm);

  // The CPU's answer.
  for (Tensor<T>* t : {&q, &k, &v}) t->requires_grad_();
  for (Tensor<float>& c : captured) c.requires_grad_();
  const auto ref = at::flex_attention_with_lse(q, k, v, score_mod, bm, options);
  sum(ref.output.template to<double>() * p->dout.template to<double>()).backward();
  const double scale = options.scale.value_or(1 / std::sqrt(double(D)));

  p->out = zeros<T>({B, Hq, Lq, Dv});
  p->lse = zeros<A>({B, Hq, Lq});
  p->delta = zeros<A>({B, Hq, Lq});
  p->dq_acc = zeros<A>({B, Hq, Lq, D});
  p->dq = zeros<T>({B, Hq, Lq, D});
  p->dk = zeros<T>({B, Hkv, Lkv, D});
  p->dv = zeros<T>({B, Hkv, Lkv, Dv});
  for (const Tensor<float>& c : captured) p->captured_grads.push_back(zeros<A>(c.shape()));
  for (at::BlockState st : bm.state) p->states.push_back(uint8_t(st));

  at::FlexBuffers<T> x;
  x.B = B, x.Hq = Hq, x.Hkv = Hkv, x.Lq = Lq, x.Lkv = Lkv;
  const auto rows = [](const Tensor<T>& t) {
    return typename at::FlexBuffers<T>::Rows{t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)};
  };
  x.q = rows(p->q), x.k = rows(p->k), x.v = rows(p->v), x.dout = rows(p->dout);
  x.out = p->out.data_ptr();
  x.lse = p->lse.data_ptr();
  x.scale = scale;
  x.error = &p->error;
  x.delta = p->delta.data_ptr();
  x.dq_acc = p->dq_acc.data_ptr();
  x.dq = p->dq.data_ptr(), x.dk = p->dk.data_ptr(), x.dv = p->dv.data_ptr();
  for (size_t i = 0; i < captured.size(); ++i)
    x.captured_grads.push_back({captured[i].impl_ptr().get(), p->captured_grads[i].data_ptr()});

  const at::FlexKernelConfig cfg = variant.tensor_cores ? mma_config(D, Dv, s.entry("flex_mma")) : small_config(D, Dv, s.entry("flex"));
  const at::FlexKernels ks = at::flex_kernels<T>(score_mod, bm, cfg);
  const std::vector<uint64_t> words = at::flex_descriptor(ks, x, score_mod, bm, p->states.data(), cfg);
  for (const cuda::KernelSource* k : {&ks.forward, &ks.delta, &ks.backward, &ks.store_dq}) s.add_kernel(*k);

  const std::vector<double> want_out = values_of(ref.output), want_lse = values_of(ref.lse), want_dq = values_of(q.grad()),
                            want_dk = values_of(k.grad()), want_dv = values_of(v.grad());
  std::vector<std::vector<double>> want_captured;
  for (const Tensor<float>& c : captured) want_captured.push_back(values_of(c.grad()));
  s.add_run(label + ": forward", ks.forward, words, [=] {
    CHECK(p->error == 0);
    expect_close(values_of(p->out), want_out, tol, label + ": output");
    expect_close(values_of(p->lse), want_lse, tol, label + ": lse");
  });
  s.add_run(label + ": delta", ks.delta, words, [] {});
  s.add_run(label + ": backward", ks.backward, words, [=] {
    CHECK(p->error == 0);
    expect_close(values_of(p->dk), want_dk, tol, label + ": dk");
    expect_close(values_of(p->dv), want_dv, tol, label + ": dv");
    for (size_t i = 0; i < want_captured.size(); ++i)
      expect_close(values_of(p->captured_grads[i]), want_captured[i], tol, label + ": captured gradient");
  });
  s.add_run(label + ": store_dq", ks.store_dq, words, [=] { expect_close(values_of(p->dq), want_dq, tol, label + ": dq"); });
}

template <Dtype T>
std::vector<Tensor<T>> qkv(int64_t B, int64_t Hq, int64_t Hkv, int64_t Lq, int64_t Lkv, int64_t D, int64_t Dv, uint64_t seed) {
  Generator g(seed);
  return {randn<float>({B, Hq, Lq, D}, &g).to<T>(), randn<float>({B, Hkv, Lkv, D}, &g).to<T>(),
          randn<float>({B, Hkv, Lkv, Dv}, &g).to<T>()};
}

ShimSuite& problems() {
  static ShimSuite s;
  static const bool filled = [] {
    constexpr double kFloat = 2e-5;
    {  // dense, no modifier; lengths off the tiles
      const auto x = qkv<float>(2, 2, 2, 21, 27, 8, 12, 1);
      add_problem(s, "dense", x[0], x[1], x[2], {}, at::NoScoreMod{}, at::dense_block_mask(21, 27, 16, 16), kFloat);
    }
    {  // causal with ALiBi, GQA (4 query heads over 2 key/value heads), a scale
      const auto x = qkv<float>(1, 4, 2, 29, 29, 8, 8, 2);
      add_problem(s, "causal + alibi, GQA", x[0], x[1], x[2], {}, at::alibi(4), at::create_block_mask(at::causal(), 1, 1, 29, 29, 16, 16),
                  kFloat, {.scale = 0.7, .enable_gqa = true});
    }
    {  // sliding window with soft-capping
      const auto x = qkv<float>(1, 2, 2, 33, 33, 8, 8, 3);
      add_problem(s, "sliding window + soft cap", x[0], x[1], x[2], {}, at::soft_cap(2.0),
                  at::create_block_mask(at::sliding_window(5), 1, 1, 33, 33, 16, 16), kFloat);
    }
    {  // document mask (a captured integer tensor in the mask) and prefix LM: some query rows see no key at all
      Tensor<int64_t> docs = empty<int64_t>({24});
      for (int64_t i = 0; i < 24; ++i) docs.data_ptr()[i] = i < 7 ? 0 : i < 18 ? 1 : 2;
      const auto x = qkv<float>(1, 2, 2, 24, 24, 8, 8, 4);
      add_problem(s, "document & prefix LM", x[0], x[1], x[2], {}, at::NoScoreMod{},
                  at::create_block_mask(at::document(docs) & at::prefix_lm(4), 1, 1, 24, 24, 16, 16), kFloat);
      const auto none = at::create_block_mask((at::placeholders::kv_idx > at::placeholders::q_idx + 30.0) |
                                                  (at::placeholders::q_idx < 5.0),
                                              1, 2, 24, 24, 16, 16);
      add_problem(s, "rows with every key masked", x[0], x[1], x[2], {}, at::NoScoreMod{}, none, kFloat);
    }
    {  // a learned relative position bias (captured, with gradient), and a gain per head read twice
      const auto x = qkv<float>(2, 2, 2, 19, 23, 8, 8, 5);
      Generator g(6);
      const Tensor<float> table = randn<float>({2, 19 + 23 - 1}, &g), gain = randn<float>({2}, &g);
      const auto bias = at::captured(table);
      const auto scale = at::captured(gain);
      auto mod = [=](auto sc, auto, auto h, auto q, auto kv) {
        return sc * scale(h) + bias(h, q - kv + 22.0) * scale(h) + at::exp(sc * 0.1);
      };
      add_problem(s, "captured bias and gain", x[0], x[1], x[2], {table, gain}, mod,
                  at::create_block_mask(at::causal(), 1, 1, 19, 23, 16, 16), kFloat);
    }
    {  // every modifier node: where, min, max, division, sigmoid, abs, sqrt, log, negation, !, |
      const auto x = qkv<float>(1, 2, 2, 17, 17, 8, 8, 7);
      auto mod = [](auto sc, auto b, auto h, auto q, auto kv) {
        return at::where(q >= kv, at::minimum(sc, 1.0) * at::sigmoid(sc), at::maximum(sc, -0.5) / (2.0 + h)) +
               at::sqrt(at::abs(sc) + 1.0) - at::log(at::abs(sc) + 2.0) + -(sc * 0.25) + b;
      };
      using namespace at::placeholders;
      add_problem(s, "every node", x[0], x[1], x[2], {}, mod,
                  at::create_block_mask((!(kv_idx > q_idx + 3.0)) | (h == 1.0), 1, 2, 17, 17, 16, 16), kFloat);
    }
    {  // double
      const auto x = qkv<double>(1, 2, 1, 18, 20, 8, 4, 8);
      add_problem(s, "double, causal + soft cap, GQA", x[0], x[1], x[2], {}, at::soft_cap(3.0),
                  at::create_block_mask(at::causal(), 1, 1, 18, 20, 16, 16), 1e-12, {.enable_gqa = true});
    }
    {  // bfloat16 (stored 16-bit, computed in float: the rounding of each stored value may differ by one step)
      const auto x = qkv<bfloat16>(1, 2, 2, 20, 20, 8, 8, 9);
      add_problem(s, "bfloat16, causal + alibi", x[0], x[1], x[2], {}, at::alibi(2),
                  at::create_block_mask(at::causal(), 1, 1, 20, 20, 16, 16), 1e-2);
    }
    {  // the tensor-core forward: bfloat16 and float16, two warps, lengths off the tiles, GQA, a captured bias with its
       // gradient, rows with every key masked; 16-byte copies, and 16-bit ones where the rows are not aligned. P is
       // rounded to 16 bits before its product with V, as in FlashAttention: outputs stay within a bfloat16 step of the
       // CPU's, and the backward's sums with cancellation (dk, dq), which read that output, within two.
      const auto x = qkv<bfloat16>(2, 4, 2, 45, 37, 16, 32, 11);
      add_problem(s, "tensor cores, bfloat16, causal + alibi, GQA", x[0], x[1], x[2], {}, at::alibi(4),
                  at::create_block_mask(at::causal(), 1, 1, 45, 37, 32, 32), 2e-2, {.enable_gqa = true}, {.tensor_cores = true});
      add_problem(s, "tensor cores, bfloat16, dense, rows 3 elements apart", x[0], x[1], x[2], {}, at::NoScoreMod{},
                  at::dense_block_mask(45, 37, 32, 32), 2e-2, {.enable_gqa = true}, {.tensor_cores = true, .row_pad = 3});
      const auto y = qkv<float16>(1, 2, 2, 50, 50, 32, 16, 12);
      Generator g(13);
      const Tensor<float> table = randn<float>({2, 99}, &g);
      const auto bias = at::captured(table);
      auto mod = [=](auto sc, auto, auto h, auto q, auto kv) { return sc + bias(h, q - kv + 49.0); };
      using namespace at::placeholders;
      add_problem(s, "tensor cores, float16, sliding window + bias, masked rows", y[0], y[1], y[2], {table}, mod,
                  at::create_block_mask(at::sliding_window(6) & (q_idx > 3.0), 1, 1, 50, 50, 32, 32), 5e-3, {},
                  {.tensor_cores = true});
    }
    return true;
  }();
  (void)filled;
  return s;
}

}  // namespace

TEST_CASE("flex_attention's CUDA kernels, run on the host, give the CPU kernels' outputs and gradients") {
  ShimSuite& s = problems();
  CHECK(s.runs() == 12 * 4);
  s.run_all();
}

TEST_CASE("flex_attention's CUDA kernels compile with NVRTC for sm_80 and sm_90 without register spills") {
  problems().check_nvrtc({80, 90}, "flex_small.cu");
  // The tile shapes a GPU would run: D = 64 and 128, float and bfloat16, with a captured bias and a causal mask, with
  // and without dropout.
  ShimSuite gpu;
  const Tensor<float> table = zeros<float>({8, 4095});
  for (int64_t D : {64, 128}) {
    const at::FlexKernelConfig cfg{.D = D, .Dv = D, .block_q = 64, .block_kv = D == 64 ? 64 : 32, .threads_per_row = 4,
                                   .entry = gpu.entry("flex")};
    const auto bm = at::create_block_mask(at::causal(), 1, 1, 2048, 2048, 128, 128);
    const auto ks = at::flex_kernels<bfloat16>(at::relative_position_bias(table, 2048), bm, cfg);
    const auto kf = at::flex_kernels<float>(at::NoScoreMod{}, at::dense_block_mask(2048, 2048), {.D = D, .Dv = D, .entry = gpu.entry("flexf")});
    // With dropout (its Philox rounds inlined in the forward and the backward).
    at::FlexKernelConfig dropping = cfg;
    dropping.entry = gpu.entry("flexd");
    dropping.dropout = true;
    const auto kd = at::flex_kernels<bfloat16>(at::relative_position_bias(table, 2048), bm, dropping);
    // The tensor-core forward (flex_device.hpp's tiles), bfloat16 with dropout and float16.
    at::FlexKernelConfig mma = cfg;
    mma.entry = gpu.entry("flext");
    mma.tensor_cores = mma.dropout = true;
    const auto kt = at::flex_kernels<bfloat16>(at::relative_position_bias(table, 2048), bm, mma);
    mma.entry = gpu.entry("flexh");
    mma.dropout = false;
    const auto kh = at::flex_kernels<float16>(at::NoScoreMod{}, bm, mma);
    for (const auto* set : {&ks, &kf, &kd, &kt, &kh})
      for (const cuda::KernelSource* k : {&set->forward, &set->delta, &set->backward, &set->store_dq}) {
        CHECK(k->shared_bytes <= at::kMaxSharedBytes);
        gpu.add_kernel(*k);
      }
  }
  gpu.check_nvrtc({80, 90}, "flex_gpu.cu");
}

TEST_CASE("flex_attention's CUDA kernels: bad tiles and captured reads out of bounds") {
  const auto bm = at::create_block_mask(at::causal(), 1, 1, 20, 20, 16, 16);
  const auto x = qkv<float>(1, 1, 1, 20, 20, 8, 8, 10);
  at::FlexBuffers<float> buf;
  buf.B = 1, buf.Hq = 1, buf.Hkv = 1, buf.Lq = 20, buf.Lkv = 20;
  const at::FlexKernelConfig cfg{.D = 8, .Dv = 8, .block_q = 12, .block_kv = 8};
  const auto ks = at::flex_kernels<float>(at::NoScoreMod{}, bm, cfg);
  CHECK_THROWS_WITH_AS(at::flex_descriptor(ks, buf, at::NoScoreMod{}, bm, bm.state.data(), cfg),
                       doctest::Contains("kernel tiles of 12 x 8 must divide the block mask's 16 x 16"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(at::flex_kernels<float>(at::NoScoreMod{}, bm, {.D = 256, .Dv = 256, .block_q = 128, .block_kv = 128, .threads_per_row = 2}),
                       doctest::Contains("bytes of shared memory"), std::invalid_argument);

  CHECK_THROWS_WITH_AS(at::flex_kernels<float>(at::NoScoreMod{}, bm, {.D = 16, .Dv = 16, .block_q = 16, .block_kv = 16, .tensor_cores = true}),
                       doctest::Contains("the tensor-core forward takes bfloat16 or float16 with D, Dv and the tiles "
                                         "multiples of 16, not float32"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(at::flex_kernels<bfloat16>(at::NoScoreMod{}, bm, {.D = 24, .Dv = 16, .block_q = 16, .block_kv = 16, .tensor_cores = true}),
                       doctest::Contains("with D = 24, Dv = 16, tiles 16 x 16"), std::invalid_argument);
  {  // An output that the tensor-core kernels could not store in pairs.
    const at::FlexKernelConfig mma{.D = 16, .Dv = 16, .block_q = 16, .block_kv = 16, .tensor_cores = true};
    const auto kt = at::flex_kernels<bfloat16>(at::NoScoreMod{}, bm, mma);
    at::FlexBuffers<bfloat16> odd;
    odd.B = 1, odd.Hq = 1, odd.Hkv = 1, odd.Lq = 20, odd.Lkv = 20;
    std::vector<bfloat16> storage(2 * 20 * 16 + 1);
    odd.out = storage.data() + 1;
    CHECK_THROWS_WITH_AS(at::flex_descriptor(kt, odd, at::NoScoreMod{}, bm, bm.state.data(), mma),
                         doctest::Contains("the tensor-core kernels need out, dk and dv 4-byte aligned"), std::invalid_argument);
  }

  // A bias read past its table where the pair is live sets the error word; where masked, it does not.
  const Tensor<float> table = zeros<float>({1, 10});
  const auto bias = at::captured(table);
  auto mod = [=](auto sc, auto, auto h, auto q, auto) { return sc + bias(h, q); };  // q reaches 19
  for (const bool masked : {false, true}) {
    using namespace at::placeholders;
    const auto mask = at::create_block_mask(q_idx < (masked ? 10.0 : 20.0), 1, 1, 20, 20, 16, 16);
    at::FlexBuffers<float> b = buf;
    Tensor<float> out = zeros<float>({1, 1, 20, 8}), lse = zeros<float>({1, 1, 20});
    int error = 0;
    b.q = {x[0].data_ptr(), x[0].stride(0), x[0].stride(1), x[0].stride(2)};
    b.k = {x[1].data_ptr(), x[1].stride(0), x[1].stride(1), x[1].stride(2)};
    b.v = {x[2].data_ptr(), x[2].stride(0), x[2].stride(1), x[2].stride(2)};
    b.out = out.data_ptr();
    b.lse = lse.data_ptr();
    b.error = &error;
    const at::FlexKernelConfig c8 = small_config(8, 8, kiln::detail::cat("flex_bad_", masked));
    const auto kb = at::flex_kernels<float>(mod, mask, c8);
    std::vector<uint8_t> states;
    for (at::BlockState st : mask.state) states.push_back(uint8_t(st));
    const auto words = at::flex_descriptor(kb, b, mod, mask, states.data(), c8);
    HostShim shim;
    shim.add(kb.forward);
    shim.build();
    shim.run(kb.forward.entry, words);
    CHECK(error == (masked ? 0 : 1));
  }
}

}  // namespace test_cuda_null_flex_kernels
