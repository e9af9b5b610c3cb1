#pragma once
// DLPack: exchanging CPU tensors with NumPy, PyTorch, JAX and the rest without a copy.
//
//   DLManagedTensor* m = kiln::to_dlpack(t);                    // the legacy ABI (NumPy < 2 speaks only it)
//   DLManagedTensorVersioned* v = kiln::to_dlpack_versioned(t); // DLPack 1.0 (flags: read-only, copied)
//   kiln::AnyTensor a = kiln::from_dlpack(m);                   // takes ownership: m's deleter runs when the
//                                                               // last kiln view of the memory is gone
//
// Ownership follows the DLPack protocol. An exported tensor keeps kiln's storage alive until the consumer
// calls its deleter (exactly once). from_dlpack takes ownership only when it succeeds: when it throws
// (an unsupported device, dtype or layout), the caller still owns the managed tensor and must delete it.
// A producer's read-only tensor (DLPACK_FLAG_BITMASK_READ_ONLY) is copied into kiln memory, since kiln
// tensors are writable, and the producer's deleter runs at once; everything else is a zero-copy view.
//
// The structs below are DLPack 1.0's ABI (dlpack.h of dmlc/dlpack, Apache-2.0), written out because
// Debian 12's libdlpack-dev is 0.6, without the versioned struct. They are declared at global scope with
// dlpack.h's names and include guard, so a program that includes the real dlpack.h first gets its
// definitions instead.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>

#include "kiln/tensor/any_tensor.hpp"

#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
extern "C" {
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
} DLDeviceType;
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL means compact row-major
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
}  // extern "C"
#endif  // DLPACK_DLPACK_H_

namespace kiln {

namespace detail::dlpack {

// kiln's dtype as DLPack spells it, and back (nullopt: no kiln dtype for it).
inline DLDataType to_dl(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return {kDLFloat, 32, 1};
    case ScalarType::Double: return {kDLFloat, 64, 1};
    case ScalarType::Int32: return {kDLInt, 32, 1};
    case ScalarType::Int64: return {kDLInt, 64, 1};
    case ScalarType::BFloat16: return {kDLBfloat, 16, 1};
    case ScalarType::Half: return {kDLFloat, 16, 1};
    case ScalarType::Bool: return {kDLBool, 8, 1};
  }
  throw std::logic_error("to_dlpack: internal error: a dtype without a DLPack code");
}

inline std::optional<ScalarType> from_dl(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  for (ScalarType s : {ScalarType::Float, ScalarType::Double, ScalarType::Int32, ScalarType::Int64,
                       ScalarType::BFloat16, ScalarType::Half, ScalarType::Bool}) {
    const DLDataType d = to_dl(s);
    if (d.code == t.code && d.bits == t.bits) return s;
  }
  // NumPy < 1.25 has no kDLBool and exports bool arrays as 8-bit unsigned; kiln has no uint8 to read them into.
  return std::nullopt;
}

// What an exported tensor owns: the tensor (so its storage lives) and the shape and strides arrays the
// DLTensor points into.
template <class Managed>
struct Export {
  Managed managed{};
  std::shared_ptr<TensorImpl> tensor;
  std::vector<int64_t> shape, strides;
};

template <class Managed>
Managed* export_tensor(const AnyTensor& t, const char* op) {
  check<std::invalid_argument>(t.defined(), op, ": the tensor is undefined");
  auto ctx = std::make_unique<Export<Managed>>();
  const TensorImpl& impl = *t.impl_ptr();
  ctx->tensor = t.impl_ptr();
  ctx->shape.assign(impl.shape.begin(), impl.shape.end());
  ctx->strides.assign(impl.strides.begin(), impl.strides.end());
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = impl.numel() > 0 ? static_cast<void*>(impl.data_bytes()) : nullptr;
  dl.device = {kDLCPU, 0};
  dl.ndim = int32_t(impl.shape.size());
  dl.dtype = to_dl(impl.dtype);
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = [](Managed* self) { delete static_cast<Export<Managed>*>(self->manager_ctx); };
  return &ctx.release()->managed;
}

// A kiln tensor viewing dl's memory; release() runs when the last view is gone. Throws (and never calls
// release) when kiln cannot view it.
template <class Release>
AnyTensor view_of(const DLTensor& dl, Release release, const char* op) {
  check<std::invalid_argument>(dl.device.device_type == kDLCPU || dl.device.device_type == kDLCUDAHost,
                               op, ": only CPU memory can be viewed (DLPack device type ", int(dl.device.device_type),
                               "); copy it to the host first");
  const std::optional<ScalarType> dtype = from_dl(dl.dtype);
  check<std::invalid_argument>(dtype.has_value(), op, ": no kiln dtype for DLPack dtype code ", int(dl.dtype.code),
                               ", ", int(dl.dtype.bits), " bits, ", int(dl.dtype.lanes), " lanes");
  check<ShapeError>(dl.ndim >= 0 && dl.ndim <= kMaxRank && (dl.ndim == 0 || dl.shape), op, ": ", dl.ndim,
                    " dims (kiln holds at most ", kMaxRank, ")");
  Shape shape = Shape::filled(dl.ndim, 0);
  for (int i = 0; i < dl.ndim; ++i) shape[i] = dl.shape[i];
  const int64_t numel = checked_numel(shape, op);
  const Strides strides = dl.strides ? [&] {
    Strides s = Strides::filled(dl.ndim, 0);
    for (int i = 0; i < dl.ndim; ++i) s[i] = dl.strides[i];
    return s;
  }() : contiguous_strides(shape);
  // The elements reach from the lowest offset to the highest; negative strides start below data.
  int64_t low = 0, high = 0;
  for (int i = 0; i < dl.ndim; ++i)
    if (shape[i] > 1) (strides[i] < 0 ? low : high) += (shape[i] - 1) * strides[i];
  const int64_t esize = int64_t(element_size(*dtype));
  char* first = static_cast<char*>(dl.data) + dl.byte_offset;
  check<std::invalid_argument>(numel == 0 || dl.data, op, ": a non-empty tensor with a null data pointer");
  auto impl = std::make_shared<TensorImpl>();
  const size_t span = numel == 0 ? 0 : size_t(high - low + 1) * size_t(esize);
  impl->storage = std::make_shared<Storage>(numel == 0 ? nullptr : first + low * esize, span,
                                            [release](void*) mutable { release(); });
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = -low;
  impl->dtype = *dtype;
  return AnyTensor(std::move(impl));
}

}  // namespace detail::dlpack

// The legacy DLPack struct for t (zero copy, t's strides). The consumer calls its deleter once.
inline DLManagedTensor* to_dlpack(const AnyTensor& t) {
  return detail::dlpack::export_tensor<DLManagedTensor>(t, "to_dlpack");
}

// DLPack 1.0's versioned struct; read_only sets DLPACK_FLAG_BITMASK_READ_ONLY (a promise the consumer keeps).
inline DLManagedTensorVersioned* to_dlpack_versioned(const AnyTensor& t, bool read_only = false) {
  DLManagedTensorVersioned* m = detail::dlpack::export_tensor<DLManagedTensorVersioned>(t, "to_dlpack_versioned");
  m->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m->flags = read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  return m;
}

// A kiln tensor viewing m's memory (see the top of this file for ownership).
inline AnyTensor from_dlpack(DLManagedTensor* m) {
  check<std::invalid_argument>(m != nullptr, "from_dlpack: null DLManagedTensor");
  return detail::dlpack::view_of(
      m->dl_tensor, [m] { if (m->deleter) m->deleter(m); }, "from_dlpack");
}

inline AnyTensor from_dlpack(DLManagedTensorVersioned* m) {
  check<std::invalid_argument>(m != nullptr, "from_dlpack: null DLManagedTensorVersioned");
  check<std::invalid_argument>(m->version.major == DLPACK_MAJOR_VERSION, "from_dlpack: DLPack ABI version ",
                               m->version.major, ".", m->version.minor, " (kiln reads major version ",
                               DLPACK_MAJOR_VERSION, ")");
  AnyTensor view = detail::dlpack::view_of(
      m->dl_tensor, [m] { if (m->deleter) m->deleter(m); }, "from_dlpack");
  if (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) return view.clone();  // the view, and with it m, dies here
  return view;
}

}  // namespace kiln
