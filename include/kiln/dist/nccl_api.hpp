#pragma once
// NCCL (libnccl.so.2), loaded at run time as kiln loads every CUDA library (cuda/dynlib.hpp): a program built with
// the NCCL backend starts and runs on a machine without NCCL, and only init_process_group("nccl") throws there.
// The declarations below are NCCL's C ABI (nccl.h of NCCL 2.14 and later: stable enum values, a 128-byte unique
// id passed by value, ncclConfig_t's first fields; tests/dist/test_nccl_abi.cpp checks them against the Toolkit's
// nccl.h). KILN_NCCL_LIBRARY names the library to load instead.
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/core/dtype.hpp"
#include "kiln/cuda/dynlib.hpp"
#include "kiln/dist/process_group.hpp"

namespace kiln::dist::nccl {

using Comm = void*;  // ncclComm_t
using Stream = void*;  // cudaStream_t (a CUstream)

enum Result : int { kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5, kRemoteError = 6, kInProgress = 7 };
enum DataType : int { kInt8 = 0, kUint8 = 1, kInt32 = 2, kInt64 = 4, kFloat16 = 6, kFloat32 = 7, kFloat64 = 8,
                      kBfloat16 = 9 };
enum RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

struct UniqueId {
  char internal[128];
};

// The fields of ncclConfig_t that NCCL 2.14 introduced; `size` and `version` tell later versions which ones a
// caller filled (the rest keep their defaults).
struct Config {
  size_t size = sizeof(Config);
  unsigned magic = 0xcafebeef;
  unsigned version = 21400;  // NCCL_VERSION(2, 14, 0)
  int blocking = INT_MIN;    // NCCL_CONFIG_UNDEF_INT: NCCL's default
  int cga_cluster_size = INT_MIN;
  int min_ctas = INT_MIN;
  int max_ctas = INT_MIN;
  const char* net_name = nullptr;
};

class Library {
  cuda::DynamicLibrary lib_;  // first: the function pointers are initialized from it

 public:
  static Library& get() {
    static Library* instance = new Library(library_names());  // never unloaded: communicators may be aborted at exit
    return *instance;
  }
  // The first of `names` that loads (get() is the one kiln uses).
  explicit Library(const std::vector<std::string>& names)
      : lib_("NCCL (libnccl)", names),
        get_unique_id(lib_.symbol<decltype(get_unique_id)>("ncclGetUniqueId")),
        comm_init_rank_config(lib_.symbol<decltype(comm_init_rank_config)>("ncclCommInitRankConfig")),
        comm_get_async_error(lib_.symbol<decltype(comm_get_async_error)>("ncclCommGetAsyncError")),
        comm_finalize(lib_.symbol<decltype(comm_finalize)>("ncclCommFinalize")),
        comm_destroy(lib_.symbol<decltype(comm_destroy)>("ncclCommDestroy")),
        comm_abort(lib_.symbol<decltype(comm_abort)>("ncclCommAbort")),
        all_reduce(lib_.symbol<decltype(all_reduce)>("ncclAllReduce")),
        broadcast(lib_.symbol<decltype(broadcast)>("ncclBroadcast")),
        reduce(lib_.symbol<decltype(reduce)>("ncclReduce")),
        all_gather(lib_.symbol<decltype(all_gather)>("ncclAllGather")),
        reduce_scatter(lib_.symbol<decltype(reduce_scatter)>("ncclReduceScatter")),
        send(lib_.symbol<decltype(send)>("ncclSend")),
        recv(lib_.symbol<decltype(recv)>("ncclRecv")),
        group_start(lib_.symbol<decltype(group_start)>("ncclGroupStart")),
        group_end(lib_.symbol<decltype(group_end)>("ncclGroupEnd")),
        get_error_string(lib_.symbol<decltype(get_error_string)>("ncclGetErrorString")),
        get_last_error(lib_.symbol<decltype(get_last_error)>("ncclGetLastError")) {
    lib_.symbol<Result (*)(int*)>("ncclGetVersion")(&version_);
    if (version_ < 21400)
      throw cuda::CudaUnavailableError(kiln::detail::cat("kiln::dist: NCCL ", version_, " (", lib_.path(),
                                                         ") is older than 2.14, which non-blocking communicators need"));
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // NCCL's version as major * 10000 + minor * 100 + patch (22809 for 2.28.9).
  int version() const { return version_; }
  std::string error(Result r, Comm comm = nullptr) const {
    std::string s = get_error_string(r);
    const char* last = comm ? get_last_error(comm) : nullptr;
    if (last && *last) s += kiln::detail::cat(" (", last, ")");
    return s;
  }

  Result (*get_unique_id)(UniqueId*);
  Result (*comm_init_rank_config)(Comm*, int, UniqueId, int, Config*);
  Result (*comm_get_async_error)(Comm, Result*);
  Result (*comm_finalize)(Comm);
  Result (*comm_destroy)(Comm);
  Result (*comm_abort)(Comm);
  Result (*all_reduce)(const void*, void*, size_t, DataType, RedOp, Comm, Stream);
  Result (*broadcast)(const void*, void*, size_t, DataType, int, Comm, Stream);
  Result (*reduce)(const void*, void*, size_t, DataType, RedOp, int, Comm, Stream);
  Result (*all_gather)(const void*, void*, size_t, DataType, Comm, Stream);
  Result (*reduce_scatter)(const void*, void*, size_t, DataType, RedOp, Comm, Stream);
  Result (*send)(const void*, size_t, DataType, int, Comm, Stream);
  Result (*recv)(void*, size_t, DataType, int, Comm, Stream);
  Result (*group_start)();
  Result (*group_end)();

 private:
  static std::vector<std::string> library_names() {
    if (const char* env = std::getenv("KILN_NCCL_LIBRARY"); env && *env) return {env};
    return {"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2"};
  }

  const char* (*get_error_string)(Result);
  const char* (*get_last_error)(Comm);
  int version_ = 0;
};

// kiln's dtypes as NCCL's. bool travels as bytes (its reductions are logical: nccl_op).
inline DataType data_type(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return kFloat32;
    case ScalarType::Double: return kFloat64;
    case ScalarType::Int32: return kInt32;
    case ScalarType::Int64: return kInt64;
    case ScalarType::Bool: return kUint8;
    case ScalarType::BFloat16: return kBfloat16;
    case ScalarType::Half: return kFloat16;
  }
  throw std::logic_error("kiln::dist: unknown ScalarType");
}

// op on dtype t as NCCL's: avg natively (floating dtypes only, as the MPI backend); bool's sum and max are a logical
// or (max of bytes 0 and 1), its product and min a logical and (min), as PyTorch.
inline RedOp red_op(ReduceOp op, ScalarType t, const char* what) {
  const bool floating = t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::BFloat16 ||
                        t == ScalarType::Half;
  check<std::invalid_argument>(op != ReduceOp::avg || floating, what, ": ReduceOp::avg needs a floating dtype, got ",
                               dtype_name(t), " (use sum and divide)");
  if (t == ScalarType::Bool) return op == ReduceOp::product || op == ReduceOp::min ? kMin : kMax;
  switch (op) {
    case ReduceOp::sum: return kSum;
    case ReduceOp::avg: return kAvg;
    case ReduceOp::min: return kMin;
    case ReduceOp::max: return kMax;
    case ReduceOp::product: return kProd;
  }
  return kSum;
}

}  // namespace kiln::dist::nccl
