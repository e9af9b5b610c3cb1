// nn::MultiheadAttention and F::scaled_dot_product_attention against PyTorch 2.15's values on the same
// inputs (tests/fixtures/attention/multihead.safetensors, written by scripts/attention_reference.py), and
// scaled_dot_product_attention's flex paths against its materialized one.
#include <doctest/doctest.h>

#include <kiln/attention/multihead.hpp>
#include <kiln/io.hpp>

#include "flex_reference.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_attention_multihead {

using namespace kiln;
using namespace kiln_test;
namespace F = kiln::nn::functional;

namespace {
const std::map<std::string, AnyTensor>& fixture() {
  static const auto t = io::load_safetensors(std::string(KILN_TEST_DATA_DIR) + "/attention/multihead.safetensors");
  return t;
}
template <class T = float>
Tensor<T> get(const std::string& name) {
  const AnyTensor& a = fixture().at(name);
  if constexpr (std::is_same_v<T, bool>) return a.as<bool>();
  else return a.as<double>().to<T>();
}
// The module of the fixture: E = 8, H = 2, PyTorch's parameters.
nn::MultiheadAttention fixture_module() {
  nn::MultiheadAttention mha(8, 2);
  NoGradGuard no_grad;
  mha->in_proj_weight.copy_(get("in_proj_weight"));
  mha->in_proj_bias.copy_(get("in_proj_bias"));
  mha->out_proj->weight.copy_(get("out_proj.weight"));
  mha->out_proj->bias.copy_(get("out_proj.bias"));
  return mha;
}
}  // namespace

TEST_CASE("MultiheadAttention: parameters named and shaped as PyTorch's state_dict") {
  nn::MultiheadAttention mha(8, 2);
  std::vector<std::string> names;
  for (const auto& [name, p] : mha->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(mha->in_proj_weight.shape() == Shape{24, 8});
  CHECK(values(mha->in_proj_bias) == std::vector<double>(24, 0.0));
  nn::MultiheadAttention cross(nn::MultiheadAttentionOptions(8, 4).kdim(3).vdim(5).bias(false));
  names.clear();
  for (const auto& [name, p] : cross->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"});
  CHECK(cross->k_proj_weight.shape() == Shape{8, 3});
  CHECK_THROWS_AS(nn::MultiheadAttention(10, 3), std::invalid_argument);
}

TEST_CASE("MultiheadAttention: self-attention output, averaged weights and every gradient equal PyTorch's") {
  nn::MultiheadAttention mha = fixture_module();
  Tensor<float> x = get("self.x");
  x.requires_grad_();
  const auto [out, weights] = mha(x, x, x);
  CHECK(within(values(out), values(get("self.out")), 1e-5, 1e-6));
  CHECK(weights.shape() == Shape{3, 5, 5});
  CHECK(within(values(weights), values(get("self.weights")), 1e-5, 1e-6));
  sum(out * get("self.g")).backward();
  CHECK(within(values(x.grad()), values(get("self.grad_x")), 1e-4, 1e-5));
  CHECK(within(values(mha->in_proj_weight.grad()), values(get("self.grad.in_proj_weight")), 1e-4, 1e-5));
  CHECK(within(values(mha->in_proj_bias.grad()), values(get("self.grad.in_proj_bias")), 1e-4, 1e-5));
  CHECK(within(values(mha->out_proj->weight.grad()), values(get("self.grad.out_proj.weight")), 1e-4, 1e-5));
  // Without weights the flex path runs: the same output and gradients.
  mha->zero_grad();
  x.zero_grad();
  const auto [fast, none] = mha(x, x, x, Tensor<bool>(), /*need_weights=*/false);
  CHECK(!none.defined());
  CHECK(within(values(fast), values(get("self.out")), 1e-5, 1e-6));
  sum(fast * get("self.g")).backward();
  CHECK(within(values(mha->in_proj_weight.grad()), values(get("self.grad.in_proj_weight")), 1e-4, 1e-5));
}

TEST_CASE("MultiheadAttention: cross-attention with key_padding_mask and a bool attn_mask equals PyTorch's") {
  nn::MultiheadAttention mha = fixture_module();
  const Tensor<float> q = get("cross.q"), kv = get("cross.kv");
  const Tensor<bool> kpm = get<bool>("cross.key_padding_mask"), am = get<bool>("cross.attn_mask");
  const auto [out, weights] = mha(q, kv, kv, kpm, true, am, /*average_attn_weights=*/false);
  CHECK(within(values(out), values(get("cross.out")), 1e-5, 1e-6));
  CHECK(weights.shape() == Shape{3, 2, 5, 7});
  CHECK(within(values(weights), values(get("cross.weights")), 1e-5, 1e-6));
  const auto [fast, none] = mha(q, kv, kv, kpm, false, am);
  CHECK(within(values(fast), values(get("cross.out")), 1e-5, 1e-6));
  CHECK_THROWS_WITH_AS(mha(q, kv, kv, Tensor<bool>(kpm.narrow(1, 0, 6)), false, am), doctest::Contains("key_padding_mask"), ShapeError);
  CHECK_THROWS_WITH_AS(mha(q, kv, q), doctest::Contains("MultiheadAttention: expected"), ShapeError);
}

TEST_CASE("MultiheadAttention: is_causal is a hint that needs attn_mask, as PyTorch's") {
  nn::MultiheadAttention mha = fixture_module();
  const Tensor<float> x = get("self.x");
  const int64_t l = x.size(0);
  Tensor<bool> above = empty<bool>({l, l});  // true where attention is not allowed: the causal mask
  for (int64_t i = 0; i < l; ++i)
    for (int64_t j = 0; j < l; ++j) above.data_ptr()[i * l + j] = j > i;
  // PyTorch: "Need attn_mask if specifying the is_causal hint", with or without need_weights or key_padding_mask.
  for (bool need_weights : {true, false}) {
    CHECK_THROWS_WITH_AS(mha(x, x, x, Tensor<bool>(), need_weights, Tensor<float>(), true, /*is_causal=*/true),
                         doctest::Contains("MultiheadAttention: is_causal"), std::invalid_argument);
  }
  CHECK_THROWS_AS(mha(x, x, x, Tensor<bool>(zeros<bool>({x.size(1), l})), false, Tensor<float>(), true, true),
                  std::invalid_argument);
  // With the mask it is the masked attention, on every path: the hint alone (no key_padding_mask, no weights: the
  // causal flex path in the mask's place), the weights' path, and with a key_padding_mask.
  const auto [want, want_weights] = mha(x, x, x, Tensor<bool>(), true, above);
  const auto [hinted, none] = mha(x, x, x, Tensor<bool>(), false, above, true, true);
  CHECK(within(values(hinted), values(want), 1e-5, 1e-6));
  const auto [weighted, weights] = mha(x, x, x, Tensor<bool>(), true, above, true, true);
  CHECK(within(values(weighted), values(want), 1e-5, 1e-6));
  CHECK(within(values(weights), values(want_weights), 1e-5, 1e-6));
  const Tensor<bool> kpm = zeros<bool>({x.size(1), l});
  const auto [padded, none2] = mha(x, x, x, kpm, false, above, true, true);
  CHECK(within(values(padded), values(want), 1e-5, 1e-6));
}

TEST_CASE("MultiheadAttention: batch_first gives the same result on transposed inputs") {
  nn::MultiheadAttention mha = fixture_module();
  nn::MultiheadAttention bf(nn::MultiheadAttentionOptions(8, 2).batch_first(true));
  {
    NoGradGuard no_grad;
    const auto from = mha->named_parameters();
    auto to = bf->named_parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].second.copy_(from[i].second);
  }
  const Tensor<float> x = get("self.x");
  const Tensor<float> y = std::get<0>(bf(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), Tensor<bool>(), false));
  CHECK(within(values(y.transpose(0, 1)), values(get("self.out")), 1e-5, 1e-6));
}

TEST_CASE("scaled_dot_product_attention: float mask and is_causal equal PyTorch's; flex paths equal the materialized one") {
  const Tensor<double> q = get<double>("sdpa.q"), k = get<double>("sdpa.k"), v = get<double>("sdpa.v");
  const Tensor<double> mask = get<double>("sdpa.mask");
  CHECK(max_abs_diff(values(F::scaled_dot_product_attention(q, k, v, mask)), values(get<double>("sdpa.out_mask"))) < 1e-12);
  CHECK(max_abs_diff(values(F::scaled_dot_product_attention(q, k, v, Tensor<bool>(), 0.0, true)),
                     values(get<double>("sdpa.out_causal"))) < 1e-12);
  // A bool mask broadcast over the batch and heads: flex (its empty tiles skipped) equals the materialized path.
  Tensor<bool> keep = empty<bool>({5, 7});
  for (int64_t i = 0; i < 35; ++i) keep.data_ptr()[i] = (i * 7 + 3) % 5 != 0;
  CHECK(max_abs_diff(values(F::scaled_dot_product_attention(q, k, v, keep)),
                     values(attention::materialized_attention(q, k, v, keep).output)) < 1e-12);
  // [B, L, E] inputs; GQA; errors.
  CHECK(max_abs_diff(values(F::scaled_dot_product_attention(q.select(1, 0), k.select(1, 0), v.select(1, 0))),
                     values(F::scaled_dot_product_attention(q, k, v).select(1, 0))) < 1e-12);
  const Tensor<double> q4 = cat(std::vector<Tensor<double>>{q, q}, 1);
  CHECK(max_abs_diff(values(F::scaled_dot_product_attention(q4, k, v, Tensor<bool>(), 0.0, true, {}, true)),
                     values(attention::materialized_attention(q4, k, v, Tensor<bool>(), 0.0, true).output)) < 1e-12);
  CHECK_THROWS_AS(F::scaled_dot_product_attention(q4, k, v), ShapeError);
  CHECK_THROWS_AS(F::scaled_dot_product_attention(q, k, v, keep, 0.0, true), std::invalid_argument);
  CHECK_THROWS_AS(F::scaled_dot_product_attention(q, k, v, Tensor<bool>(), 1.0), std::invalid_argument);
  // A mask that broadcasts with the scores but past them (a batch of 2 against q's 1) is named as sdpa's error.
  const Tensor<bool> two_batches = ones<bool>({2, 1, q.size(2), k.size(2)});
  CHECK_THROWS_WITH_AS(F::scaled_dot_product_attention(q.narrow(0, 0, 1), k.narrow(0, 0, 1), v.narrow(0, 0, 1),
                                                       two_batches),
                       doctest::Contains("does not broadcast to the scores' shape"), ShapeError);
}

TEST_CASE("scaled_dot_product_attention: dropout keeps the expectation and zeroes about p of the weights") {
  manual_seed(3);
  const Tensor<float> q = zeros<float>({1, 1, 64, 8}), k = zeros<float>({1, 1, 256, 8}), v = ones<float>({1, 1, 256, 8});
  // Uniform weights 1/256; after dropout p = 0.25 each surviving weight is 1/192, so each output is
  // (number kept) / 192: mean over 64 x 8 outputs near 1.
  const auto r = attention::materialized_attention(q, k, v, Tensor<bool>(), 0.25);
  int64_t zero = 0;
  for (float w : r.weights.to_vector()) zero += w == 0.0f;
  CHECK(double(zero) / double(r.weights.numel()) == doctest::Approx(0.25).epsilon(0.05));
  const auto out = values(F::scaled_dot_product_attention(q, k, v, Tensor<bool>(), 0.25));
  double m = 0;
  for (double x : out) m += x / double(out.size());
  CHECK(m == doctest::Approx(1.0).epsilon(0.02));
}

}  // namespace test_attention_multihead
