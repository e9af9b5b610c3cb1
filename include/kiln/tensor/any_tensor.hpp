#pragma once
// AnyTensor: the same TensorImpl as a Tensor<T>, with its dtype known only at run time, for code that meets
// dtypes at run time (state_dicts, file loaders, DLPack, collectives). Converting either way shares the tensor:
//   AnyTensor a = t;                       // any Tensor<T>, implicitly
//   Tensor<float> f = a.as<float>();       // checked: DTypeError when a holds another dtype
//   a.visit([](const auto& t) { ... });    // t is the Tensor<T> of a's dtype
#include <concepts>
#include <memory>
#include <ostream>
#include <stdexcept>

#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/print.hpp"

namespace kiln {

namespace detail {

template <class T>
struct type_tag {
  using type = T;
};

// Calls fn(type_tag<T>{}) for the C++ type T of a ScalarType.
template <class F>
decltype(auto) dispatch_dtype(ScalarType st, F&& fn) {
  switch (st) {
    case ScalarType::Float: return fn(type_tag<float>{});
    case ScalarType::Double: return fn(type_tag<double>{});
    case ScalarType::Int32: return fn(type_tag<int32_t>{});
    case ScalarType::Int64: return fn(type_tag<int64_t>{});
    case ScalarType::Bool: return fn(type_tag<bool>{});
    case ScalarType::BFloat16: return fn(type_tag<bfloat16>{});
    case ScalarType::Half: return fn(type_tag<float16>{});
  }
  throw std::logic_error(cat("kiln: unknown ScalarType ", int(st)));
}

// The C++ spelling of T, for messages about template arguments (as<float>, as<int64_t>).
template <Dtype T>
constexpr const char* cpp_type_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, int32_t>) return "int32_t";
  else if constexpr (std::is_same_v<T, int64_t>) return "int64_t";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, bfloat16>) return "bfloat16";
  else return "float16";
}

}  // namespace detail

class AnyTensor {
 public:
  AnyTensor() = default;  // undefined
  template <Dtype T>
  AnyTensor(const Tensor<T>& t) : impl_(t.impl_ptr()) {}  // NOLINT: implicit by design
  explicit AnyTensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return bool(impl_); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  ScalarType dtype() const { return checked().dtype; }
  ScalarType scalar_type() const { return dtype(); }
  Device device() const { return checked().device(); }
  const Shape& shape() const { return checked().shape; }
  const Shape& sizes() const { return shape(); }
  int64_t size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
  const Strides& strides() const { return checked().strides; }
  int64_t storage_offset() const { return checked().offset; }
  int dim() const { return shape().size(); }
  int64_t numel() const { return checked().numel(); }
  bool is_contiguous() const { return checked().is_contiguous(); }
  size_t element_size() const { return kiln::element_size(dtype()); }
  // Bytes of the elements (numel * element_size), as libtorch's nbytes(); a view's span may be larger.
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  // The first element's address (at the storage offset).
  void* data_ptr() const { return checked().data_bytes(); }
  uint64_t version() const { return checked().version(); }

  template <Dtype T>
  bool is() const {
    return dtype() == scalar_type_of<T>();
  }
  // The same tensor as a Tensor<T>; throws DTypeError when it holds another dtype. Undefined stays undefined.
  template <Dtype T>
  Tensor<T> as() const {
    if (!impl_) return Tensor<T>();
    check<DTypeError>(is<T>(), "AnyTensor::as<", detail::cpp_type_name<T>(), ">: the tensor holds ",
                      dtype_name(dtype()), " values");
    return Tensor<T>(impl_);
  }
  // fn(Tensor<T>) for the T of this tensor's dtype; fn must return the same type for every T.
  template <class F>
  decltype(auto) visit(F&& fn) const {
    checked();
    return detail::dispatch_dtype(impl_->dtype, [&](auto tag) -> decltype(auto) {
      return fn(Tensor<typename decltype(tag)::type>(impl_));
    });
  }

  // A converted copy (this tensor itself when the dtype already matches, as libtorch's to()). A template only so
  // that its 49 conversions are compiled where a program calls it: as a plain member function every translation
  // unit that includes kiln.hpp compiled them (1.5 s of the 2.4 s that hello.cpp spent on unused code).
  template <std::same_as<ScalarType> Target>
  AnyTensor to(Target target) const {
    return visit([&](const auto& t) {
      return detail::dispatch_dtype(target, [&](auto tag) {
        return AnyTensor(t.template to<typename decltype(tag)::type>());
      });
    });
  }
  // Templates for the same reason as to(): each compiles a kernel per dtype.
  template <class = void>
  AnyTensor contiguous() const { return visit([](const auto& t) { return AnyTensor(t.contiguous()); }); }
  template <class = void>
  AnyTensor clone() const { return visit([](const auto& t) { return AnyTensor(t.clone()); }); }

 private:
  const TensorImpl& checked() const {
    if (!impl_) throw std::logic_error("kiln: the tensor is undefined (default-constructed AnyTensor)");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

inline std::ostream& operator<<(std::ostream& out, const AnyTensor& t) {
  if (!t.defined()) return out << "[ Tensor (undefined) ]";
  t.visit([&](const auto& typed) { out << typed; });
  return out;
}

// An uninitialized tensor of a run-time dtype.
inline AnyTensor empty(const Shape& shape, ScalarType dtype, Device device = kCPU) {
  return AnyTensor(TensorImpl::allocate(shape, dtype, "empty", device));
}
inline AnyTensor zeros(const Shape& shape, ScalarType dtype) {
  return detail::dispatch_dtype(dtype, [&](auto tag) { return AnyTensor(zeros<typename decltype(tag)::type>(shape)); });
}

}  // namespace kiln
