// Generated reduction kernels (cuda/reduction.hpp) on the host shim against kiln's CPU reductions, and through
// NVRTC: sum, mean, amax, amin of fused expressions along dims in each dtype they take, softmax and log_softmax.
#include <doctest/doctest.h>

#include <functional>

#include "../ops/op_test_util.hpp"
#include "host_shim.hpp"
#include "kiln/cuda/nvrtc.hpp"
#include "kiln/cuda/reduction.hpp"
#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_null_reduction {

using namespace kiln;
using namespace kiln::test;

namespace {

// A softmax's values: within 1e-6 (float) or 1e-13 (double) of the CPU's, relative to the value or 1.
template <class T>
bool close_softmax(T got, T want) {
  const double tol = std::is_same_v<T, double> ? 1e-13 : 1e-6;
  if (std::isnan(double(want))) return std::isnan(double(got));
  if (std::isinf(double(want))) return got == want;
  return std::abs(double(got) - double(want)) <= tol * std::max(1.0, std::abs(double(want)));
}

template <class T>
bool close(T got, T want) {
  if constexpr (std::is_same_v<T, float>) return matches(got, want, 1);  // double sums in another order
  else if constexpr (std::is_same_v<T, double>) return matches(got, want, 1e4);
  else if constexpr (is_half_v<T>) return got.bits == want.bits || std::abs(float(got) - float(want)) <= 1e-2f * std::abs(float(want));
  else return got == want;
}

// Runs kernel k (made for e over dims) and compares its output with the CPU's `reference` through `same`. A split
// reduction's combine kernel k runs after its `partial` kernel, over `splits` chunks per output.
template <class E, class Out, class Same>
void add_kernel(ShimSuite& s, const std::string& label, const cuda::KernelSource& k, const E& e, const Dims& dims,
                const Tensor<Out>& reference, Same same, const cuda::KernelSource* partial = nullptr, int64_t splits = 1) {
  const Shape in = e.shape();
  const Tensor<Out> out = full<Out>(reference.shape(), Out(77));
  std::vector<std::shared_ptr<TensorImpl>> arrays;
  for_each_leaf(e, [&](const auto& leaf) { arrays.push_back(leaf.impl); });
  const int64_t items = out.numel() * splits;
  const Tensor<int64_t> scratch = zeros<int64_t>({2 * items});  // accumulators, then indices
  arrays.push_back(scratch.impl_ptr());
  using cuda::detail::word_of;
  const std::vector<uint64_t> tail =
      partial ? std::vector<uint64_t>{word_of(splits), word_of(static_cast<const void*>(scratch.data_ptr())),
                                      word_of(static_cast<const void*>(scratch.data_ptr() + items))}
              : std::vector<uint64_t>{};
  const auto words = cuda::reduction_descriptor(e, k, in, dims, {out.data_ptr(), out.strides()}, tail);
  if (partial) s.add(label + " over " + kiln::detail::cat(dims) + ", partial", *partial, words, [] {});
  s.add(label + " over " + kiln::detail::cat(dims), k, words, [=] {
                    const std::vector<Out> got = out.to_vector(), want = reference.to_vector();
                    REQUIRE(got.size() == want.size());
                    for (size_t i = 0; i < got.size(); ++i) {
                      INFO(label, " over ", dims, ": element ", i, " is ", +compute_t<Out>(got[i]), ", the CPU gives ",
                           +compute_t<Out>(want[i]));
                      CHECK(same(got[i], want[i]));
                    }
                    (void)arrays;
                  });
}

// Each kernel in both shapes of work: a thread per output and a warp per output (whichever reduction_variant
// picks for the shape, the other forced).
template <class Make>
void for_both_shapes(cuda::ReductionVariant v, const std::string& label, Make&& make) {
  for (const bool warps : {false, true}) {
    v.warp_rows = warps;
    make(v, label + (warps ? " (a warp per output)" : ""));
  }
}

template <cuda::Reduce R, class E, class Out>
void add(ShimSuite& s, const std::string& label, const E& e, const Dims& dims, const Tensor<Out>& reference) {
  for_both_shapes(cuda::reduction_variant(e.shape(), dims, e), label, [&](const cuda::ReductionVariant& v, const std::string& l) {
    add_kernel(s, l, cuda::reduction_kernel<R>(e, v, s.entry("red")), e, dims, reference,
               [](Out a, Out b) { return close(a, b); });
  });
}

// The split form, 3 chunks per output (contiguous, a warp each; the chunks folded by a warp per output).
template <cuda::Reduce R, class E, class Out>
void add_split(ShimSuite& s, const std::string& label, const E& e, const Dims& dims, const Tensor<Out>& reference) {
  cuda::ReductionVariant v = cuda::reduction_variant(e.shape(), dims, e);
  v.warp_rows = false;
  const auto ks = cuda::split_reduction_kernels<R>(e, v, s.entry("split"));
  add_kernel(s, label + " in 3 chunks", ks.combine, e, dims, reference, [](Out a, Out b) { return close(a, b); },
             &ks.partial, 3);
}

template <bool kLog, class E, class Out>
void add_softmax(ShimSuite& s, const std::string& label, const E& e, int64_t dim, const Tensor<Out>& reference) {
  for_both_shapes(cuda::reduction_variant(e.shape(), {dim}, e), label, [&](const cuda::ReductionVariant& v, const std::string& l) {
    add_kernel(s, l, cuda::softmax_kernel<kLog>(e, v, s.entry("softmax")), e, {dim}, reference,
               [](Out a, Out b) { return close_softmax(a, b); });
  });
}

template <class T>
Tensor<T> sample(const Shape& shape, uint32_t seed) {
  if constexpr (std::is_floating_point_v<T>) return tensor<T>(domain_samples<T>(-3, 3, size_t(numel_of(shape)), seed)).reshape(shape);
  else if constexpr (is_half_v<T>) return sample<float>(shape, seed).template to<T>();
  else return Tensor<double>(sample<double>(shape, seed) * 20.0).template to<T>();  // integers in [-60, 60]
}

template <class T>
void add_dtype(ShimSuite& s) {
  using C = compute_t<T>;
  const std::string name(dtype_name(scalar_type_of<T>()));
  // [4, 5, 6] read through a permutation, times a broadcast row, plus a scalar: one pass per output.
  const Tensor<T> x = sample<T>({6, 4, 5}, 1).permute({1, 2, 0});
  const Tensor<T> y = sample<T>({6}, 2);
  const auto e = x * y + C(1);
  for (const Dims& dims : {Dims{1}, Dims{0, 2}, Dims{2}, Dims{0, 1, 2}}) {
    add<cuda::Reduce::Sum>(s, "sum " + name, e, dims, sum(e, dims));
    add<cuda::Reduce::Max>(s, "amax " + name, e, dims, amax(e, dims));
    add<cuda::Reduce::Min>(s, "amin " + name, e, dims, amin(e, dims));
    if constexpr (is_floating_v<T>) add<cuda::Reduce::Mean>(s, "mean " + name, e, dims, mean(e, dims));
    add_split<cuda::Reduce::Sum>(s, "sum " + name, e, dims, sum(e, dims));
    add_split<cuda::Reduce::Max>(s, "amax " + name, e, dims, amax(e, dims));
    if constexpr (is_floating_v<T>) add_split<cuda::Reduce::Mean>(s, "mean " + name, e, dims, mean(e, dims));
  }
  add_split<cuda::Reduce::ArgMax>(s, "argmax " + name, e, Dims{2}, argmax(e, 2));
  add_split<cuda::Reduce::ArgMin>(s, "argmin " + name, e, Dims{0}, argmin(e, 0));
  if constexpr (std::is_floating_point_v<T>) {
    for (int64_t dim : {0, 1, 2}) {
      add_softmax<false>(s, "softmax " + name, e, dim, softmax(e, dim));
      add_softmax<true>(s, "log_softmax " + name, e, dim, log_softmax(e, dim));
    }
  }
}

}  // namespace

TEST_CASE("generated reductions and softmax give the CPU's results, and compile with NVRTC") {
  ShimSuite s;
  add_dtype<float>(s);
  add_dtype<double>(s);
  add_dtype<int32_t>(s);
  add_dtype<int64_t>(s);
  add_dtype<bfloat16>(s);

  // NaN propagates through amax/amin (wherever it is in the row), as on the CPU.
  std::vector<float> v = domain_samples<float>(-1, 1, 24, 3);
  v[5] = std::numeric_limits<float>::quiet_NaN();
  v[18] = std::numeric_limits<float>::quiet_NaN();
  const Tensor<float> with_nan = tensor<float>(v).reshape({4, 6});
  const Leaf<float> leaf(with_nan.impl_ptr());
  add<cuda::Reduce::Max>(s, "amax with NaN", leaf, Dims{1}, amax(with_nan, 1));
  add<cuda::Reduce::Min>(s, "amin with NaN", leaf, Dims{0}, amin(with_nan, 0));
  // Rows with NaN, +inf, all -inf: NaN rows; the others exact.
  std::vector<float> w = domain_samples<float>(-1, 1, 16, 4);
  w[1] = std::numeric_limits<float>::quiet_NaN();
  w[6] = std::numeric_limits<float>::infinity();
  for (int i = 8; i < 12; ++i) w[size_t(i)] = -std::numeric_limits<float>::infinity();
  const Tensor<float> specials = tensor<float>(w).reshape({4, 4});
  add_softmax<false>(s, "softmax of special rows", Leaf<float>(specials.impl_ptr()), 1, softmax(specials, 1));
  add_softmax<true>(s, "log_softmax of special rows", Leaf<float>(specials.impl_ptr()), 1,
                    log_softmax(specials, 1));
  // Rows longer than a warp (each lane takes several elements), one with a NaN, some with -inf; 25 rows, so the
  // warp per output kernel's 3 blocks of 8 rows loop once more.
  std::vector<float> long_rows = domain_samples<float>(-4, 4, 25 * 77, 5);
  long_rows[77 + 40] = std::numeric_limits<float>::quiet_NaN();
  long_rows[2 * 77 + 3] = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < 77; ++i) {  // a rising row (softmax's running max grows at every element); -inf leading a row
    long_rows[size_t(3 * 77 + i)] = 0.25f * float(i) - 9.0f;
    if (i < 40) long_rows[size_t(4 * 77 + i)] = -std::numeric_limits<float>::infinity();
  }
  const Tensor<float> rows = tensor<float>(long_rows).reshape({25, 77});
  const Leaf<float> rows_leaf(rows.impl_ptr());
  add<cuda::Reduce::Sum>(s, "sum of rows of 77", rows_leaf, Dims{1}, sum(rows, 1));
  add<cuda::Reduce::Max>(s, "amax of rows of 77", rows_leaf, Dims{1}, amax(rows, 1));
  add<cuda::Reduce::Min>(s, "amin of rows of 77", rows_leaf, Dims{1}, amin(rows, 1));
  add<cuda::Reduce::Mean>(s, "mean of rows of 77", rows_leaf, Dims{1}, mean(rows, 1));
  add_softmax<false>(s, "softmax of rows of 77", rows_leaf, 1, softmax(rows, 1));
  add_softmax<true>(s, "log_softmax of rows of 77", rows_leaf, 1, log_softmax(rows, 1));

  s.run_all();
  s.check_nvrtc({80, 90}, "reductions.cu");
}

TEST_CASE("a reduction's variant: kept and reduced dims, 64-bit indices for large inputs, a warp per output") {
  CHECK(cuda::reduction_variant({4, 5, 6}, {1}).key() == "reduce2x1_i32");
  // A warp per output when the innermost dim is reduced and an output has 32 elements or more.
  CHECK(cuda::reduction_variant({4, 5, 6}, {0, 1, 2}).key() == "reduce0x3_i32_w");
  CHECK_FALSE(cuda::reduction_variant({4, 5, 6}, {2}).warp_rows);
  CHECK(cuda::reduction_variant({4, 5, 32}, {2}).warp_rows);
  CHECK_FALSE(cuda::reduction_variant({64, 4}, {0}).warp_rows);
  CHECK_FALSE(cuda::reduction_variant({int64_t(1) << 20, 4096}, {1}).index32);
  // Eight elements, but a leaf whose strides reach past 2^31 in its storage (no data is touched).
  auto wide = std::make_shared<TensorImpl>(*zeros<float>({1}).impl_ptr());
  wide->shape = {4, 2};
  wide->strides = {int64_t(1) << 30, 1};
  CHECK_FALSE(cuda::reduction_variant({4, 2}, {1}, Leaf<float>(wide)).index32);
}

}  // namespace test_cuda_null_reduction
