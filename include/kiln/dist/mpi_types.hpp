#pragma once
// kiln's dtypes and reduce ops as MPI datatypes and MPI_Ops. float, double, int32, int64 map to MPI's own types
// and ops; bool to MPI_C_BOOL with logical or (sum, max) and and (product, min), as PyTorch; bfloat16 and float16
// to 16-bit words reduced by user-defined MPI_Ops that compute in float and round to nearest even. avg is a sum divided
// afterwards (by the caller), for floating dtypes only.
#include "kiln/dist/mpi_header.hpp"
#include "kiln/dist/mpi_progress.hpp"

#include <algorithm>
#include <mutex>

#include "kiln/core/dtype.hpp"
#include "kiln/core/error.hpp"
#include "kiln/dist/process_group.hpp"

namespace kiln::dist::detail {

inline MPI_Datatype mpi_datatype(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return MPI_FLOAT;
    case ScalarType::Double: return MPI_DOUBLE;
    case ScalarType::Int32: return MPI_INT32_T;
    case ScalarType::Int64: return MPI_INT64_T;
    case ScalarType::Bool: return MPI_C_BOOL;
    case ScalarType::BFloat16:
    case ScalarType::Half: return MPI_UINT16_T;
  }
  throw std::logic_error("kiln::dist: unknown ScalarType");
}

template <class T, ReduceOp Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = a[i], y = b[i];
    float r;
    if constexpr (Op == ReduceOp::min) r = std::min(x, y);
    else if constexpr (Op == ReduceOp::max) r = std::max(x, y);
    else if constexpr (Op == ReduceOp::product) r = x * y;
    else r = x + y;  // sum, avg
    b[i] = T(r);
  }
}

// The user-defined MPI_Op for op on 16-bit floats T (created once, after MPI_Init).
template <class T>
MPI_Op half_op(ReduceOp op) {
  static std::once_flag once;
  static MPI_Op ops[4];
  std::call_once(once, [] {
    std::lock_guard lock(mpi_mutex());
    MPI_Op_create(&half_reduce<T, ReduceOp::sum>, 1, &ops[0]);
    MPI_Op_create(&half_reduce<T, ReduceOp::min>, 1, &ops[1]);
    MPI_Op_create(&half_reduce<T, ReduceOp::max>, 1, &ops[2]);
    MPI_Op_create(&half_reduce<T, ReduceOp::product>, 1, &ops[3]);
  });
  switch (op) {
    case ReduceOp::min: return ops[1];
    case ReduceOp::max: return ops[2];
    case ReduceOp::product: return ops[3];
    default: return ops[0];
  }
}

// The MPI_Op for op on dtype t; `what` names the collective for the message.
inline MPI_Op mpi_op(ReduceOp op, ScalarType t, const char* what) {
  const bool floating = t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::BFloat16 ||
                        t == ScalarType::Half;
  check<std::invalid_argument>(op != ReduceOp::avg || floating, what, ": ReduceOp::avg needs a floating dtype, got ",
                               dtype_name(t), " (use sum and divide)");
  if (t == ScalarType::BFloat16) return half_op<bfloat16>(op);
  if (t == ScalarType::Half) return half_op<float16>(op);
  if (t == ScalarType::Bool) return op == ReduceOp::product || op == ReduceOp::min ? MPI_LAND : MPI_LOR;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::min: return MPI_MIN;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::product: return MPI_PROD;
  }
  return MPI_SUM;
}

// MPI's text for an error code.
inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return kiln::detail::cat("MPI error ", code);
  return std::string(text, size_t(len));
}

}  // namespace kiln::dist::detail
