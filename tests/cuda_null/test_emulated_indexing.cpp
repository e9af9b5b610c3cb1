// gather, index_select, embedding, scatter_add, nll_loss and cross_entropy of CUDA tensors on their device
// (cuda/indexing.hpp, in programs built with KILN_WITH_CUDA), against the CPU's results and errors. In CI on the
// emulated device (emulated/driver.cpp, emulated/nvrtc.cpp through KILN_CUDA_DRIVER_LIBRARY and KILN_NVRTC_LIBRARY);
// on a GPU with the real driver and NVRTC.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"

#include "compare.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_emulated_indexing {

using namespace kiln;
using kiln::test::expect_close;
namespace F = kiln::nn::functional;

namespace {

// Every run starts with an empty kernel cache of its own (set before the process-wide cache is first made).
const bool fresh_cache = [] {
  const auto dir = std::filesystem::temp_directory_path() / kiln::detail::cat("kiln-emulated-indexing-cache-", ::getpid());
  std::filesystem::remove_all(dir);
  ::setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  return true;
}();

// Each case is skipped (and reported so) where there is no CUDA device, emulated or real.
auto no_device() { return doctest::skip(!cuda::is_available()); }

// Indices in [0, size), of `shape`; few distinct values when size is small, so they repeat.
Tensor<int64_t> indices(const Shape& shape, int64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> v(size_t(numel_of(shape)));
  for (int64_t& k : v) k = int64_t(rng() % uint32_t(size));
  return tensor<int64_t>(v).reshape(shape);
}

template <class T>
Tensor<T> values(const Shape& shape, uint32_t seed) {
  Generator g(seed);
  const Tensor<float> x = randn<float>(shape, &g) * 20.0f;
  return x.to<T>();
}

// What `op` throws, as a string (the CPU's message, to compare the device's with).
std::string message_of(const std::function<void()>& op) {
  try {
    op();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

// gather along each dim of a permuted (non-contiguous) [4, 5, 6] self, with a contiguous and a transposed index.
template <class T>
void check_gather(uint32_t seed) {
  const Tensor<T> base = values<T>({6, 4, 5}, seed);
  const Tensor<T> self = base.permute({1, 2, 0}), cself = base.cuda().permute({1, 2, 0});
  REQUIRE(!cself.is_contiguous());
  for (int dim = 0; dim < 3; ++dim) {
    Shape ishape = self.shape();
    ishape[dim] = 3;
    ishape[2 - dim == dim ? 0 : 2 - dim] -= 1;  // smaller than self along another dim too
    const Tensor<int64_t> index = indices(ishape, self.size(dim), seed + dim);
    const std::string what = kiln::detail::cat(dtype_name(scalar_type_of<T>()), " gather along dim ", dim);
    const Tensor<T> got = gather(cself, dim, index.cuda());
    CHECK(got.is_cuda());
    expect_close(got.cpu(), gather(self, dim, index), 0, what);
    // The same index stored transposed: the kernel reads it through its strides.
    const Tensor<int64_t> index_t = index.transpose(0, 2).contiguous().cuda().transpose(0, 2);
    REQUIRE(!index_t.is_contiguous());
    expect_close(gather(cself, dim - 3, index_t).cpu(), gather(self, dim, index), 0, what + ", transposed index");
  }
}

// scatter_add along each dim into a [4, 5, 6] self, indices repeating (the device adds atomically), src larger
// than the index and transposed.
template <class T>
void check_scatter_add(uint32_t seed, double tol) {
  const Tensor<T> self = values<T>({4, 5, 6}, seed);
  for (int dim = 0; dim < 3; ++dim) {
    Shape ishape = self.shape();
    ishape[dim] = 7;
    const Tensor<int64_t> index = indices(ishape, 2, seed + dim);  // only 0 and 1: every target hit several times
    Shape sshape = ishape;
    for (int64_t& s : sshape) s += 1;
    const Tensor<T> src_base = values<T>({sshape[2], sshape[1], sshape[0]}, seed + 10 + dim);
    const Tensor<T> src = src_base.permute({2, 1, 0}), csrc = src_base.cuda().permute({2, 1, 0});
    const Tensor<T> got = scatter_add(self.cuda(), dim, index.cuda(), csrc);
    CHECK(got.is_cuda());
    expect_close(got.cpu(), scatter_add(self, dim, index, src), tol,
                 kiln::detail::cat(dtype_name(scalar_type_of<T>()), " scatter_add along dim ", dim));
  }
}

}  // namespace

TEST_CASE("gather of CUDA tensors along each dim, transposed self and index, equals the CPU's" * no_device()) {
  check_gather<float>(1);
  check_gather<double>(2);
  check_gather<int64_t>(3);
  check_gather<int32_t>(4);
  check_gather<bfloat16>(5);
  // A 0-dim self and index, and an empty index.
  const Tensor<float> s = full<float>({}, 2.5f);
  const Tensor<float> g0 = gather(s.cuda(), 0, full<int64_t>({}, 0).cuda());
  CHECK(g0.dim() == 0);
  CHECK(g0.cpu().item() == 2.5f);
  CHECK(gather(values<float>({3, 4}, 6).cuda(), 1, zeros<int64_t>({3, 0}).cuda()).shape() == Shape{3, 0});
}

TEST_CASE("index_select and embedding of CUDA tensors equal the CPU's" * no_device()) {
  const Tensor<float> x = values<float>({5, 6, 7}, 7);
  const Tensor<float> cx = x.cuda();
  const Tensor<int64_t> index = tensor<int64_t>({4, 0, 0, 2, 4, 1});
  for (int dim = 0; dim < 3; ++dim) {
    const Tensor<float> got = index_select(cx, dim, index.cuda());
    CHECK(got.is_cuda());
    expect_close(got.cpu(), index_select(x, dim, index), 0, kiln::detail::cat("index_select along dim ", dim));
  }
  expect_close(index_select(cx.permute({2, 0, 1}), 1, index.cuda()).cpu(), index_select(x.permute({2, 0, 1}), 1, index),
               0, "index_select of a permuted tensor");
  const Tensor<double> xd = values<double>({9, 3}, 8);
  expect_close(index_select(xd.cuda(), 0, index.cuda()).cpu(), index_select(xd, 0, index), 0, "index_select double");
  // embedding: rows of the weight, in the indices' shape.
  const Tensor<float> weight = values<float>({10, 4}, 9);
  const Tensor<int64_t> tokens = indices({3, 5}, 10, 10);
  const Tensor<float> rows = F::embedding(tokens.cuda(), weight.cuda());
  CHECK(rows.is_cuda());
  CHECK(rows.shape() == Shape{3, 5, 4});
  expect_close(rows.cpu(), F::embedding(tokens, weight), 0, "embedding");
}

TEST_CASE("scatter_add of CUDA tensors with repeated indices equals the CPU's (atomic adds)" * no_device()) {
  check_scatter_add<float>(11, 1e-6);  // float sums in another order: within rounding
  check_scatter_add<double>(12, 1e-12);
  check_scatter_add<int64_t>(13, 0);
  check_scatter_add<int32_t>(14, 0);
  // Types the device has no atomic add for are refused with the reason.
  const Tensor<bfloat16> h = values<bfloat16>({4, 5}, 15);
  CHECK_THROWS_WITH_AS(scatter_add(h.cuda(), 0, zeros<int64_t>({1, 5}).cuda(), h.cuda()),
                       doctest::Contains("scatter_add: a bfloat16 CUDA tensor of shape [4, 5]: scatter_add on CUDA takes "
                                         "float32, float64, int32 and int64"),
                       std::invalid_argument);
}

TEST_CASE("an index out of range on CUDA throws the CPU's message and reads or writes nothing out of bounds" * no_device()) {
  const Tensor<float> x = values<float>({4, 5}, 16);
  const Tensor<float> cx = x.cuda();
  for (int64_t bad : {int64_t(5), int64_t(-1), int64_t(1) << 40}) {
    Tensor<int64_t> index = indices({4, 3}, 5, 17);
    index.select(0, 2).select(0, 1).fill_(bad);
    const std::string want = message_of([&] { (void)gather(x, 1, index); });
    CHECK(want.find("gather: index") == 0);
    CHECK_THROWS_WITH_AS((void)gather(cx, 1, index.cuda()), want.c_str(), std::out_of_range);
    const Tensor<float> src = values<float>({4, 3}, 18);
    const std::string want_scatter = message_of([&] { (void)scatter_add(x, 1, index, src); });
    CHECK_THROWS_WITH_AS((void)scatter_add(cx, 1, index.cuda(), src.cuda()), want_scatter.c_str(), std::out_of_range);
    const Tensor<int64_t> rows = tensor<int64_t>({0, bad, 2});
    const std::string want_select = message_of([&] { (void)index_select(x, 0, rows); });
    CHECK_THROWS_WITH_AS((void)index_select(cx, 0, rows.cuda()), want_select.c_str(), std::out_of_range);
    const std::string want_embedding = message_of([&] { (void)F::embedding(rows, x); });
    CHECK(want_embedding.find("embedding: index") == 0);
    CHECK_THROWS_WITH_AS((void)F::embedding(rows.cuda(), cx), want_embedding.c_str(), std::out_of_range);
  }
  // Nothing written outside the target: scatter into the middle columns of a wider tensor, indices -1 and 3 (which
  // would land on its first and last columns) among good ones; the other indices' adds are made, the bad ones skipped.
  Tensor<float> wide = zeros<float>({2, 5}).cuda();
  Tensor<float> middle = wide.narrow(1, 1, 3);
  const Tensor<int64_t> index = tensor<int64_t>({0, -1, 2, 3, 1, 1}).reshape({2, 3});
  CHECK_THROWS_WITH_AS(kiln::detail::scatter_add_into(middle, 1, index.cuda(), ones<float>({2, 3}).cuda(), "scatter_add"),
                       doctest::Contains("scatter_add: index"), std::out_of_range);
  CHECK(wide.cpu().to_vector() == std::vector<float>{0, 1, 0, 1, 0, 0, 0, 2, 0, 0});
}

TEST_CASE("nll_loss and cross_entropy of CUDA tensors equal the CPU's (weight, ignore_index, reductions)" * no_device()) {
  using nn::Reduction;
  const Tensor<float> logits = values<float>({6, 5}, 19) * 0.1f;
  Tensor<int64_t> target = tensor<int64_t>({1, 4, -100, 0, 4, 2});
  const Tensor<float> weight = tensor<float>({0.5f, 1.0f, 2.0f, 1.5f, 0.25f});
  const Tensor<float> cl = logits.cuda(), cw = weight.cuda();
  const Tensor<int64_t> ct = target.cuda();
  const Tensor<float> logp = log_softmax(logits, 1), clogp = log_softmax(cl, 1);
  for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    const std::string what = kiln::detail::cat(" reduction ", int(r));
    const Tensor<float> got = F::nll_loss(clogp, ct, std::nullopt, -100, r);
    CHECK(got.is_cuda());
    expect_close(got.cpu(), F::nll_loss(logp, target, std::nullopt, -100, r), 1e-6, "nll_loss" + what);
    expect_close(F::nll_loss(clogp, ct, cw, -100, r).cpu(), F::nll_loss(logp, target, weight, -100, r), 1e-6,
                 "nll_loss with weight" + what);
    expect_close(F::cross_entropy(cl, ct, cw, -100, r).cpu(), F::cross_entropy(logits, target, weight, -100, r), 1e-6,
                 "cross_entropy with weight" + what);
    const Tensor<int64_t> t4 = tensor<int64_t>({1, 4, 3, 0, 4, 2});
    expect_close(F::cross_entropy(cl, t4.cuda(), cw, 4, r, 0.1).cpu(), F::cross_entropy(logits, t4, weight, 4, r, 0.1),
                 1e-6, "cross_entropy, ignore_index 4, label smoothing" + what);
  }
  // A [N, C, d] input, a 1-d input (one sample), double.
  const Tensor<double> x3 = values<double>({3, 4, 2}, 20) * 0.1;
  const Tensor<int64_t> t3 = indices({3, 2}, 4, 21);
  expect_close(F::cross_entropy(x3.cuda(), t3.cuda()).cpu(), F::cross_entropy(x3, t3), 1e-12, "cross_entropy [N, C, d]");
  const Tensor<float> x1 = values<float>({5}, 22) * 0.1f;
  const Tensor<int64_t> t1 = full<int64_t>({}, 3);
  expect_close(F::cross_entropy(x1.cuda(), t1.cuda()).cpu(), F::cross_entropy(x1, t1), 1e-6, "cross_entropy of one sample");
  // A target out of range: the device's kernel finds it, and the error names nll_loss, the target and the class
  // count (the CPU's message is unchanged).
  target.select(0, 4).fill_(int64_t(7));
  CHECK_THROWS_WITH_AS((void)F::nll_loss(logp, target), "nll_loss: target 7 is out of range for 5 classes",
                       std::out_of_range);
  CHECK_THROWS_WITH_AS((void)F::nll_loss(clogp, target.cuda()), "nll_loss: index 7 is out of range for dim 1 of size 5",
                       std::out_of_range);
  CHECK_THROWS_WITH_AS((void)F::cross_entropy(cl, target.cuda()),
                       "nll_loss: index 7 is out of range for dim 1 of size 5", std::out_of_range);
  target.select(0, 4).fill_(int64_t(-3));
  CHECK_THROWS_WITH_AS((void)F::nll_loss(clogp, target.cuda(), cw),
                       "nll_loss: index -3 is out of range for dim 1 of size 5", std::out_of_range);
}

TEST_CASE("indexing ops refuse operands on two devices, naming the op, the shapes and the devices" * no_device()) {
  const Tensor<float> x = values<float>({4, 5}, 23);
  const Tensor<float> cx = x.cuda();
  const Tensor<int64_t> index = indices({2, 5}, 4, 24);
  CHECK_THROWS_WITH_AS((void)gather(cx, 0, index),
                       "gather: self of shape [4, 5] is on cuda:0 but index of shape [2, 5] is on cpu; move them to one "
                       "device first (.to(device))",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)gather(x, 0, index.cuda()),
                       doctest::Contains("gather: self of shape [4, 5] is on cpu but index of shape [2, 5] is on cuda:0"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)index_select(cx, 0, tensor<int64_t>({1, 2, 3})),
                       doctest::Contains("index_select: self of shape [4, 5] is on cuda:0 but index of shape [3] is on cpu"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)F::embedding(tensor<int64_t>({1, 2}), cx),
                       doctest::Contains("embedding: self of shape [4, 5] is on cuda:0 but index of shape [2] is on cpu"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)scatter_add(cx, 0, index, x.narrow(0, 0, 2)),
                       doctest::Contains("scatter_add: self of shape [4, 5] is on cuda:0 but index of shape [2, 5] is on cpu"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)scatter_add(cx, 0, index.cuda(), x.narrow(0, 0, 2)),
                       doctest::Contains("scatter_add: self of shape [4, 5] is on cuda:0 but src of shape [2, 5] is on cpu"),
                       std::invalid_argument);
  const Tensor<int64_t> target = tensor<int64_t>({0, 1, 2, 3});
  CHECK_THROWS_WITH_AS((void)F::nll_loss(cx, target),
                       doctest::Contains("nll_loss: self of shape [4, 5] is on cuda:0 but index of shape [4, 1] is on cpu"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)F::nll_loss(cx, target.cuda(), tensor<float>({1, 1, 1, 1, 1})),
                       doctest::Contains("nll_loss: self of shape [5] is on cpu but index of shape [4] is on cuda:0"),
                       std::invalid_argument);
}

TEST_CASE("the backward nodes of gather and scatter_add work on CUDA gradients" * no_device()) {
  // The nodes on their own: their buffers on the gradient's device, their scatter and gather there.
  NoGradGuard no_grad;
  const Tensor<float> self = values<float>({4, 5}, 25);
  const Tensor<int64_t> index = indices({3, 5}, 4, 26);  // rows repeat: their gradients add up
  const Tensor<float> grad = values<float>({3, 5}, 27);
  autograd::GatherBackward<float> gather_node(self.impl_ptr(), 0, index.cuda(), "GatherBackward");
  autograd::GatherBackward<float> gather_cpu(self.impl_ptr(), 0, index, "GatherBackward");
  const auto g = gather_node.apply({grad.cuda().impl_ptr()});
  REQUIRE(g.at(0));
  CHECK(g[0]->device().is_cuda());
  expect_close(Tensor<float>(g[0]).cpu(), Tensor<float>(gather_cpu.apply({grad.impl_ptr()}).at(0)), 1e-6,
               "GatherBackward on CUDA");
  const Tensor<float> src = values<float>({4, 6}, 28);  // larger than the index: its other elements get 0
  Tensor<float> self_rg = self.clone(), src_rg = src.clone();
  self_rg.requires_grad_();
  src_rg.requires_grad_();
  autograd::ScatterAddBackward<float> scatter_node(self_rg.impl_ptr(), src_rg.impl_ptr(), 0, index.cuda());
  autograd::ScatterAddBackward<float> scatter_cpu(self_rg.impl_ptr(), src_rg.impl_ptr(), 0, index);
  const Tensor<float> up = values<float>({4, 5}, 29);
  const auto s = scatter_node.apply({up.cuda().impl_ptr()});
  const auto s_cpu = scatter_cpu.apply({up.impl_ptr()});
  REQUIRE(s.at(1));
  CHECK(s[1]->device().is_cuda());
  expect_close(Tensor<float>(s[0]).cpu(), Tensor<float>(s_cpu.at(0)), 0, "ScatterAddBackward: self's gradient");
  expect_close(Tensor<float>(s[1]).cpu(), Tensor<float>(s_cpu.at(1)), 0, "ScatterAddBackward: src's gradient");
}

TEST_CASE("gradients through gather, embedding and cross_entropy of CUDA tensors (needs autograd on CUDA)" * no_device()) {
  const Tensor<float> logits = values<float>({6, 5}, 30) * 0.1f, weight = values<float>({10, 5}, 31);
  const Tensor<int64_t> target = tensor<int64_t>({1, 4, -100, 0, 4, 2}), tokens = indices({6}, 10, 32);
  // The CPU's gradients, then the device's: loss = cross_entropy(logits + embedding(tokens, weight), target).
  const auto grads_of = [&](Device device) {
    Tensor<float> l = logits.to(device).clone(), w = weight.to(device).clone();
    l.requires_grad_();
    w.requires_grad_();
    const Tensor<float> loss = F::cross_entropy(Tensor<float>(l + F::embedding(tokens.to(device), w)), target.to(device));
    loss.backward();
    return std::make_pair(l.grad().cpu(), w.grad().cpu());
  };
  const auto [want_l, want_w] = grads_of(kCPU);
  const auto [got_l, got_w] = grads_of(Device(kCUDA, 0));
  expect_close(got_l, want_l, 1e-6, "logits' gradient");
  expect_close(got_w, want_w, 1e-6, "the embedding weight's gradient (scatter_add on the device)");
}

TEST_CASE("cat and stack of CUDA tensors equal the CPU's; inputs on two devices are refused" * no_device()) {
  const Tensor<float> a = values<float>({3, 4}, 33), b_base = values<float>({5, 3}, 34), c = values<float>({3, 1}, 35);
  const Tensor<float> b = b_base.t();  // [3, 5], transposed
  const Tensor<float> ca = a.cuda(), cb = b_base.cuda().t(), cc = c.cuda();
  const Tensor<float> joined = cat({ca, cb, cc}, 1);
  CHECK(joined.is_cuda());
  expect_close(joined.cpu(), cat({a, b, c}, 1), 0, "cat along dim 1, a transposed input");
  expect_close(cat({ca, ca}, -2).cpu(), cat({a, a}, 0), 0, "cat along dim 0");
  const Tensor<int64_t> i = arange<int64_t>(0, 6).reshape({2, 3});
  const Tensor<int64_t> i2 = Tensor<int64_t>(i * int64_t(2));
  CHECK(stack({i.cuda(), i2.cuda()}, 1).cpu().to_vector() == stack({i, i2}, 1).to_vector());
  expect_close(stack({ca, Tensor<float>(ca * 2.0f)}, 2).cpu(), stack({a, Tensor<float>(a * 2.0f)}, 2), 0, "stack");
  CHECK_THROWS_WITH_AS((void)cat({ca, c}, 1),
                       "cat: tensor 1 of shape [3, 1] is on cpu but tensor 0 of shape [3, 4] is on cuda:0; move them to "
                       "one device first (.to(device))",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)stack({a, ca}), doctest::Contains("stack: tensor 1 of shape [3, 4] is on cuda:0 but tensor 0"),
                       std::invalid_argument);
  // The gradient: each input gets its slice (needs autograd on CUDA).
  Tensor<float> x = a.cuda().clone(), y = b_base.cuda().clone();
  x.requires_grad_();
  y.requires_grad_();
  const Tensor<float> weights = values<float>({3, 9}, 36);
  sum(cat({x, y.t()}, 1) * weights.cuda()).backward();
  expect_close(x.grad().cpu(), weights.narrow(1, 0, 4).contiguous(), 0, "cat's gradient, tensor 0");
  expect_close(y.grad().cpu(), weights.narrow(1, 4, 5).t().contiguous(), 0, "cat's gradient, tensor 1 (transposed)");
}

}  // namespace test_cuda_emulated_indexing
