// operator<<: exact strings as PyTorch prints them (torch/_tensor_str.py, default print options).
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_print {

using namespace kiln;

namespace {
template <class X>
std::string str(const X& t) {
  std::ostringstream s;
  s << t;
  return s.str();
}
}  // namespace

TEST_CASE("floats: integer values as '1.', others with 4 decimals, one shared width") {
  CHECK(str(tensor<float>({{1, 2}, {3, 4}})) == "tensor([[1., 2.],\n        [3., 4.]])");
  CHECK(str(tensor<float>({1.5f, 2.25f})) == "tensor([1.5000, 2.2500])");
  CHECK(str(tensor<float>({-1.5f, 2.0f})) == "tensor([-1.5000,  2.0000])");
  CHECK(str(tensor<float>({-3, 10})) == "tensor([-3., 10.])");
  CHECK(str(zeros({3})) == "tensor([0., 0., 0.])");
  CHECK(str(tensor<float>({1, NAN, INFINITY, -INFINITY})) == "tensor([1., nan, inf, -inf])");
  CHECK(str(tensor<float>({1.5f, -NAN})) == "tensor([1.5000,    nan])");
  CHECK(str(tensor<float>({0.123456f})) == "tensor([0.1235])");
}

TEST_CASE("scientific notation when the range needs it") {
  CHECK(str(tensor<float>({1e-5f, 1.0f})) == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(str(tensor<float>({1, 100000})) == "tensor([1.0000e+00, 1.0000e+05])");
  CHECK(str(tensor<double>({2e9, 3e9})) == "tensor([2.0000e+09, 3.0000e+09], dtype=float64)");
  CHECK(str(tensor<float>({1, 1000})) == "tensor([   1., 1000.])");  // a ratio of exactly 1000 stays fixed
}

TEST_CASE("integers and bools, with PyTorch's dtype suffixes") {
  CHECK(str(tensor<int64_t>({1, -20, 300})) == "tensor([  1, -20, 300])");
  CHECK(str(tensor<int32_t>({1, 2})) == "tensor([1, 2], dtype=int32)");
  CHECK(str(tensor<bool>({true, false})) == "tensor([ True, False])");
  CHECK(str(tensor<bfloat16>({bfloat16(1.5f), bfloat16(2.0f)})) == "tensor([1.5000, 2.0000], dtype=bfloat16)");
}

TEST_CASE("0-dim, empty and undefined tensors") {
  CHECK(str(full<float>({}, 3.5f)) == "tensor(3.5000)");
  CHECK(str(full<int64_t>({}, 3)) == "tensor(3)");
  CHECK(str(full<double>({}, 2.0)) == "tensor(2., dtype=float64)");
  CHECK(str(zeros({0, 3})) == "tensor([], size=(0, 3))");
  CHECK(str(zeros({0})) == "tensor([])");
  CHECK(str(empty<int64_t>({0})) == "tensor([], dtype=int64)");
  CHECK(str(empty<bool>({2, 0, 1})) == "tensor([], size=(2, 0, 1), dtype=bool)");
  CHECK(str(Tensor<float>()) == "[ Tensor (undefined) ]");
}

TEST_CASE("3-D layout and non-contiguous views") {
  CHECK(str(ones({2, 2, 2})) ==
        "tensor([[[1., 1.],\n"
        "         [1., 1.]],\n"
        "\n"
        "        [[1., 1.],\n"
        "         [1., 1.]]])");
  Tensor<float> a = arange(6).reshape({2, 3});
  CHECK(str(a.t()) == "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]])");
}

TEST_CASE("rows wrap at 80 columns") {
  Tensor<float> t = arange(30) / 10;
  CHECK(str(t) ==
        "tensor([0.0000, 0.1000, 0.2000, 0.3000, 0.4000, 0.5000, 0.6000, 0.7000, 0.8000,\n"
        "        0.9000, 1.0000, 1.1000, 1.2000, 1.3000, 1.4000, 1.5000, 1.6000, 1.7000,\n"
        "        1.8000, 1.9000, 2.0000, 2.1000, 2.2000, 2.3000, 2.4000, 2.5000, 2.6000,\n"
        "        2.7000, 2.8000, 2.9000])");
  // A suffix that would pass column 80 goes on its own line.
  Tensor<int32_t> big = full<int32_t>({24}, 1000000);
  const std::string row = "1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000";
  CHECK(str(big) == "tensor([" + row + ",\n        " + row + ",\n        " + row + "],\n       dtype=int32)");
}

TEST_CASE("over 1000 elements, each long dim shows 3 entries at each end") {
  CHECK(str(arange<int64_t>(2000)) == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  CHECK(str(arange(10000)) ==
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 9.9970e+03, 9.9980e+03,\n"
        "        9.9990e+03])");
  CHECK(str(arange(10000).reshape({100, 100})) ==
        "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 9.7000e+01, 9.8000e+01,\n"
        "         9.9000e+01],\n"
        "        [1.0000e+02, 1.0100e+02, 1.0200e+02,  ..., 1.9700e+02, 1.9800e+02,\n"
        "         1.9900e+02],\n"
        "        [2.0000e+02, 2.0100e+02, 2.0200e+02,  ..., 2.9700e+02, 2.9800e+02,\n"
        "         2.9900e+02],\n"
        "        ...,\n"
        "        [9.7000e+03, 9.7010e+03, 9.7020e+03,  ..., 9.7970e+03, 9.7980e+03,\n"
        "         9.7990e+03],\n"
        "        [9.8000e+03, 9.8010e+03, 9.8020e+03,  ..., 9.8970e+03, 9.8980e+03,\n"
        "         9.8990e+03],\n"
        "        [9.9000e+03, 9.9010e+03, 9.9020e+03,  ..., 9.9970e+03, 9.9980e+03,\n"
        "         9.9990e+03]])");
  // The width comes from the shown values only: 1e6 in the hidden middle does not widen the columns.
  Tensor<int64_t> t = zeros<int64_t>({1001});
  t.data_ptr()[500] = 1000000;
  CHECK(str(t) == "tensor([0, 0, 0,  ..., 0, 0, 0])");
  // Exactly 1000 elements are printed in full.
  CHECK(str(zeros<bool>({1000})).find("...") == std::string::npos);
  // A short dim of a summarized tensor is shown whole.
  CHECK(str(zeros<int32_t>({2, 600})) ==
        "tensor([[0, 0, 0,  ..., 0, 0, 0],\n        [0, 0, 0,  ..., 0, 0, 0]], dtype=int32)");
}

}  // namespace test_tensor_print
