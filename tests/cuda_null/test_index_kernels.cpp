// The templated CUDA kernels for gather, index_select/embedding, scatter_add (cuda/index_kernels.hpp) and argmax /
// argmin (cuda/reduction.hpp) on the host shim against kiln's CPU ops, out-of-range indices, and NVRTC.
#include <doctest/doctest.h>

#include <functional>

#include "../ops/op_test_util.hpp"
#include "host_shim.hpp"
#include "kiln/cuda/index_kernels.hpp"
#include "kiln/cuda/nvrtc.hpp"
#include "kiln/cuda/reduction.hpp"
#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_null_index_kernels {

using namespace kiln;
using namespace kiln::test;

namespace {

template <class T>
Tensor<T> values(const Shape& shape, uint32_t seed) {
  const Tensor<double> x = tensor<double>(domain_samples<double>(-50, 50, size_t(numel_of(shape)), seed)).reshape(shape);
  if constexpr (std::is_same_v<T, bool>) return Tensor<bool>(x > 0.0);
  else return x.to<T>();
}

// Indices in [0, size), of `shape`.
Tensor<int64_t> indices(const Shape& shape, int64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> v(size_t(numel_of(shape)));
  for (int64_t& k : v) k = int64_t(rng() % uint32_t(size));
  return tensor<int64_t>(v).reshape(shape);
}

template <class T>
void expect_equal(const Tensor<T>& got, const Tensor<T>& want, const std::string& label, double rel = 0) {
  const std::vector<T> g = got.to_vector(), w = want.to_vector();
  REQUIRE(g.size() == w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO(label, ": element ", i, " is ", +compute_t<T>(g[i]), ", the CPU gives ", +compute_t<T>(w[i]));
    if constexpr (std::is_floating_point_v<T>) CHECK(std::abs(g[i] - w[i]) <= rel * std::abs(w[i]));
    else if constexpr (is_half_v<T>) CHECK(g[i].bits == w[i].bits);
    else CHECK(g[i] == w[i]);
  }
}

// gather along each dim of a permuted [4, 5, 6] source, and scatter_add into it.
template <class T>
void add_gather_scatter(ShimSuite& s) {
  const std::string name(dtype_name(scalar_type_of<T>()));
  const Tensor<T> src = values<T>({6, 4, 5}, 1).permute({1, 2, 0});  // [4, 5, 6], not contiguous
  for (int dim = 0; dim < 3; ++dim) {
    Shape ishape = src.shape();
    ishape[dim] = 3;
    const Tensor<int64_t> index = indices(ishape, src.shape()[dim], 10 + dim);
    const Tensor<T> want = gather(src, dim, index), out = zeros<T>(ishape);
    const auto k = cuda::gather_kernel<T>(3, dim, true, s.entry("gather"));
    auto error = std::make_shared<std::array<int64_t, 2>>();
    const auto words = cuda::index_descriptor(k, ishape, {out.data_ptr(), out.strides()}, {src.data_ptr(), src.strides()},
                                              {index.data_ptr(), index.strides()}, src.shape()[dim], error->data());
    const std::string label = kiln::detail::cat("gather ", name, " dim ", dim);
    s.add(label, k, words, [=] {
                CHECK((*error)[0] == 0);
                expect_equal(out, want, label);
                (void)src;
                (void)index;
              });

    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, int64_t>) {
      const Tensor<T> add = values<T>(ishape, 20 + dim);
      const Tensor<T> self = values<T>(src.shape(), 30 + dim), result = self.clone();
      const Tensor<T> expected = scatter_add(self, dim, index, add);
      const auto ks = cuda::scatter_add_kernel<T>(3, dim, false, s.entry("scatter_add"));
      const auto wsc = cuda::index_descriptor(ks, ishape, {result.data_ptr(), result.strides()},
                                              {add.data_ptr(), add.strides()}, {index.data_ptr(), index.strides()},
                                              src.shape()[dim], error->data());
      const std::string slabel = kiln::detail::cat("scatter_add ", name, " dim ", dim);
      s.add(slabel, ks, wsc, [=] {
                   CHECK((*error)[0] == 0);
                   expect_equal(result, expected, slabel, 1e-12);  // sums of the same terms, maybe in another order
                   (void)add;
                   (void)index;
                 });
    }
  }
}

// index_select / embedding: a gather whose index is broadcast over the other dim (stride 0), as on the CPU.
void add_embedding(ShimSuite& s) {
  const Tensor<float> weight = values<float>({10, 4}, 40);
  const Tensor<int64_t> ids = tensor<int64_t>({3, 0, 9, 9, 3, 7, 0});
  const Tensor<int64_t> index = ids.reshape({7, 1}).expand({7, 4});
  const Tensor<float> want = index_select(weight, 0, ids), out = zeros<float>({7, 4});
  const auto k = cuda::gather_kernel<float>(2, 0, true, s.entry("embedding"));
  auto error = std::make_shared<std::array<int64_t, 2>>();
  const auto words = cuda::index_descriptor(k, {7, 4}, {out.data_ptr(), out.strides()},
                                            {weight.data_ptr(), weight.strides()}, {index.data_ptr(), index.strides()},
                                            10, error->data());
  s.add("embedding rows", k, words, [=] {
              CHECK((*error)[0] == 0);
              expect_equal(out, want, "embedding rows");
              (void)weight;
              (void)index;
            });
}

// argmax / argmin along each dim, with ties (the first wins) and NaN (counts as the extreme), against the CPU, by a
// thread per output and by a warp per output (rows of 70: a lane takes several elements, the lanes' ties meet).
template <class T>
void add_arg(ShimSuite& s) {
  const std::string name(dtype_name(scalar_type_of<T>()));
  for (const Shape& shape : {Shape{4, 5, 6}, Shape{3, 70}}) {
    Tensor<T> x = Tensor<double>(round(values<double>(shape, 50) / 10.0)).to<T>();  // many ties
    if constexpr (std::is_floating_point_v<T>) {
      x.data_ptr()[7] = std::numeric_limits<T>::quiet_NaN();
      x.data_ptr()[61] = std::numeric_limits<T>::quiet_NaN();
    }
    const Leaf<T> leaf(x.impl_ptr());
    for (int64_t dim = 0; dim < shape.size(); ++dim)
      for (const bool warps : {false, true}) {
        cuda::ReductionVariant v = cuda::reduction_variant(x.shape(), {dim}, leaf);
        v.warp_rows = warps;
        const auto add_one = [&](auto kind_constant, const Tensor<int64_t>& want, const char* what) {
          constexpr cuda::Reduce kind = decltype(kind_constant)::value;
          const auto k = cuda::reduction_kernel<kind>(leaf, v, s.entry(what));
          const Tensor<int64_t> out = zeros<int64_t>(want.shape());
          const auto words = cuda::reduction_descriptor(leaf, k, x.shape(), {dim}, {out.data_ptr(), out.strides()});
          const std::string label =
              kiln::detail::cat(what, " ", name, " of ", shape, " dim ", dim, warps ? " (a warp per output)" : "");
          s.add(label, k, words, [=] {
            expect_equal(out, want, label);
            (void)x;
          });
        };
        add_one(std::integral_constant<cuda::Reduce, cuda::Reduce::ArgMax>{}, argmax(x, dim), "argmax");
        add_one(std::integral_constant<cuda::Reduce, cuda::Reduce::ArgMin>{}, argmin(x, dim), "argmin");
      }
  }
}

}  // namespace

TEST_CASE("gather, scatter_add, embedding, argmax and argmin kernels give the CPU's results and compile with NVRTC") {
  ShimSuite s;
  add_gather_scatter<float>(s);
  add_gather_scatter<double>(s);
  add_gather_scatter<int32_t>(s);
  add_gather_scatter<int64_t>(s);
  add_gather_scatter<bfloat16>(s);
  add_gather_scatter<bool>(s);
  add_embedding(s);
  add_arg<float>(s);
  add_arg<double>(s);
  add_arg<int32_t>(s);
  s.run_all();
  s.check_nvrtc({80, 90}, "index_kernels.cu");
}

TEST_CASE("an index out of range is neither read nor written, and throws the CPU's error after the kernel") {
  const Tensor<float> src = values<float>({4, 5}, 60);
  HostShim shim;
  const auto k = cuda::gather_kernel<float>(2, 1, true, "bad_gather");
  const auto ks = cuda::scatter_add_kernel<float>(2, 1, true, "bad_scatter");
  shim.add(k);
  shim.add(ks);
  shim.build();
  for (int64_t bad : {5, -1, -6, 1000}) {
    Tensor<int64_t> index = indices({4, 2}, 5, 61);
    index.data_ptr()[3] = bad;
    std::string cpu_message;
    try {
      gather(src, 1, index);
    } catch (const std::out_of_range& e) {
      cpu_message = e.what();
    }
    REQUIRE_FALSE(cpu_message.empty());

    const Tensor<float> out = full<float>({4, 2}, -7.0f);
    std::array<int64_t, 2> error{};
    shim.run(k.entry, cuda::index_descriptor(k, {4, 2}, {out.data_ptr(), out.strides()}, {src.data_ptr(), src.strides()},
                                             {index.data_ptr(), index.strides()}, 5, error.data()));
    CHECK(error[0] == 1);
    CHECK(error[1] == bad);
    CHECK(out.to_vector()[3] == -7.0f);  // the bad element was skipped, the others written
    CHECK(out.to_vector()[2] != -7.0f);
    CHECK_THROWS_WITH_AS(cuda::check_index_error(error.data(), "gather", 1, 5), cpu_message.c_str(), std::out_of_range);

    // scatter_add leaves the target of a bad index alone.
    const Tensor<float> target = zeros<float>({4, 5}), add = ones<float>({4, 2});
    error = {};
    shim.run(ks.entry, cuda::index_descriptor(ks, {4, 2}, {target.data_ptr(), target.strides()},
                                              {add.data_ptr(), add.strides()}, {index.data_ptr(), index.strides()}, 5,
                                              error.data()));
    CHECK(error[0] == 1);
    CHECK(sum(target).item() == 7.0f);  // 8 ones, one dropped
  }
}

}  // namespace test_cuda_null_index_kernels
