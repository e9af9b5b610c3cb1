// float16 tensors: stored 16-bit, computed in float, rounded to nearest even on every store: casts from float,
// double and strided views (for bfloat16 too: the vectorized dense conversions against the scalar ones), fused arithmetic, AnyTensor::to(kHalf), reductions and matmul accumulating in
// float (a float16 accumulator would stop at 2048 when adding ones), softmax, printing, and gradients of 16-bit leaves.
#include <doctest/doctest.h>

#include "kiln/tensor/linalg.hpp"
#include "tensor_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_float16_tensors {

using namespace kiln;

namespace {
std::vector<uint16_t> bits_of(const Tensor<float16>& t) {
  std::vector<uint16_t> out;
  for (float16 v : t.to_vector()) out.push_back(v.bits);
  return out;
}
std::vector<uint16_t> rounded(const std::vector<double>& values) {
  std::vector<uint16_t> out;
  for (double v : values) out.push_back(float16(float(v)).bits);
  return out;
}
}  // namespace

TEST_CASE("float16 casts round each element to nearest even, from float, double and strided views") {
  // Values at and around ties of float16's spacing (2^-10 at 1), plus overflow, subnormals and specials.
  const Tensor<float> f = tensor<float>({1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65519.0f, 65520.0f, 0x1p-25f,
                                         3 * 0x1p-26f, -0.0f, INFINITY, NAN, 1e-3f, -2.5f});
  const Tensor<float16> h = f.to<float16>();
  CHECK(h.dtype() == ScalarType::Half);
  CHECK(bits_of(h) == rounded(test::values_of(f)));
  CHECK(bits_of(h)[0] == 0x3c00);  // the tie 1 + 2^-11 goes down to even 1.0
  CHECK(bits_of(h)[1] == 0x3c02);  // the tie 1 + 3 * 2^-11 goes up to even
  CHECK(bits_of(h)[3] == 0x7c00);
  CHECK(bits_of(h)[5] == 0x0001);
  const Tensor<float> big = test::normal_tensor<float>({37, 19}, 1, 100.0);
  CHECK(bits_of(big.t().to<float16>()) == rounded(test::values_of(big.t().contiguous())));
  CHECK(bits_of(big.to<double>().to<float16>()) == rounded(test::values_of(big)));
  // Back to float exactly (NaN aside), through the expression path.
  const std::vector<float> back = h.to<float>().to_vector();
  for (size_t i = 0; i < back.size(); ++i)
    if (i != 8) CHECK(back[i] == float(float16::from_bits(bits_of(h)[i])));
  CHECK(std::isnan(back[8]));
}

TEST_CASE_TEMPLATE("tensor casts (dense runs vectorized where compiled in) match the scalar conversion bit for bit", H,
                   float16, bfloat16) {
  // All 65536 patterns to float, and a million float patterns (every 4099th) back.
  Tensor<H> all = empty<H>({65536});
  for (uint32_t b = 0; b < 65536; ++b) all.data_ptr()[b] = H::from_bits(uint16_t(b));
  const std::vector<float> widened = all.template to<float>().to_vector();
  int64_t bad = 0;
  for (uint32_t b = 0; b < 65536; ++b)
    bad += std::bit_cast<uint32_t>(widened[b]) != std::bit_cast<uint32_t>(float(H::from_bits(uint16_t(b))));
  CHECK(bad == 0);
  std::vector<float> floats;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) floats.push_back(std::bit_cast<float>(uint32_t(u)));
  Tensor<float> f = empty<float>({int64_t(floats.size())});
  std::copy(floats.begin(), floats.end(), f.data_ptr());
  const std::vector<H> narrowed = f.template to<H>().to_vector();
  bad = 0;
  for (size_t i = 0; i < floats.size(); ++i) bad += narrowed[i].bits != H(floats[i]).bits;
  CHECK(bad == 0);
}

TEST_CASE("float16 expressions compute in float and round once when stored") {
  const Tensor<float16> a = (arange<float>(0.0, 300.0) * 0.37f).to<float16>();
  const Tensor<float16> c = a * a + 1;
  std::vector<double> expected;
  for (float16 v : a.to_vector()) expected.push_back(float(v) * float(v) + 1.0f);
  CHECK(bits_of(c) == rounded(expected));
  Tensor<float16> d = a.clone();
  d += 0.5f;
  CHECK(float(d[2].item()) == float(float16(float(a[2].item()) + 0.5f)));
}

TEST_CASE("AnyTensor converts to and from kHalf; printing names float16") {
  const AnyTensor any = tensor<float>({1.5f, -2.75f, 65504.0f});
  const AnyTensor h = any.to(kHalf);
  CHECK(h.dtype() == ScalarType::Half);
  CHECK(dtype_name(h.dtype()) == std::string("float16"));
  CHECK(bits_of(h.as<float16>()) == std::vector<uint16_t>{0x3e00, 0xc180, 0x7bff});
  CHECK(h.to(kFloat).as<float>().to_vector() == std::vector<float>{1.5f, -2.75f, 65504.0f});
  CHECK_THROWS_WITH_AS(h.as<bfloat16>(), "AnyTensor::as<bfloat16>: the tensor holds float16 values", DTypeError);
  std::ostringstream out;
  out << tensor<float16>({float16(1.5f), float16(2.0f)});
  CHECK(out.str() == "tensor([1.5000, 2.0000], dtype=float16)");
}

TEST_CASE("float16 reductions and matmul accumulate in float") {
  CHECK(float(sum(ones<float16>({4096})).item()) == 4096.0f);  // a float16 running sum would stick at 2048
  CHECK(float(mean(full<float16>({5000}, float16(0.1f))).item()) == float(float16(float(float16(0.1f)))));
  CHECK(float(amax(tensor<float16>({float16(1.0f), float16(-3.0f), float16(2.0f)})).item()) == 2.0f);
  CHECK(float(matmul(ones<float16>({1, 4096}), ones<float16>({4096, 1})).item()) == 4096.0f);
  // The product equals float's product of the widened operands, rounded once.
  const Tensor<float16> a = test::normal_tensor<float>({2, 8, 16}, 2).to<float16>();
  const Tensor<float16> b = test::normal_tensor<float>({16, 5}, 3).to<float16>();
  const Tensor<float16> c = matmul(a, b);
  REQUIRE(c.shape() == Shape{2, 8, 5});
  CHECK(bits_of(c) == rounded(test::values_of(matmul(a.to<float>(), b.to<float>()))));
  CHECK(bits_of(mm(a[0], b)) == bits_of(c[0].contiguous()));
  const Tensor<float16> p = softmax(a, -1);
  CHECK(p.dtype() == ScalarType::Half);
  CHECK(float(sum(p[1][3]).item()) == doctest::Approx(1.0).epsilon(1e-2));
}

TEST_CASE("float16 tensors take part in autograd (gradients in float16)") {
  Tensor<float16> x = tensor<float16>({float16(1.5f), float16(-2.0f), float16(0.25f)});
  x.requires_grad_();
  sum(x * x).backward();
  CHECK(x.grad().dtype() == ScalarType::Half);
  CHECK(bits_of(x.grad()) == rounded({3.0, -4.0, 0.5}));
  // The reductions whose backward formulas hold scalars (var, std, prod, norm) work on 16-bit types.
  for (auto* f : {+[](const Tensor<float16>& t) { return Tensor<float16>(var(t)); },
                  +[](const Tensor<float16>& t) { return Tensor<float16>(kiln::std(t)); },
                  +[](const Tensor<float16>& t) { return Tensor<float16>(prod(t)); },
                  +[](const Tensor<float16>& t) { return Tensor<float16>(norm(t, 3.0)); }}) {
    x.zero_grad();
    f(x).backward();
    CHECK(x.grad().defined());
  }
  CHECK(float(var(x).item()) == float(float16(float(var(x.to<float>()).item()))));
  CHECK(float(prod(x).item()) == -0.75f);
  Tensor<bfloat16> xb = x.detach().to<bfloat16>();
  xb.requires_grad_();
  norm(xb, 3.0).backward();
  CHECK(xb.grad().defined());
  Tensor<float16> w = ones<float16>({3, 2});
  w.requires_grad_();
  sum(matmul(x.detach().unsqueeze(0), w)).backward();
  CHECK(bits_of(w.grad()) == rounded({1.5, 1.5, -2.0, -2.0, 0.25, 0.25}));
}

// Gradients of a 16-bit leaf through every reduction equal float's on the same (rounded) values, within a few
// rounding steps of the 16-bit type: the backward computes in float and rounds where it stores.
TEST_CASE_TEMPLATE("16-bit leaves: gradients through the reductions, softmax and cumsum equal float's", H, bfloat16,
                   float16) {
  Generator g(17);
  const Tensor<float> values = randn<float>({5, 7}, &g).to<H>().template to<float>();  // exact in H
  const double tol = 4 * double(std::numeric_limits<float>::epsilon()) *
                     (std::is_same_v<H, bfloat16> ? 1 << 16 : 1 << 13);  // 4 ulp of H: 2^-6 and 2^-9
  auto check_gradient = [&](const char* name, auto f) {
    INFO(name);
    Tensor<float> reference = values.clone();
    reference.requires_grad_();
    sum(f(reference)).backward();
    Tensor<H> x = values.to<H>();
    x.requires_grad_();
    sum(f(x)).backward();
    REQUIRE(x.grad().dtype() == scalar_type_of<H>());
    const std::vector<double> got = test::values_of(x.grad()), want = test::values_of(reference.grad());
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("element ", i, ": ", got[i], ", float gives ", want[i]);
      CHECK(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
    }
  };
  check_gradient("amax", [](const auto& t) { return amax(t, 1) * 3.0f; });
  check_gradient("amin over dims 0 and 1", [](const auto& t) { return amin(t, Dims{0, 1}) * 3.0f; });
  check_gradient("max along a dim", [](const auto& t) { return std::get<0>(max(t, 0)) * 2.0f; });
  check_gradient("prod", [](const auto& t) { return prod(t, 0); });
  check_gradient("var", [](const auto& t) { return var(t, 1); });
  check_gradient("std", [](const auto& t) { return kiln::std(t, 0); });
  check_gradient("norm 2", [](const auto& t) { return norm(t, 2.0, Dims{1}); });
  check_gradient("norm 3", [](const auto& t) { return norm(t, 3.0); });
  check_gradient("logsumexp", [](const auto& t) { return logsumexp(t, 1); });
  check_gradient("mean, squared", [](const auto& t) { return square(mean(t, 0)); });
  check_gradient("softmax, squared", [](const auto& t) { return square(softmax(t, 1)); });
  check_gradient("log_softmax, weighted", [](const auto& t) { return log_softmax(t, 1) * 0.5f; });
  check_gradient("cumsum, squared", [](const auto& t) { return square(cumsum(t, 1)) * 0.1f; });
}

}  // namespace test_tensor_float16_tensors
