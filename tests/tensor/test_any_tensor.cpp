// AnyTensor: shares the Tensor<T> it came from, checked as<T>(), visit over the run-time dtype, conversion.
#include <doctest/doctest.h>

#include <map>
#include <sstream>
#include <string>

#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_any_tensor {

using namespace kiln;

TEST_CASE("an AnyTensor is the same tensor with a run-time dtype") {
  Tensor<float> t = arange(12).reshape({3, 4});
  AnyTensor a = t;
  CHECK(a.defined());
  CHECK(a.dtype() == ScalarType::Float);
  CHECK(a.shape() == Shape{3, 4});
  CHECK(a.size(-1) == 4);
  CHECK(a.dim() == 2);
  CHECK(a.numel() == 12);
  CHECK(a.element_size() == 4);
  CHECK(a.nbytes() == 48);
  CHECK(a.is_contiguous());
  CHECK(a.data_ptr() == static_cast<void*>(t.data_ptr()));

  AnyTensor v = t.t();
  CHECK(!v.is_contiguous());
  CHECK(v.strides() == Strides{1, 4});

  AnyTensor s = t.select(0, 1);
  CHECK(s.storage_offset() == 4);
  CHECK(static_cast<float*>(s.data_ptr())[0] == 4.0f);  // the data pointer includes the offset

  Tensor<float> back = a.as<float>();
  CHECK(back.is_same(t));
  back.select(0, 0) = 9.0f;  // writes are seen through every handle
  CHECK(t.data_ptr()[3] == 9.0f);
}

TEST_CASE("as<T>() is checked") {
  AnyTensor i = tensor<int64_t>({1, 2, 3});
  CHECK(i.is<int64_t>());
  CHECK_FALSE(i.is<int32_t>());
  CHECK_THROWS_WITH_AS(i.as<float>(), "AnyTensor::as<float>: the tensor holds int64 values", DTypeError);
  AnyTensor b = tensor<bfloat16>({bfloat16(1.0f)});
  CHECK_THROWS_WITH_AS(b.as<int32_t>(), "AnyTensor::as<int32_t>: the tensor holds bfloat16 values", DTypeError);
  CHECK(b.as<bfloat16>().numel() == 1);
  CHECK_FALSE(AnyTensor().as<float>().defined());
  CHECK_THROWS_AS((void)AnyTensor().dtype(), std::logic_error);
}

TEST_CASE("visit calls the function with the Tensor<T> of the run-time dtype") {
  const auto sum = [](const AnyTensor& a) {
    return a.visit([](const auto& t) {
      double s = 0;
      for (auto v : t.to_vector()) s += double(compute_t<typename std::decay_t<decltype(t)>::value_type>(v));
      return s;
    });
  };
  std::map<std::string, AnyTensor> state;  // a state_dict of mixed dtypes
  state["w"] = tensor<float>({0.5f, 1.5f});
  state["d"] = tensor<double>({0.25, 0.25, 0.5});
  state["steps"] = full<int64_t>({}, 7);
  state["n"] = tensor<int32_t>({-3, 10});
  state["mask"] = tensor<bool>({true, false, true});
  state["h"] = tensor<bfloat16>({bfloat16(2.5f), bfloat16(-0.5f)});
  CHECK(sum(state["w"]) == 2.0);
  CHECK(sum(state["d"]) == 1.0);
  CHECK(sum(state["steps"]) == 7.0);
  CHECK(sum(state["n"]) == 7.0);
  CHECK(sum(state["mask"]) == 2.0);
  CHECK(sum(state["h"]) == 2.0);
  const ScalarType seen = state["n"].visit([](const auto& t) { return t.dtype(); });
  CHECK(seen == ScalarType::Int32);
}

TEST_CASE("printing, empty/zeros with a run-time dtype, conversion") {
  std::ostringstream s;
  s << AnyTensor(tensor<int32_t>({1, 2})) << ' ' << AnyTensor(tensor<float>({1.5f}));
  CHECK(s.str() == "tensor([1, 2], dtype=int32) tensor([1.5000])");

  AnyTensor e = empty({2, 3}, ScalarType::Int32);
  CHECK(e.dtype() == ScalarType::Int32);
  CHECK(e.shape() == Shape{2, 3});
  CHECK(e.nbytes() == 24);
  AnyTensor z = zeros({4}, ScalarType::Double);
  CHECK(z.as<double>().to_vector() == std::vector<double>{0, 0, 0, 0});

  AnyTensor f = tensor<float>({1.5f, -2.75f, 0.0f});
  AnyTensor n = f.to(ScalarType::Int32);
  CHECK(n.dtype() == ScalarType::Int32);
  CHECK(n.as<int32_t>().to_vector() == std::vector<int32_t>{1, -2, 0});
  CHECK(f.to(ScalarType::Bool).as<bool>().to_vector() == std::vector<bool>{true, true, false});
  CHECK(f.to(ScalarType::BFloat16).as<bfloat16>().to_vector()[1].bits == bfloat16(-2.75f).bits);
  CHECK(f.to(ScalarType::Float).impl_ptr() == f.impl_ptr());  // same dtype: the same tensor
  AnyTensor c = AnyTensor(tensor<float>({{1, 2}, {3, 4}}).t()).contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.as<float>().to_vector() == std::vector<float>{1, 3, 2, 4});
}

}  // namespace test_tensor_any_tensor
