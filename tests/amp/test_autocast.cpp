// AutocastGuard (torch.autocast on the CPU): matmul, mm, bmm, conv2d, linear and attention of float tensors run
// in bfloat16 or float16 inside a region, against float64 products of the rounded operands and against the same
// ops written with explicit casts; gradients flow through the casts and run in the 16-bit type even when
// backward() is called inside a region; double tensors, the state's scoping and nesting; an MLP trained under
// autocast reaches the float run's accuracy.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "kiln/attention.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_amp_autocast {

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {
template <class H>
float round_to(float v) {
  return float(H(v));
}
// Every element is a value of the 16-bit type H (widened to float without loss).
template <class H>
bool all_representable(const Tensor<float>& t) {
  for (float v : t.to_vector())
    if (round_to<H>(v) != v) return false;
  return true;
}
Tensor<float> leaf(Tensor<float> t) {
  t.requires_grad_();
  return t;
}
}  // namespace

TEST_CASE_TEMPLATE("autocast: matmul, mm and bmm of float tensors compute in the 16-bit type", H, bfloat16, float16) {
  manual_seed(3);
  const Tensor<float> x = randn<float>({5, 33}), y = randn<float>({33, 4});
  const Tensor<float> plain = matmul(x, y);
  Tensor<float> low, low_mm, low_bmm;
  {
    AutocastGuard guard(kCPU, scalar_type_of<H>());
    CHECK(autocast::is_enabled(kCPU));
    CHECK(autocast::get_dtype(kCPU) == scalar_type_of<H>());
    low = matmul(x, y);
    low_mm = mm(x, y);
    low_bmm = bmm(x.unsqueeze(0), y.unsqueeze(0)).squeeze(0);
  }
  CHECK_FALSE(autocast::is_enabled(kCPU));
  CHECK(all_representable<H>(low));
  // The product of the rounded operands, accumulated exactly (float64), then rounded once: float accumulation
  // may differ from it by one 16-bit step where the exact sum sits near a rounding boundary.
  const auto xs = x.to_vector(), ys = y.to_vector(), got = low.to_vector();
  int differing = 0;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j) {
      double exact = 0;
      for (int k = 0; k < 33; ++k) exact += double(round_to<H>(xs[i * 33 + k])) * double(round_to<H>(ys[k * 4 + j]));
      const float want = round_to<H>(float(exact));
      const float step = std::abs(want) * (std::is_same_v<H, bfloat16> ? 0x1p-7f : 0x1p-10f);
      CHECK(std::abs(got[i * 4 + j] - want) <= step);
      differing += got[i * 4 + j] != plain.to_vector()[i * 4 + j];
    }
  CHECK(differing > 10);  // the region changed the precision (float's own product differs)
  // The same as writing the casts by hand; mm and bmm too.
  const Tensor<float> by_hand = matmul(x.to<H>(), y.to<H>()).template to<float>();
  CHECK(low.to_vector() == by_hand.to_vector());
  CHECK(low_mm.to_vector() == by_hand.to_vector());
  CHECK(low_bmm.to_vector() == by_hand.to_vector());
  // Outside the region, float again.
  CHECK(matmul(x, y).to_vector() == plain.to_vector());
}

TEST_CASE("autocast: gradients flow through the casts and are computed in bfloat16") {
  manual_seed(4);
  const Tensor<float> x0 = randn<float>({6, 20}), w0 = randn<float>({20, 3}), c = randn<float>({6, 3});
  Tensor<float> x = leaf(x0.clone()), w = leaf(w0.clone());
  {
    AutocastGuard guard(kCPU, kBFloat16);
    sum(matmul(x, w) * c).backward();  // backward inside the region: the engine suspends autocast
  }
  // The reference: the same graph with the casts written out.
  Tensor<float> xr = leaf(x0.clone()), wr = leaf(w0.clone());
  const Tensor<float> yr = matmul(xr.to<bfloat16>(), wr.to<bfloat16>()).to<float>();
  sum(yr * c).backward();
  CHECK(x.grad().to_vector() == xr.grad().to_vector());
  CHECK(w.grad().to_vector() == wr.grad().to_vector());
  CHECK(all_representable<bfloat16>(x.grad()));  // dx = g @ w^T rounded to bfloat16, then widened
  CHECK(all_representable<bfloat16>(w.grad()));
  // And it is not float's gradient: dx of float's product is c @ w^T in float.
  const Tensor<float> float_dx = matmul(c, w0.t());
  CHECK(x.grad().to_vector() != float_dx.to_vector());
}

TEST_CASE("autocast: a backward pass inside a region runs each node in its forward op's precision") {
  manual_seed(5);
  const Tensor<float> x0 = randn<float>({4, 9}), w0 = randn<float>({9, 5});
  Tensor<float> x = leaf(x0.clone()), w = leaf(w0.clone());
  const Tensor<float> y = matmul(x, w);  // float, outside any region
  {
    AutocastGuard guard(kCPU, kBFloat16);
    sum(y).backward();
  }
  Tensor<float> xr = leaf(x0.clone()), wr = leaf(w0.clone());
  sum(matmul(xr, wr)).backward();
  CHECK(x.grad().to_vector() == xr.grad().to_vector());
  CHECK(w.grad().to_vector() == wr.grad().to_vector());
  CHECK_FALSE(all_representable<bfloat16>(w.grad()));
}

TEST_CASE("autocast: conv2d, linear and attention of float tensors run in the 16-bit type") {
  manual_seed(6);
  const Tensor<float> img = randn<float>({2, 3, 8, 8}), kernel = randn<float>({4, 3, 3, 3}), bias = randn<float>({4});
  const Tensor<float> x = randn<float>({7, 12}), weight = randn<float>({5, 12}), b = randn<float>({5});
  const Tensor<float> q = randn<float>({2, 2, 9, 8}), k = randn<float>({2, 2, 11, 8}), v = randn<float>({2, 2, 11, 8});
  Tensor<float> conv, lin, att;
  {
    AutocastGuard guard(kCPU);  // the CPU's default: bfloat16
    conv = F::conv2d(img, kernel, bias, {1, 1}, {1, 1});
    lin = F::linear(x, weight, b);
    att = F::scaled_dot_product_attention(q, k, v);
  }
  using H = bfloat16;
  auto low = [](const Tensor<float>& t) { return Tensor<H>(t.to<H>()); };
  const Tensor<float> conv_ref = F::conv2d(low(img), low(kernel), low(bias), {1, 1}, {1, 1}).to<float>();
  CHECK(conv.to_vector() == conv_ref.to_vector());
  CHECK(all_representable<H>(conv));
  // linear: the product in bfloat16, the bias added in float to the widened product.
  const Tensor<float> lin_ref = matmul(x.to<H>(), weight.to<H>().t()).to<float>() + b;
  CHECK(lin.to_vector() == lin_ref.to_vector());
  const Tensor<float> att_ref = F::scaled_dot_product_attention(low(q), low(k), low(v)).to<float>();
  CHECK(att.to_vector() == att_ref.to_vector());
  CHECK(all_representable<H>(att));
  // The float results differ: the region changed them.
  CHECK(conv.to_vector() != F::conv2d(img, kernel, bias, {1, 1}, {1, 1}).to_vector());
}

TEST_CASE("autocast: a weight is cast once per outermost region and reused; gradients of every use add up") {
  manual_seed(9);
  const Tensor<float> x0 = randn<float>({5, 8}), x1 = randn<float>({3, 8}), w0 = randn<float>({4, 8});
  Tensor<float> w = leaf(w0.clone());
  const Tensor<float> act = randn<float>({5, 8});  // not a weight: never cached
  // The node that casts w: the one in y's graph whose input is w's accumulator.
  auto cast_node = [&](const Tensor<float>& y) {
    std::vector<std::shared_ptr<autograd::Node>> todo{y.grad_fn()};
    while (!todo.empty()) {
      const auto node = todo.back();
      todo.pop_back();
      for (const auto& edge : node->next_edges) {
        if (edge.fn && edge.fn->accumulates()) return node;
        if (edge.fn) todo.push_back(edge.fn);
      }
    }
    return std::shared_ptr<autograd::Node>();
  };
  Tensor<float> y0, y1;
  {
    AutocastGuard outer(kCPU);
    y0 = F::linear(x0, w);
    {
      AutocastGuard inner(kCPU);  // a nested region shares the outer one's cache
      y1 = F::linear(x1, w);
    }
    CHECK(autocast::detail::cast_cache().size() == 1);
    REQUIRE(cast_node(y0));
    CHECK(cast_node(y0) == cast_node(y1));  // one cast of w, used twice
    (void)F::linear(act, w);
    CHECK(autocast::detail::cast_cache().size() == 1);  // act requires no grad: cast, not cached
    // Changing a weight in place invalidates its cast.
    Tensor<float> u = leaf(w0.clone());
    const Tensor<float> before = F::linear(x0, u);
    CHECK(cast_node(F::linear(x1, u)) == cast_node(before));
    {
      NoGradGuard no_grad;
      u *= 2.0f;
    }
    const Tensor<float> after = F::linear(x0, u);
    CHECK(cast_node(after) != cast_node(before));
    CHECK(after.to_vector() != before.to_vector());
  }
  CHECK(autocast::detail::cast_cache().empty());  // cleared when the outermost region ends

  // The gradient through the shared cast is the sum over both uses, as with separate casts.
  sum(y0).backward(Tensor<float>(), /*retain_graph=*/true);
  sum(y1).backward();
  Tensor<float> wr = leaf(w0.clone());
  using H = bfloat16;
  const Tensor<float> r0 = matmul(x0.to<H>(), wr.to<H>().t()).to<float>();
  const Tensor<float> r1 = matmul(x1.to<H>(), wr.to<H>().t()).to<float>();
  CHECK(y0.to_vector() == r0.to_vector());
  sum(r0).backward();
  sum(r1).backward();
  CHECK(w.grad().to_vector() == wr.grad().to_vector());

  // A backward inside the region frees the cast's node; the next use casts again instead of reusing it.
  Tensor<float> v = leaf(w0.clone());
  {
    AutocastGuard guard(kCPU);
    sum(F::linear(x0, v)).backward();
    sum(F::linear(x0, v)).backward();  // would throw "a second time" if the freed cast were reused
    // Not in grad mode: cast, not cached.
    NoGradGuard no_grad;
    autocast::clear_cache();
    (void)F::linear(x0, v);
    CHECK(autocast::detail::cast_cache().empty());
  }
  Tensor<float> vr = leaf(w0.clone());
  for (int i = 0; i < 2; ++i) sum(matmul(x0.to<H>(), vr.to<H>().t()).to<float>()).backward();
  CHECK(v.grad().to_vector() == vr.grad().to_vector());
}

TEST_CASE("autocast: double tensors are untouched; scopes nest and restore; the CUDA state is separate") {
  manual_seed(7);
  const Tensor<double> a = randn<double>({4, 6}), b = randn<double>({6, 3});
  const Tensor<double> plain = matmul(a, b);
  AutocastGuard outer(kCPU, kHalf);
  CHECK(matmul(a, b).to_vector() == plain.to_vector());
  CHECK_FALSE(autocast::is_enabled(kCUDA));
  CHECK(autocast::get_dtype(kCUDA) == kHalf);  // PyTorch's default there
  {
    AutocastGuard off(kCPU, false);
    CHECK_FALSE(autocast::is_enabled(kCPU));
    AutocastGuard cuda(kCUDA, kBFloat16);
    CHECK(autocast::is_enabled(kCUDA));
    CHECK(autocast::get_dtype(kCUDA) == kBFloat16);
  }
  CHECK(autocast::is_enabled(kCPU));
  CHECK(autocast::get_dtype(kCPU) == kHalf);
  CHECK_FALSE(autocast::is_enabled(kCUDA));
  CHECK_THROWS_WITH_AS(AutocastGuard(kCPU, kDouble), "AutocastGuard: autocast runs ops in bfloat16 or float16, not float64",
                       std::invalid_argument);
  CHECK(autocast::get_dtype(kCPU) == kHalf);  // a refused guard changes nothing
}

TEST_CASE("autocast: an MLP trained in bfloat16 reaches the float run's accuracy") {
  // Four classes of points in the plane: the quadrant of (x0 + 0.3 sin(3 x1), x1), 512 points.
  manual_seed(8);
  const Tensor<float> points = randn<float>({512, 2});
  const auto p = points.to_vector();
  std::vector<int64_t> labels(512);
  for (int i = 0; i < 512; ++i) {
    const float u = p[2 * i] + 0.3f * std::sin(3 * p[2 * i + 1]), w = p[2 * i + 1];
    labels[size_t(i)] = (u > 0 ? 1 : 0) + (w > 0 ? 2 : 0);
  }
  const Tensor<int64_t> target = tensor(labels);
  auto train = [&](bool amp) {
    manual_seed(9);
    nn::Sequential net(nn::Linear(2, 64), nn::ReLU(), nn::Linear(64, 64), nn::ReLU(), nn::Linear(64, 4));
    optim::Adam opt(net->parameters(), optim::AdamOptions(1e-2));
    for (int step = 0; step < 300; ++step) {
      opt.zero_grad();
      Tensor<float> loss;
      {
        AutocastGuard guard(kCPU, kBFloat16, amp);
        loss = F::cross_entropy(net->forward(points), target);
      }
      loss.backward();
      opt.step();
    }
    const Tensor<int64_t> predicted = argmax(net->forward(points), 1);
    return double(sum((predicted == target).to<int64_t>()).item()) / 512.0;
  };
  const double float_accuracy = train(false), amp_accuracy = train(true);
  MESSAGE("accuracy: float " << float_accuracy << ", bfloat16 autocast " << amp_accuracy);
  CHECK(float_accuracy > 0.9);
  CHECK(amp_accuracy > float_accuracy - 0.03);
}

}  // namespace test_amp_autocast
