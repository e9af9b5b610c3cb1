// flex_attention, scaled_dot_product_attention and nn::MultiheadAttention of CUDA tensors (attention/flex_device.hpp):
// the same call on the CPU and on cuda:0, outputs, log-sum-exps and every gradient (q, k, v, captured tensors,
// the module's parameters) compared, for the ready-made modifiers, GQA, lengths off the kernels' 64-row tiles,
// captured tensors on the device and on the host, dropout, double, bfloat16 and float16 (the forward on tensor cores
// where the head dims allow); and the refusals. On the emulated device in CI, on a GPU by tests/gpu/run.sh.
#include <doctest/doctest.h>

#include <limits>
#include <string>

#include "kiln/attention.hpp"
#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"

#include "compare.hpp"
#include "device_kind.hpp"

namespace test_cuda_emulated_attention {

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::emulated_driver;
namespace at = kiln::attention;

namespace {

auto no_device() { return doctest::skip(!cuda::is_available()); }

const Device kCuda0(kCUDA, 0);

template <Dtype T>
std::vector<Tensor<T>> qkv(int64_t B, int64_t Hq, int64_t Hkv, int64_t Lq, int64_t Lkv, int64_t D, int64_t Dv,
                           uint64_t seed) {
  Generator g(seed);
  return {randn<float>({B, Hq, Lq, D}, &g).to<T>(), randn<float>({B, Hkv, Lkv, D}, &g).to<T>(),
          randn<float>({B, Hkv, Lkv, Dv}, &g).to<T>()};
}

// attend(q, k, v, captured) on the CPU and on cuda:0 (every input moved there first): output and lse agree, and so
// do the gradients of q, k, v and of each captured tensor for the loss sum(out * r) + sum(lse * s), r and s random.
template <Dtype T, class Attend>
void expect_same(const std::vector<Tensor<T>>& x, const std::vector<Tensor<float>>& captured, const Attend& attend,
                 double tol, const std::string& what) {
  std::vector<Tensor<T>> xc, xd;
  std::vector<Tensor<float>> cc, cd;
  for (const Tensor<T>& t : x) {
    xc.push_back(t.clone().requires_grad_());
    xd.push_back(t.clone().to(kCuda0).requires_grad_());
  }
  for (const Tensor<float>& t : captured) {
    cc.push_back(t.clone().requires_grad_());
    cd.push_back(t.clone().to(kCuda0).requires_grad_());
  }
  const at::AttentionOutput<T> yc = attend(xc, cc), yd = attend(xd, cd);
  REQUIRE(yd.output.is_cuda());
  REQUIRE(yd.lse.is_cuda());
  expect_close(yd.output.detach().cpu(), yc.output.detach(), tol, what + ": the output");
  expect_close(yd.lse.detach().cpu(), yc.lse.detach(), tol, what + ": the log-sum-exp");
  Generator g(77);
  const Tensor<double> r = randn<double>(yc.output.shape(), &g), s = randn<double>(yc.lse.shape(), &g);
  // (Rows with every key masked have lse -inf: their lse takes no gradient.)
  const auto lse_term = [&](const Tensor<double>& lse, const Tensor<double>& weights) {
    return sum(where(lse.detach() == -std::numeric_limits<double>::infinity(), 0.0, lse * weights));
  };
  Tensor<double>(sum(yc.output.template to<double>() * r) + lse_term(yc.lse.template to<double>(), s)).backward();
  Tensor<double>(sum(yd.output.template to<double>() * r.to(kCuda0)) + lse_term(yd.lse.template to<double>(), s.to(kCuda0)))
      .backward();
  const char* names[] = {"q", "k", "v"};
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(xd[i].grad().is_cuda());
    expect_close(xd[i].grad().cpu(), xc[i].grad(), tol, what + ": the gradient of " + names[i]);
  }
  for (size_t i = 0; i < cc.size(); ++i) {
    REQUIRE(cd[i].grad().defined());
    expect_close(cd[i].grad().cpu(), cc[i].grad(), tol, what + ": the gradient of a captured tensor");
  }
}

}  // namespace

TEST_CASE("flex_attention of CUDA tensors: outputs, log-sum-exps and gradients as on the CPU" * no_device()) {
  constexpr double kFloat = 2e-5;
  SUBCASE("dense, no modifier, lengths across the 64-row tiles") {
    expect_same<float>(qkv<float>(2, 2, 2, 70, 67, 16, 12, 1), {}, [](const auto& x, const auto&) {
      return at::flex_attention_with_lse(x[0], x[1], x[2]);
    }, kFloat, "dense");
  }
  SUBCASE("causal with ALiBi (its slopes a host tensor, copied for the call), GQA, a scale") {
    expect_same<float>(qkv<float>(1, 4, 2, 45, 45, 8, 8, 2), {}, [](const auto& x, const auto&) {
      return at::flex_attention_with_lse(x[0], x[1], x[2], at::alibi(4), at::create_block_mask(at::causal(), 1, 1, 45, 45),
                                         {.scale = 0.7, .enable_gqa = true});
    }, kFloat, "causal + alibi, GQA");
  }
  SUBCASE("sliding window with soft-capping, on a transposed q") {
    auto x = qkv<float>(1, 2, 2, 33, 33, 8, 8, 3);
    x[0] = x[0].transpose(1, 2).contiguous().transpose(1, 2);
    expect_same<float>(x, {}, [](const auto& x, const auto&) {
      return at::flex_attention_with_lse(x[0], x[1], x[2], at::soft_cap(2.0),
                                         at::create_block_mask(at::sliding_window(5), 1, 1, 33, 33, 16, 16));
    }, kFloat, "sliding window + soft cap");
  }
  SUBCASE("a document mask over ids on the device, and rows with every key masked") {
    Tensor<int64_t> docs = empty<int64_t>({24});
    for (int64_t i = 0; i < 24; ++i) docs.data_ptr()[i] = i < 7 ? 0 : i < 18 ? 1 : 2;
    expect_same<float>(qkv<float>(1, 2, 2, 24, 24, 8, 8, 4), {}, [&](const auto& x, const auto&) {
      const Tensor<int64_t> ids = docs.to(x[0].device());
      return at::flex_attention_with_lse(x[0], x[1], x[2], at::NoScoreMod{},
                                         at::create_block_mask(at::document(ids) & at::prefix_lm(4), 1, 1, 24, 24, 16, 16));
    }, kFloat, "document & prefix LM");
    using namespace at::placeholders;
    expect_same<float>(qkv<float>(1, 2, 2, 24, 24, 8, 8, 5), {}, [](const auto& x, const auto&) {
      return at::flex_attention_with_lse(x[0], x[1], x[2], at::NoScoreMod{},
                                         at::create_block_mask((kv_idx > q_idx + 30.0) | (q_idx < 5.0), 1, 2, 24, 24, 16, 16));
    }, kFloat, "rows with every key masked");
  }
  SUBCASE("a learned relative position bias and a gain per head: their gradients on the device") {
    Generator g(6);
    const Tensor<float> table = randn<float>({2, 19 + 23 - 1}, &g), gain = randn<float>({2}, &g);
    expect_same<float>(qkv<float>(2, 2, 2, 19, 23, 8, 8, 7), {table, gain}, [](const auto& x, const auto& c) {
      const auto bias = at::captured(c[0]);
      const auto scale = at::captured(c[1]);
      auto mod = [=](auto sc, auto, auto h, auto q, auto kv) { return sc * scale(h) + bias(h, q - kv + 22.0) * scale(h); };
      return at::flex_attention_with_lse(x[0], x[1], x[2], mod, at::create_block_mask(at::causal(), 1, 1, 19, 23));
    }, kFloat, "captured bias and gain");
  }
  SUBCASE("dropout: the CPU's mask from the same generator state, in the forward and regenerated in the backward") {
    expect_same<float>(qkv<float>(2, 2, 2, 70, 67, 16, 12, 21), {}, [](const auto& x, const auto&) {
      manual_seed(5);
      return at::flex_attention_with_lse(x[0], x[1], x[2], at::NoScoreMod{}, {.dropout_p = 0.3});
    }, kFloat, "dense, dropout 0.3");
    expect_same<float>(qkv<float>(1, 4, 2, 45, 45, 8, 8, 22), {}, [](const auto& x, const auto&) {
      manual_seed(6);
      return at::flex_attention_with_lse(x[0], x[1], x[2], at::alibi(4), at::create_block_mask(at::causal(), 1, 1, 45, 45),
                                         {.enable_gqa = true, .dropout_p = 0.5});
    }, kFloat, "causal + alibi, GQA, dropout 0.5");
  }
  SUBCASE("double, bfloat16, and float16 and bfloat16 on tensor cores") {
    expect_same<double>(qkv<double>(1, 2, 1, 18, 20, 8, 4, 8), {}, [](const auto& x, const auto&) {
      return at::flex_attention_with_lse(x[0], x[1], x[2], at::soft_cap(3.0),
                                         at::create_block_mask(at::causal(), 1, 1, 18, 20, 16, 16), {.enable_gqa = true});
    }, 1e-12, "double, causal + soft cap, GQA");
    // (Stored in 16 bits, computed in float: a stored value's rounding may differ by one step.)
    expect_same<bfloat16>(qkv<bfloat16>(1, 2, 2, 20, 20, 8, 8, 9), {}, [](const auto& x, const auto&) {
      return at::flex_attention_with_lse(x[0], x[1], x[2], at::alibi(2), at::create_block_mask(at::causal(), 1, 1, 20, 20));
    }, 2e-2, "bfloat16, causal + alibi");
    // Head dims that are multiples of 16: the forward runs on tensor cores (mma.sync; P rounded to 16 bits before its
    // product with V, so the gradients, which read the output, may differ by two steps).
    expect_same<bfloat16>(qkv<bfloat16>(1, 4, 2, 70, 70, 32, 16, 23), {}, [](const auto& x, const auto&) {
      return at::flex_attention_with_lse(x[0], x[1], x[2], at::alibi(4), at::create_block_mask(at::causal(), 1, 1, 70, 70),
                                         {.enable_gqa = true});
    }, 3e-2, "bfloat16 on tensor cores, causal + alibi, GQA");
    expect_same<float16>(qkv<float16>(1, 2, 2, 40, 40, 16, 16, 24), {}, [](const auto& x, const auto&) {
      manual_seed(7);
      return at::flex_attention_with_lse(x[0], x[1], x[2], at::NoScoreMod{}, {.dropout_p = 0.3});
    }, 1e-2, "float16 on tensor cores, dense, dropout 0.3");
  }
}


// The tensor-core kernels at the sizes they are for, many tiles in flight (skipped on the emulated device, where a
// warp's mma takes two barriers of 32 host threads: minutes; tests/gpu/run.sh runs it on a GPU).
TEST_CASE("flex_attention of bfloat16 CUDA tensors on tensor cores at L = 1000, as on the CPU" *
          doctest::skip(!cuda::is_available() || emulated_driver())) {
  expect_same<bfloat16>(qkv<bfloat16>(2, 4, 2, 1000, 1000, 128, 128, 31), {}, [](const auto& x, const auto&) {
    return at::flex_attention_with_lse(x[0], x[1], x[2], at::alibi(4), at::create_block_mask(at::causal(), 1, 1, 1000, 1000),
                                       {.enable_gqa = true});
  }, 3e-2, "bfloat16, D = 128, causal + alibi, GQA");
  expect_same<bfloat16>(qkv<bfloat16>(1, 8, 8, 777, 1000, 64, 64, 32), {}, [](const auto& x, const auto&) {
    return at::flex_attention_with_lse(x[0], x[1], x[2], at::NoScoreMod{},
                                       at::create_block_mask(at::sliding_window(200), 1, 1, 777, 1000));
  }, 3e-2, "bfloat16, D = 64, sliding window");
}

TEST_CASE("flex_attention of CUDA tensors refuses what its kernels cannot run, naming the op" * no_device()) {
  const auto x = qkv<float>(1, 2, 2, 8, 8, 8, 8, 10);
  const Tensor<float> q = x[0].to(kCuda0), k = x[1].to(kCuda0), v = x[2].to(kCuda0);
  CHECK_THROWS_WITH_AS(at::flex_attention(q, x[1], v), "flex_attention: q on cuda:0, k on cpu and v on cuda:0; move them to one device",
                       std::invalid_argument);
  // A host tensor whose gradient is wanted is not copied behind the user's back.
  const Tensor<float> bias = zeros<float>({2}).requires_grad_();
  const auto b = at::captured(bias);
  auto mod = [=](auto sc, auto, auto h, auto, auto) { return sc + b(h); };
  CHECK_THROWS_WITH_AS(at::flex_attention(q, k, v, mod),
                       "flex_attention: the score_mod reads a tensor of shape [2] on cpu that requires grad while q, k and "
                       "v are on cuda:0; move it with .to(device)",
                       std::invalid_argument);
  // A captured read out of bounds is caught on the device and reported as on the CPU.
  const auto short_table = at::captured(zeros<float>({4}).to(kCuda0));
  auto out_of_bounds = [=](auto sc, auto, auto, auto q, auto) { return sc + short_table(q); };
  CHECK_THROWS_WITH_AS(at::flex_attention(q, k, v, out_of_bounds),
                       "flex_attention: the score_mod or mask_mod reads a captured tensor out of its bounds or at a "
                       "fractional index",
                       std::out_of_range);
}

TEST_CASE("scaled_dot_product_attention and MultiheadAttention of CUDA tensors, as on the CPU" * no_device()) {
  namespace F = nn::functional;
  const auto x = qkv<float>(2, 2, 2, 12, 12, 8, 8, 11);
  SUBCASE("sdpa with a bool attn_mask on the device, and is_causal") {
    Generator g(12);
    const Tensor<bool> mask = rand<float>({2, 1, 12, 12}, &g) > 0.3f;
    expect_same<float>(x, {}, [&](const auto& t, const auto&) {
      return at::AttentionOutput<float>{F::scaled_dot_product_attention(t[0], t[1], t[2], mask.to(t[0].device())),
                                        zeros<float>({2, 2, 12}, t[0].device())};
    }, 2e-5, "sdpa, bool mask");
    expect_same<float>(x, {}, [&](const auto& t, const auto&) {
      return at::AttentionOutput<float>{F::scaled_dot_product_attention(t[0], t[1], t[2], Tensor<bool>(), 0, true),
                                        zeros<float>({2, 2, 12}, t[0].device())};
    }, 2e-5, "sdpa, is_causal");
  }
  SUBCASE("MultiheadAttention: the causal flex path and the materialized path with weights") {
    for (const bool need_weights : {false, true}) {
      manual_seed(13);
      nn::MultiheadAttention host(nn::MultiheadAttentionOptions(16, 4).batch_first(true));
      manual_seed(13);
      nn::MultiheadAttention device(nn::MultiheadAttentionOptions(16, 4).batch_first(true));
      device->to(kCuda0);
      Generator g(14);
      const Tensor<float> in = randn<float>({2, 10, 16}, &g);
      Tensor<bool> causal_mask = empty<bool>({10, 10});  // (true where attention is not allowed)
      for (int64_t i = 0; i < 100; ++i) causal_mask.data_ptr()[i] = i % 10 > i / 10;
      const Tensor<float> ic = in.clone().requires_grad_(), id = in.clone().to(kCuda0).requires_grad_();
      const auto [yc, wc] = host->forward(ic, ic, ic, {}, need_weights, causal_mask, true, true);
      const auto [yd, wd] = device->forward(id, id, id, {}, need_weights, causal_mask.to(kCuda0), true, true);
      REQUIRE(yd.is_cuda());
      const std::string what = need_weights ? "MultiheadAttention with weights" : "MultiheadAttention, causal";
      expect_close(yd.detach().cpu(), yc.detach(), 2e-5, what + ": the output");
      if (need_weights) expect_close(wd.detach().cpu(), wc.detach(), 2e-5, what + ": the weights");
      const Tensor<float> r = randn<float>(yc.shape(), &g);
      sum(yc * r).backward();
      sum(yd * r.to(kCuda0)).backward();
      expect_close(id.grad().cpu(), ic.grad(), 2e-5, what + ": the input's gradient");
      const auto pd = device->named_parameters(), ph = host->named_parameters();
      for (size_t i = 0; i < pd.size(); ++i)
        expect_close(pd[i].second.grad().cpu(), ph[i].second.grad(), 2e-5, what + ": the gradient of " + pd[i].first);
    }
  }
}

}  // namespace test_cuda_emulated_attention
