#pragma once
// gather and scatter_add along a dim as CUDA kernels, templated on the element type, the rank and the dim
// (index_select and embedding are gathers whose index is broadcast, as on the CPU: tensor/gather.hpp). Indices
// are int64 in [0, size), as torch's. One out of range (a negative one too) is never read or written: the kernel
// records it in a two-word error block (flag, index) and skips it, and the host throws after the kernel with the
// CPU path's message (check_index_error).
//
// Descriptor: n | size[rank] (the index's shape) | out | out_stride[rank] | src | src_stride[rank] | index |
// index_stride[rank] | limit (the indexed dim's size) | error.
#include <stdexcept>

#include "kiln/cuda/descriptor.hpp"

namespace kiln::cuda {

namespace detail {

// The kernel over the index's elements; `action` is the statement once `k` (the checked index) and the
// offsets `o` (of out), `s` (of src) are known; `indexed` names the array whose dim is
// indexed ("out" or "src"), whose offset takes k along dim.
inline KernelSource index_kernel(std::string entry, int rank, int dim, bool index32, const std::string& indexed,
                                 const std::string& action) {
  check<std::invalid_argument>(dim >= 0 && dim < rank, "kiln::cuda: dim ", dim, " of a rank-", rank, " index kernel");
  KernelSource k;
  k.entry = std::move(entry);
  k.inputs = 2;
  k.outputs = 1;
  k.variant = {false, rank, index32};
  const size_t r = size_t(rank);
  const auto offset = [&](const std::string& array) {
    std::string sum = "0";
    for (int i = 0; i < rank; ++i)
      sum += cat(" + ", i == dim && array == indexed ? "k" : cat("c", i), " * (kiln_index)d.", array, "_stride[", i, "]");
    return sum;
  };
  const std::string body =
      coordinates("i", 0, rank, "size") +
      cat("    long long k = ((const long long*)d.index)[", offset("index"), "];\n") +
      "    if (k < 0 || k >= d.limit) { d.error[0] = 1; d.error[1] = k; continue; }\n" +
      cat("    const kiln_index o = ", offset("out"), ", s = ", offset("src"), ";\n") + "    " + action + "\n";
  assemble(k,
           {{"long long n", 1},
            {cat("long long size[", r, "]"), r},
            {"void* out", 1},
            {cat("long long out_stride[", r, "]"), r},
            {"const void* src", 1},
            {cat("long long src_stride[", r, "]"), r},
            {"const void* index", 1},
            {cat("long long index_stride[", r, "]"), r},
            {"long long limit", 1},
            {"long long* error", 1}},
           grid_stride_loop("i", "d.n", body));
  return k;
}

}  // namespace detail

// out[c] = src[c with c[dim] = index[c]], over the index's shape.
template <Dtype T>
KernelSource gather_kernel(int rank, int dim, bool index32, std::string entry = "kiln_gather") {
  const std::string type(detail::storage_name<T>());
  return detail::index_kernel(std::move(entry), rank, dim, index32, "src",
                              detail::cat("((", type, "*)d.out)[o] = ((const ", type, "*)d.src)[s];"));
}

// out[c with c[dim] = index[c]] += src[c], over the index's shape (atomically: indices may repeat).
template <Dtype T>
KernelSource scatter_add_kernel(int rank, int dim, bool index32, std::string entry = "kiln_scatter_add") {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                    std::is_same_v<T, int64_t>,
                "kiln: scatter_add on CUDA takes float, double, int32 and int64 tensors");
  const std::string type(detail::compute_name<T>());
  return detail::index_kernel(std::move(entry), rank, dim, index32, "out",
                              detail::cat("kiln_atomic_add(&((", type, "*)d.out)[o], ((const ", type, "*)d.src)[s]);"));
}

// The block of an index kernel: `out` and `src` with strides over the index's dims, `limit` the size of the
// indexed dim, `error` two zeroed words the kernel may set.
inline std::vector<uint64_t> index_descriptor(const KernelSource& k, const Shape& index_shape, const ArrayRef& out,
                                              const ArrayRef& src, const ArrayRef& index, int64_t limit,
                                              int64_t* error) {
  std::vector<uint64_t> w = {detail::word_of(numel_of(index_shape))};
  for (int64_t s : index_shape) w.push_back(detail::word_of(s));
  for (const ArrayRef* a : {&out, &src, &index}) {
    w.push_back(detail::word_of(a->data));
    for (int i = 0; i < index_shape.size(); ++i) w.push_back(detail::word_of(a->strides[i]));
  }
  w.push_back(detail::word_of(limit));
  w.push_back(detail::word_of(static_cast<const void*>(error)));
  return detail::checked_block(std::move(w), k);
}

// Throws what the CPU path throws if the kernel recorded an index out of range.
inline void check_index_error(const int64_t* error, const char* op, int dim, int64_t limit) {
  if (error[0] != 0)
    throw std::out_of_range(kiln::detail::cat(op, ": index ", error[1], " is out of range for dim ", dim, " of size ", limit));
}

}  // namespace kiln::cuda
