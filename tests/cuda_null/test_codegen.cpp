// The CUDA kernels generated from the op table, checked without a GPU (tests/cuda_null):
//   - every op's forward kernel (dense and strided/broadcast loops, each dtype the op takes) and every
//     differentiable op's backward kernel run on the host shim and give the CPU path's values (forward) and
//     the op table's float64 derivative (backward);
//   - NVRTC compiles all of them to sm_80 and sm_90 cubins without register spills;
//   - a 64-leaf expression (descriptor by pointer), 16-bit storage rounding, integer edge cases.
#include <doctest/doctest.h>

#include <functional>

#include "../ops/op_test_util.hpp"
#include "host_shim.hpp"
#include "kiln/cuda/descriptor.hpp"
#include "kiln/cuda/nvrtc.hpp"
#include "kiln/kiln.hpp"
#include "kiln/optim.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_null_codegen {

using namespace kiln;
using namespace kiln::test;

namespace {

// The tensors an expression's leaves hold (what a descriptor block points at).
template <class E>
std::vector<std::shared_ptr<TensorImpl>> leaves_of(const E& e) {
  std::vector<std::shared_ptr<TensorImpl>> out;
  for_each_leaf(e, [&](const auto& leaf) { out.push_back(leaf.impl); });
  return out;
}

template <class T>
void check_equal(const Tensor<T>& got_t, const Tensor<T>& want_t, double max_ulp, const std::string& label) {
  const std::vector<T> got = got_t.to_vector(), want = want_t.to_vector();
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 3; ++i) {
    bool ok;
    if constexpr (std::is_floating_point_v<T>) ok = matches(got[i], want[i], max_ulp);
    else if constexpr (is_half_v<T>) ok = got[i].bits == want[i].bits;
    else ok = got[i] == want[i];
    if (!ok) {
      ++bad;
      INFO(label, ": element ", i, " is ", +compute_t<T>(got[i]), ", the CPU path gives ", +compute_t<T>(want[i]),
           " (", max_ulp, " ULP allowed)");
      CHECK(ok);
    }
  }
  CHECK(bad == 0);
}

// Forward: the kernel of e (the variant its operands need) against evaluating e on the CPU.
template <class E>
void add_forward(ShimSuite& ks, const std::string& label, const E& e, double max_ulp) {
  using R = typename E::value_type;
  const Shape shape = e.shape();
  const Tensor<R> out = zeros<R>(shape), want(e);
  const cuda::KernelSource k = cuda::forward_kernel(e, cuda::choose_variant(e, shape, out.strides()), ks.entry("fwd"));
  const auto words = cuda::forward_descriptor(e, k, shape, {out.data_ptr(), out.strides()});
  const std::string what = label + " forward, " + k.variant.key();
  ks.add(what, k, words, [=, leaves = leaves_of(e)] { check_equal(out, want, max_ulp, what); });
}

// Backward of e over same-shape float leaves: each leaf's gradient against want(leaf, i), the op
// table's derivative in float64 at element i.
template <class E, class Want>
void add_backward(ShimSuite& ks, const std::string& label, const E& e, const Tensor<float>& g, Want want) {
  const Shape shape = e.shape();
  const cuda::KernelSource k = cuda::backward_kernel(e, cuda::choose_variant(e, shape, g.strides()), ks.entry("bwd"));
  std::vector<Tensor<float>> grads;
  std::vector<cuda::ArrayRef> refs;
  for (int i = 0; i < k.outputs; ++i) {
    grads.push_back(full<float>(shape, 12345.0f));  // every element must be written
    refs.push_back({grads.back().data_ptr(), grads.back().strides()});
  }
  const auto words = cuda::backward_descriptor(e, k, shape, {g.data_ptr(), g.strides()}, refs);
  const std::string what = label + " backward, " + k.variant.key();
  ks.add(what, k, words, [=, leaves = leaves_of(e), incoming = g] {
                        for (size_t leaf = 0; leaf < grads.size(); ++leaf) {
                          const std::vector<float> got = grads[leaf].to_vector();
                          int bad = 0;
                          for (size_t i = 0; i < got.size() && bad < 3; ++i) {
                            const double w = want(leaf, i);
                            const bool ok = std::abs(got[i] - w) <= 2e-5 * std::abs(w) + 1e-6;
                            if (!ok) {
                              ++bad;
                              INFO(what, ": gradient ", leaf, " element ", i, " is ", got[i], ", want ", w);
                              CHECK(ok);
                            }
                          }
                          CHECK(bad == 0);
                        }
                      });
}

// Inputs inside an op's domain: samples plus, for forward checks, the special values.
template <class T>
std::vector<T> float_inputs(const ops::OpInfo& info, size_t n, uint32_t seed, bool specials) {
  std::vector<T> v = domain_samples<T>(std::max(info.lo, -50.0), std::min(info.hi, 50.0), n, seed);
  // The special values kiln's ops are specified for (tests/ops): non-finite, zero, or inside the domain.
  if (specials)
    for (T s : special_values<T>())
      if (!std::isfinite(s) || s == 0 || (s >= info.lo && s <= info.hi)) v.push_back(s);
  return v;
}
// Away from kinks and within [-3, 3], where a float derivative is well conditioned.
std::vector<float> gradient_inputs(const ops::OpInfo& info, size_t n, uint32_t seed) {
  const double lo = info.lo > 0 ? std::max(info.lo, 0.2) : std::max(info.lo, -3.0), hi = std::min(info.hi, 3.0);
  std::vector<float> v = domain_samples<float>(lo, hi, n, seed);
  for (float& x : v)
    if (std::abs(x * 2 - std::round(x * 2)) < 0.05f) x += 0.1f;
  return v;
}
// Integers with the edge cases: 0, -1 (division), the extremes (wrapping).
template <class T>
std::vector<T> int_inputs(size_t n, uint32_t seed) {
  std::vector<T> v = {T(0), T(-1), T(1), std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), T(-7), T(7)};
  std::mt19937 rng(seed);
  while (v.size() < n) v.push_back(T(int(rng() % 101) - 50));
  return v;
}
template <class T>
std::vector<T> inputs_for(const ops::OpInfo& info, size_t n, uint32_t seed, bool specials = true) {
  if constexpr (std::is_floating_point_v<T>) return float_inputs<T>(info, n, seed, specials);
  else return int_inputs<T>(n, seed);
}

template <class Op, class T>
double allowed_ulp() {
  if constexpr (std::is_floating_point_v<T>) return Op::info.max_ulp + 2;  // the CPU's SIMD form and libm's
  else return 0;
}

template <class Op, class T>
void add_unary(ShimSuite& ks) {
  if constexpr (accepts<Op, T>()) {
    const std::string name = kiln::detail::cat(Op::name, " ", dtype_name(scalar_type_of<T>()));
    add_forward(ks, name, map<Op>(tensor<T>(inputs_for<T>(Op::info, 40, 1))), allowed_ulp<Op, T>());
    // Read through a transposed view: the strided loop.
    const Tensor<T> x = tensor<T>(inputs_for<T>(Op::info, 35, 2, false)).reshape({7, 5}).t();
    add_forward(ks, name, map<Op>(x), allowed_ulp<Op, T>());
  }
}

template <class Op, class T>
void add_binary(ShimSuite& ks) {
  if constexpr (accepts<Op, T>()) {
    const std::string name = kiln::detail::cat(Op::name, " ", dtype_name(scalar_type_of<T>()));
    const size_t n = 40;
    std::vector<T> a = inputs_for<T>(Op::info, n, 3), b = inputs_for<T>(Op::info, n, 4);
    b.resize(a.size());
    std::reverse(b.begin(), b.end());  // specials meet samples
    add_forward(ks, name, map<Op>(tensor<T>(a), tensor<T>(b)), allowed_ulp<Op, T>());
    // A transposed operand against a broadcast row, and a scalar operand (a descriptor word).
    const Tensor<T> x = tensor<T>(inputs_for<T>(Op::info, 35, 5, false)).reshape({7, 5}).t();
    const Tensor<T> row = tensor<T>(inputs_for<T>(Op::info, 7, 6, false));
    add_forward(ks, name, map<Op>(x, row), allowed_ulp<Op, T>());
    add_forward(ks, name, map<Op>(x, Scalar<T>(compute_t<T>(row.to_vector()[3]))), allowed_ulp<Op, T>());
  }
}

// Backward of a unary and a binary op against the op's derivative in float64.
template <class Op>
void add_unary_backward(ShimSuite& ks) {
  if constexpr (ops::is_differentiable<Op>() && accepts<Op, float>()) {
    const std::vector<float> x = gradient_inputs(Op::info, 40, 7), g = domain_samples<float>(-1, 1, 40, 8);
    add_backward(ks, std::string(Op::name), map<Op>(tensor<float>(x)), tensor<float>(g), [=](size_t, size_t i) {
      const double xi = x[i];
      return double(Op::grad(xi, Op::scalar(xi), double(g[i])));
    });
  }
}
template <class Op>
void add_binary_backward(ShimSuite& ks) {
  if constexpr (ops::is_differentiable<Op>() && accepts<Op, float>()) {
    const std::vector<float> a = gradient_inputs(Op::info, 40, 9), b = gradient_inputs(Op::info, 40, 10);
    const std::vector<float> g = domain_samples<float>(-1, 1, 40, 11);
    if constexpr (number_second_operand<Op>()) {  // a number bound (a descriptor word), away from a's (0.5)
      add_backward(ks, std::string(Op::name), map<Op>(tensor<float>(a), 0.5f), tensor<float>(g),
                   [=](size_t, size_t i) {
                     const double ai = a[i];
                     return double(std::get<0>(Op::grad(ai, 0.5, Op::scalar(ai, 0.5), double(g[i]))));
                   });
    } else {
      add_backward(ks, std::string(Op::name), map<Op>(tensor<float>(a), tensor<float>(b)), tensor<float>(g),
                   [=](size_t leaf, size_t i) {
                     const double ai = a[i], bi = b[i];
                     const auto grads = Op::grad(ai, bi, Op::scalar(ai, bi), double(g[i]));
                     return double(leaf == 0 ? std::get<0>(grads) : std::get<1>(grads));
                   });
    }
  }
}

template <class Op>
void add_unary_all(ShimSuite& ks) {
  add_unary<Op, float>(ks);
  add_unary<Op, double>(ks);
  add_unary<Op, int32_t>(ks);
  add_unary<Op, int64_t>(ks);
  add_unary_backward<Op>(ks);
}
template <class Op>
void add_binary_all(ShimSuite& ks) {
  add_binary<Op, float>(ks);
  add_binary<Op, double>(ks);
  add_binary<Op, int32_t>(ks);
  add_binary<Op, int64_t>(ks);
  add_binary_backward<Op>(ks);
}

// A tensor as an expression's leaf (Tensor::to<U>() converts at once; a leaf's to<U>() is a lazy cast node).
template <class T>
Leaf<T> leaf(const Tensor<T>& t) {
  return Leaf<T>(t.impl_ptr());
}

// Expressions beyond single ops: bool operands, where, 16-bit storage, casts, a deep tree, 64 leaves.
void add_expressions(ShimSuite& ks) {
  const Tensor<float> x = tensor<float>(domain_samples<float>(-4, 4, 48, 12)).reshape({6, 8});
  const Tensor<float> y = tensor<float>(domain_samples<float>(-4, 4, 8, 13));
  const Tensor<bool> p = x > 0, q = y < 1;
  add_forward(ks, "logical ops on bool", logical_xor(logical_and(p, q), logical_or(!p, q)), 0);
  add_forward(ks, "where", where(p, x * 2, y - 1), 2);

  // 16-bit storage: loads widen exactly, stores round to nearest even, NaN and subnormals included.
  std::vector<float> wide = special_values<float>();
  for (float v : {1.00390625f, 1.01171875f, 65519.0f, 65520.0f, 5.96e-8f, 2.98e-8f, 1e-40f, -3.0e-5f}) wide.push_back(v);
  const Tensor<float> w = tensor<float>(wide);
  add_forward(ks, "float to bfloat16", leaf(w).to<bfloat16>(), 0);
  add_forward(ks, "float to float16", leaf(w).to<float16>(), 0);
  const Tensor<bfloat16> hb = w.to<bfloat16>();
  const Tensor<float16> hh = w.to<float16>();
  add_forward(ks, "bfloat16 arithmetic", hb * 3 + 1, 0);
  add_forward(ks, "float16 arithmetic", ((hh * 3 + 1).to<float>()), 0);

  // Float to integer saturates, NaN to 0; integer to float; to bool.
  add_forward(ks, "float to int32", leaf(w).to<int32_t>(), 0);
  add_forward(ks, "float to int64", (w * 1e10f).to<int64_t>(), 0);
  add_forward(ks, "double to bool", leaf(w).to<double>().to<bool>(), 0);
  add_forward(ks, "int64 to float", leaf(tensor<int64_t>(int_inputs<int64_t>(20, 14))).to<float>(), 0);

  // A composite expression with broadcasting in three dims, and its backward through a cast.
  const Tensor<float> c = tensor<float>(domain_samples<float>(0.5, 2, 3, 15)).reshape({3, 1, 1});
  const auto deep = gelu(x * c + y) / (sigmoid(x) + c) - softplus(y * 0.5f);
  add_forward(ks, "composite", deep, 8);
  const Tensor<float> g = tensor<float>(domain_samples<float>(-1, 1, 48, 16)).reshape({6, 8});
  const Tensor<float> a = tensor<float>(gradient_inputs({.lo = -3, .hi = 3}, 48, 17)).reshape({6, 8});
  const std::vector<float> av = a.to_vector(), gv = g.to_vector();
  // exp(2 a) * a with the two a's as separate leaves: 2 a exp(2 a) g for the first, exp(2 a) g for the second.
  add_backward(ks, "through a cast", exp((a * 2.0f).to<double>()).to<float>() * a, g, [=](size_t leaf, size_t i) {
    const double ai = av[i], e = std::exp(2 * ai) * gv[i];
    return leaf == 0 ? 2 * ai * e : e;
  });
}

// Sum of 64 leaves of rank 8, each broadcast differently: the descriptor (4.7 KB) goes by pointer.
template <size_t... I>
auto sum_of(const std::vector<Tensor<float>>& t, std::index_sequence<I...>) {
  return (... + Leaf<float>(t[I].impl_ptr()));
}
void add_many_leaves(ShimSuite& ks) {
  std::vector<Tensor<float>> leaves;
  for (int i = 0; i < 64; ++i) {
    Shape s = Shape::filled(8, 1);
    s[i % 8] = 2;
    s[(i + 3) % 8] = 2;
    leaves.push_back(Tensor<float>(tensor<float>(domain_samples<float>(-1, 1, 4, 20 + i)).reshape(s) * float(i + 1)));
  }
  const auto e = sum_of(leaves, std::make_index_sequence<64>{});
  add_forward(ks, "64 leaves", e, 0);  // the same additions in the same order
  const cuda::KernelSource k = cuda::forward_kernel(e, cuda::choose_variant(e, e.shape(), contiguous_strides(e.shape())));
  CHECK(k.descriptor_by_pointer);
  CHECK(k.inputs == 64);
}

#define KILN_ADD_UNARY(fn, Op) add_unary_all<ops::Op>(ks);
#define KILN_ADD_BINARY(fn, Op) add_binary_all<ops::Op>(ks);

// Made once, for both test cases below: the kernels of every op and expression above.
ShimSuite& kernels() {
  static ShimSuite ks;
  static const bool filled = [] {
    KILN_UNARY_OPS(KILN_ADD_UNARY)
    KILN_BINARY_OPS(KILN_ADD_BINARY)
    KILN_BINARY_NUMBER_OPS(KILN_ADD_BINARY)
    add_expressions(ks);
    add_many_leaves(ks);
    return true;
  }();
  (void)filled;
  return ks;
}
#undef KILN_ADD_UNARY
#undef KILN_ADD_BINARY

}  // namespace

TEST_CASE("generated kernels, run on the host, give the CPU path's results") {
  ShimSuite& ks = kernels();
  MESSAGE(ks.runs(), " kernels");
  CHECK(ks.runs() > 250);
  ks.run_all();
}

TEST_CASE("generated kernels compile with NVRTC for sm_80 and sm_90 without register spills") {
  kernels().check_nvrtc({80, 90}, "op_kernels.cu");
}

TEST_CASE("Adam's update as one generated kernel with three outputs follows kiln's Adam step after step") {
  const std::vector<float> start = domain_samples<float>(-2, 2, 35, 30);
  const Tensor<float> target = tensor<float>(domain_samples<float>(-1, 1, 35, 31)).reshape({5, 7});
  Tensor<float> p_cpu = tensor<float>(start).reshape({5, 7}).clone();
  p_cpu.requires_grad_();
  const double lr = 0.05, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  optim::Adam<float> opt({p_cpu}, optim::AdamOptions(lr).betas(b1, b2).eps(eps).weight_decay(wd));

  // The kernel's side: p and its state m, v, updated in place by PyTorch's published rule.
  const Tensor<float> p = tensor<float>(start).reshape({5, 7}).clone(), m = zeros<float>({5, 7}), v = zeros<float>({5, 7});
  HostShim shim;
  std::string first_source;
  for (int t = 1; t <= 4; ++t) {
    opt.zero_grad();
    sum((p_cpu - target) * (p_cpu - target) * 0.5f).backward();
    const Tensor<float> grad = p_cpu.grad().clone();
    opt.step();

    const double step_size = lr / (1 - std::pow(b1, t)), bc2_sqrt = std::sqrt(1 - std::pow(b2, t));
    const auto g = grad + p * float(wd);
    const auto m_next = m * float(b1) + g * float(1 - b1);
    const auto v_next = v * float(b2) + g * g * float(1 - b2);
    const auto p_next = p - m_next / (sqrt(v_next) / float(bc2_sqrt) + float(eps)) * float(step_size);
    const cuda::KernelSource k = cuda::forward_kernel_all(
        cuda::choose_variant(p.shape(), {m.strides(), v.strides(), p.strides()}, m_next, v_next, p_next), "adam", m_next,
        v_next, p_next);
    CHECK(k.outputs == 3);
    if (t == 1) {
      shim.add(k);
      shim.build();
      first_source = k.source;
      CHECK(cuda::Nvrtc::get().compile(k.source, "adam.cu", 90).spill_store_bytes() == 0);
    }
    CHECK(k.source == first_source);  // the step's scalars are descriptor words: one kernel for every step
    shim.run(k.entry, cuda::forward_descriptor_all(k, p.shape(), {{m.data_ptr(), m.strides()},
                                                                  {v.data_ptr(), v.strides()},
                                                                  {p.data_ptr(), p.strides()}},
                                                   m_next, v_next, p_next));
    const std::vector<float> got = p.to_vector(), want = p_cpu.detach().to_vector();
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("step ", t, " element ", i);
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("the variant follows the operands: dense, strided, 64-bit indices") {
  const Tensor<float> x = zeros<float>({4, 6}), row = zeros<float>({6});
  const Strides dense = contiguous_strides({4, 6});
  CHECK(cuda::choose_variant(x + x, x.shape(), dense).key() == "dense_i32");
  CHECK(cuda::choose_variant(x + row, x.shape(), dense).key() == "strided2_i32");
  CHECK(cuda::choose_variant(x.t() * 2.0f, {6, 4}, contiguous_strides({6, 4})).key() == "strided2_i32");
  // An output written through a view (a column slice) is strided too.
  CHECK(cuda::choose_variant(x + x, x.shape(), Strides{12, 1}).key() == "strided2_i32");
  // A (lazily broadcast) operand whose offsets pass 2^31 needs 64-bit indices: no data is touched.
  auto big = std::make_shared<TensorImpl>(*x.impl_ptr());
  big->shape = {int64_t(1) << 20, 4096};
  big->strides = {4096, 1};
  CHECK_FALSE(cuda::choose_variant(Leaf<float>(big), big->shape, big->strides).index32);
}

TEST_CASE("the dense loop reads and writes four float or int32 elements at once where every array is 16-byte aligned") {
  Generator g(9);
  const Tensor<float> x = randn<float>({4099}, &g), y = randn<float>({4099}, &g);
  const Tensor<int32_t> n = arange<int32_t>(0, 4099);
  const cuda::KernelVariant dense{};
  // Which kernels have the vectorized form: float and int32 arrays, up to 8 leaves, the dense loop only.
  CHECK(cuda::forward_kernel(x * y + 1.0f, dense).source.find("kiln_vectors") != std::string::npos);
  CHECK(cuda::forward_kernel(n * 3, dense).source.find("kiln_vectors") != std::string::npos);
  CHECK(cuda::forward_kernel(x * y, cuda::KernelVariant{false, 1, true}).source.find("kiln_vectors") == std::string::npos);
  CHECK(cuda::forward_kernel(x.to<double>() * 2.0, dense).source.find("kiln_vectors") == std::string::npos);
  CHECK(cuda::forward_kernel(n.to<float>() * x, dense).source.find("kiln_vectors") != std::string::npos);
  auto nine = x + x + x + x + x + x + x + x + x;
  CHECK(cuda::forward_kernel(nine, dense).source.find("kiln_vectors") == std::string::npos);
  // Aligned arrays (1024 groups and 3 elements after them), an operand 4 bytes off alignment (the scalar loop for
  // all), two outputs one of which is a leaf (every lane's values are computed before the stores): the CPU's values.
  ShimSuite ks;
  add_forward(ks, "aligned x * y + 1", x * y + 1.0f, 0);
  add_forward(ks, "int32 n * 3 - n", n * 3 - n, 0);
  const Tensor<float> shifted = x.narrow(0, 1, 4098);
  CHECK(reinterpret_cast<uintptr_t>(shifted.data_ptr()) % 16 != 0);
  add_forward(ks, "a misaligned operand", shifted * y.narrow(0, 0, 4098), 0);
  const Tensor<float> a = x.clone(), b = y.clone();
  const auto k = cuda::forward_kernel_all(dense, ks.entry("all"), Tensor<float>(a + b) * 1.0f, a * 2.0f);
  CHECK(k.source.find("kiln_vectors") != std::string::npos);
  const auto words = cuda::forward_descriptor_all(k, a.shape(), {{b.data_ptr(), b.strides()}, {a.data_ptr(), a.strides()}},
                                                  Tensor<float>(a + b) * 1.0f, a * 2.0f);
  const Tensor<float> want_b(x + y), want_a(x * 2.0f);
  ks.add("two outputs, one a leaf", k, words, [=] {
    check_equal(b, want_b, 0, "b = a + b");
    check_equal(a, want_a, 0, "a = 2 a, from a's value before the stores");
  });
  ks.run_all();
  ks.check_nvrtc({80, 90}, "vectorized.cu");
}

TEST_CASE("generated source names every operand and scalar once, and rejects a malformed op string") {
  const Tensor<float> x = zeros<float>({3});
  const auto k = cuda::forward_kernel(x * 2.0f + x, {});
  CHECK(k.inputs == 2);
  CHECK(k.scalars == 1);
  CHECK(k.source.find("d.scalar[0].f") != std::string::npos);
  CHECK(k.source.find("0x1p+1") == std::string::npos);  // the scalar's value is not in the source
  CHECK_THROWS_WITH_AS(cuda::detail::substitute("f($0, $2)", {"a", "b"}), doctest::Contains("$2 of 2"), std::logic_error);
}

}  // namespace test_cuda_null_codegen
