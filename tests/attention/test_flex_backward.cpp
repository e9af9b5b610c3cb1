// flex_attention's gradients: finite differences (gradcheck, float64) for q, k, v, captured bias tensors and
// the log-sum-exp output, with masks, score modifiers and GQA; float and bfloat16 gradients against the
// float64 ones; fully masked rows give zero gradients, not NaN.
#include <doctest/doctest.h>

#include <kiln/attention.hpp>

#include "flex_reference.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_attention_flex_backward {

using namespace kiln;
using namespace kiln_test;
namespace at = kiln::attention;

namespace {
// Small enough for gradcheck (every element perturbed), with 4 x 4 tiles so lengths 7 and 9 leave tails.
constexpr int64_t kB = 1, kH = 2, kLq = 7, kLkv = 9, kD = 3, kDv = 4;

std::vector<Tensor<double>> qkv(int64_t hq, int64_t hkv, uint64_t seed) {
  Generator g(seed);
  return {randn<double>({kB, hq, kLq, kD}, &g), randn<double>({kB, hkv, kLkv, kD}, &g), randn<double>({kB, hkv, kLkv, kDv}, &g)};
}
}  // namespace

TEST_CASE("flex_attention backward: q, k, v by finite differences, dense and under each kind of mask") {
  const auto in = qkv(kH, kH, 11);
  SUBCASE("dense") {
    CHECK(autograd::gradcheck([](const std::vector<Tensor<double>>& x) { return at::flex_attention(x[0], x[1], x[2]); }, in));
  }
  SUBCASE("causal, in 4 x 4 tiles") {
    const auto bm = at::create_block_mask(at::causal(), 1, 1, kLq, kLkv, 4, 4);
    CHECK(autograd::gradcheck([&](const std::vector<Tensor<double>>& x) { return at::flex_attention(x[0], x[1], x[2], at::NoScoreMod{}, bm); }, in));
  }
  SUBCASE("sliding window with soft-capping and a scale") {
    const auto bm = at::create_block_mask(at::sliding_window(3), 1, 1, kLq, kLkv, 4, 4);
    CHECK(autograd::gradcheck([&](const std::vector<Tensor<double>>& x) {
      return at::flex_attention(x[0], x[1], x[2], at::soft_cap(1.5), bm, {.scale = 0.8});
    }, in));
  }
  SUBCASE("prefix LM with ALiBi") {
    const auto bm = at::create_block_mask(at::prefix_lm(3), 1, 1, kLq, kLkv, 4, 4);
    CHECK(autograd::gradcheck([&](const std::vector<Tensor<double>>& x) {
      return at::flex_attention(x[0], x[1], x[2], at::alibi(kH), bm);
    }, in));
  }
  SUBCASE("a modifier with where, min, max, exp, sigmoid, division") {
    auto mod = [](auto s, auto, auto h, auto q, auto kv) {
      return at::where(q >= kv, at::minimum(s, 1.0) * at::sigmoid(s), at::maximum(s, -0.5) / (2.0 + h)) + at::exp(s * 0.1);
    };
    CHECK(autograd::gradcheck([&](const std::vector<Tensor<double>>& x) { return at::flex_attention(x[0], x[1], x[2], mod); }, in));
  }
}

TEST_CASE("flex_attention backward: grouped-query attention sums each key/value head over its query heads") {
  const auto in = qkv(4, 2, 12);
  const auto bm = at::create_block_mask(at::causal(), 1, 1, kLq, kLkv, 4, 4);
  CHECK(autograd::gradcheck([&](const std::vector<Tensor<double>>& x) {
    return at::flex_attention(x[0], x[1], x[2], at::alibi(4), bm, {.enable_gqa = true});
  }, in));
}

TEST_CASE("flex_attention backward: a captured bias table gets its gradient (relative position bias)") {
  auto in = qkv(kH, kH, 13);
  Generator g(14);
  in.push_back(randn<double>({kH, kLq + kLkv - 1}, &g));
  const auto bm = at::create_block_mask(at::causal(), 1, 1, kLq, kLkv, 4, 4);
  CHECK(autograd::gradcheck([&](const std::vector<Tensor<double>>& x) {
    return at::flex_attention(x[0], x[1], x[2], at::relative_position_bias(x[3], kLkv), bm);
  }, in));
  // Two captured tensors, one used twice, one a per-head scale: products and sums of gathers.
  in.back() = randn<double>({kH, kLq + kLkv - 1}, &g);
  in.push_back(randn<double>({kH}, &g));
  CHECK(autograd::gradcheck([&](const std::vector<Tensor<double>>& x) {
    const auto bias = at::captured(x[3]);
    const auto gain = at::captured(x[4]);
    auto mod = [&](auto s, auto, auto h, auto q, auto kv) { return s * gain(h) + bias(h, q - kv + double(kLkv - 1)) * bias(h, 0.0); };
    return at::flex_attention(x[0], x[1], x[2], mod, bm);
  }, in));
}

TEST_CASE("flex_attention backward: the log-sum-exp output is differentiable") {
  const auto in = qkv(kH, kH, 15);
  const auto bm = at::create_block_mask(at::causal(), 1, 1, kLq, kLkv, 4, 4);
  CHECK(autograd::gradcheck([&](const std::vector<Tensor<double>>& x) {
    return at::flex_attention_with_lse(x[0], x[1], x[2], at::soft_cap(2.0), bm).lse;
  }, in));
  // Both outputs at once: out * 1 + lse broadcast.
  CHECK(autograd::gradcheck([&](const std::vector<Tensor<double>>& x) {
    const auto r = at::flex_attention_with_lse(x[0], x[1], x[2], at::NoScoreMod{}, bm);
    return Tensor<double>(r.output + r.lse.unsqueeze(3));
  }, in));
}

TEST_CASE("flex_attention backward: fully masked rows give zero gradients, not NaN") {
  auto in = qkv(kH, kH, 16);
  for (auto& t : in) t.requires_grad_();
  const auto bm = at::create_block_mask([](auto, auto, auto q, auto kv) { return (q >= 3.0) & (q >= kv); }, 1, 1, kLq, kLkv, 4, 4);
  sum(at::flex_attention(in[0], in[1], in[2], at::NoScoreMod{}, bm)).backward();
  const auto dq = values(in[0].grad());
  for (double x : dq) CHECK(std::isfinite(x));
  for (int64_t i = 0; i < 3 * kD; ++i) CHECK(dq[size_t(i)] == 0.0);  // head 0, rows 0..2
  for (double x : values(in[1].grad())) CHECK(std::isfinite(x));
}

TEST_CASE("flex_attention backward: float and bfloat16 gradients against float64, stated tolerances") {
  const int64_t L = 45, D = 8;
  Generator g(17);
  const Tensor<double> q = randn<double>({2, 2, L, D}, &g), k = randn<double>({2, 2, L, D}, &g), v = randn<double>({2, 2, L, D}, &g);
  const Tensor<double> dout = randn<double>({2, 2, L, D}, &g);
  const auto bm = at::create_block_mask(at::causal(), 1, 1, L, L, 16, 16);
  auto grads = [&]<class T>(Tensor<T> a, Tensor<T> b, Tensor<T> c) {
    for (auto* t : {&a, &b, &c}) {
      *t = t->detach().clone();  // a leaf of its own, so q stays without grad for the later casts
      t->requires_grad_();
    }
    at::flex_attention(a, b, c, at::soft_cap(3.0), bm).backward(dout.to<T>());
    return std::vector<std::vector<double>>{values(a.grad()), values(b.grad()), values(c.grad())};
  };
  const auto exact = grads(q, k, v);
  const auto f = grads(q.to<float>(), k.to<float>(), v.to<float>());
  for (size_t i = 0; i < 3; ++i) CHECK(within(f[i], exact[i], 1e-4, 1e-5));
  // bf16: the reference from the bf16-rounded inputs and upstream gradient. The gradients are rounded once to
  // bf16 (2^-9 relative), and delta = rowsum(dO * O) uses the saved bf16 output (as FlashAttention does):
  // about 2^-9 * sum |dO O| = 0.005 here, which reaches dS = P (dP - delta) as an absolute error (measured
  // up to 0.0047 on these inputs).
  const Tensor<bfloat16> qb = q.to<bfloat16>(), kb = k.to<bfloat16>(), vb = v.to<bfloat16>();
  const auto rounded = [&] {
    Tensor<double> a = qb.to<double>(), b = kb.to<double>(), c = vb.to<double>();
    for (auto* t : {&a, &b, &c}) t->requires_grad_();
    at::flex_attention(a, b, c, at::soft_cap(3.0), bm).backward(dout.to<bfloat16>().to<double>());
    return std::vector<std::vector<double>>{values(a.grad()), values(b.grad()), values(c.grad())};
  }();
  const auto h = grads(qb, kb, vb);
  for (size_t i = 0; i < 3; ++i) CHECK(within(h[i], rounded[i], 0x1p-7, 1e-2));
}

TEST_CASE("flex_attention: head dims of whole vectors (kiln/cpu/gemm_tile.hpp's products) against the materialized path") {
  // D = 32 and Dv = 48 take the in-place tile products forward (P V) and backward (dV, dQ, dK) in float and
  // double; the reference is materialized_attention in float64 (Eigen's GEMM, softmax, autograd). Row counts
  // leave a ragged last block (45 and 53 are not multiples of its 6 rows, nor of the 16-row tiles); dense (one
  // tile) and causal (16 x 16 tiles), GQA.
  Generator g(29);
  const int64_t Lq = 45, Lkv = 53, D = 32, Dv = 48;
  const Tensor<double> q = randn<double>({2, 4, Lq, D}, &g), k = randn<double>({2, 2, Lkv, D}, &g),
                       v = randn<double>({2, 2, Lkv, Dv}, &g), dout = randn<double>({2, 4, Lq, Dv}, &g);
  const auto bm = at::create_block_mask(at::causal(), 1, 1, Lq, Lkv, 16, 16);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    auto run = [&]<class T>(const Tensor<T>& a0, const Tensor<T>& b0, const Tensor<T>& c0, bool materialized) {
      std::vector<Tensor<T>> x{a0.detach().clone(), b0.detach().clone(), c0.detach().clone()};
      for (auto& t : x) t.requires_grad_();
      const Tensor<T> out =
          materialized ? at::materialized_attention(x[0], x[1], x[2], Tensor<bool>(), 0.0, causal).output
          : causal     ? at::flex_attention(x[0], x[1], x[2], at::NoScoreMod{}, bm, {.enable_gqa = true})
                       : at::flex_attention(x[0], x[1], x[2], at::NoScoreMod{}, {.enable_gqa = true});
      out.backward(dout.to<T>());
      return std::vector<std::vector<double>>{values(out), values(x[0].grad()), values(x[1].grad()), values(x[2].grad())};
    };
    const auto exact = run(q, k, v, true), d = run(q, k, v, false), f = run(q.to<float>(), k.to<float>(), v.to<float>(), false);
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(within(d[i], exact[i], 1e-10, 1e-12));
      CHECK(within(f[i], exact[i], 1e-4, 1e-5));
    }
  }
}

TEST_CASE("flex_attention backward: a frozen k and v get no gradient, q's is the same") {
  auto all = qkv(kH, kH, 18);
  auto only_q = std::vector<Tensor<double>>{all[0].clone(), all[1].clone(), all[2].clone()};
  for (auto& t : all) t.requires_grad_();
  only_q[0].requires_grad_();
  const Tensor<double> g = randn<double>({kB, kH, kLq, kDv});
  at::flex_attention(all[0], all[1], all[2], at::soft_cap(2.0)).backward(g);
  at::flex_attention(only_q[0], only_q[1], only_q[2], at::soft_cap(2.0)).backward(g);
  CHECK(values(only_q[0].grad()) == values(all[0].grad()));
  CHECK(!only_q[1].grad().defined());
  CHECK(!only_q[2].grad().defined());
}

TEST_CASE("flex_attention dropout: gradients by finite differences, the mask the same on every call after one seed") {
  const auto in = qkv(4, 2, 19);
  const auto bm = at::create_block_mask(at::causal(), 1, 1, kLq, kLkv, 4, 4);
  CHECK(autograd::gradcheck([&](const std::vector<Tensor<double>>& x) {
    manual_seed(23);  // the same mask for every evaluation; the backward regenerates it from the node's counters
    return at::flex_attention(x[0], x[1], x[2], at::alibi(4), bm, {.enable_gqa = true, .dropout_p = 0.3});
  }, in));
  CHECK_THROWS_AS(at::flex_attention(in[0], in[1], in[2], at::NoScoreMod{}, bm, {.enable_gqa = true, .dropout_p = 1.0}),
                  std::invalid_argument);
}

TEST_CASE("flex_attention dropout: zeroes what dropout after a materialized softmax zeroes, from the same generator state") {
  // Lengths across several 128-wide tiles with tails, grouped-query heads; output and every gradient.
  Generator g(31);
  const Tensor<float> q = randn<float>({2, 4, 37, 16}, &g), k = randn<float>({2, 2, 150, 16}, &g),
                      v = randn<float>({2, 2, 150, 8}, &g), dout = randn<float>({2, 4, 37, 8}, &g);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    auto run = [&](bool fused, double p) {
      std::vector<Tensor<float>> x{q.clone(), k.clone(), v.clone()};
      for (auto& t : x) t.requires_grad_();
      manual_seed(5);
      const Tensor<float> out =
          fused ? nn::functional::scaled_dot_product_attention(x[0], x[1], x[2], Tensor<bool>(), p, causal, {}, true)
                : at::materialized_attention(x[0], x[1], x[2], Tensor<bool>(), p, causal).output;
      out.backward(dout);
      return std::vector<std::vector<double>>{values(out), values(x[0].grad()), values(x[1].grad()), values(x[2].grad())};
    };
    const auto fused = run(true, 0.3), materialized = run(false, 0.3);
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(within(fused[i], materialized[i], 1e-4, 1e-5));
    }
    CHECK(max_abs_diff(fused[0], run(true, 0.0)[0]) > 0.01);  // and the dropout did something
  }
}

}  // namespace test_attention_flex_backward
