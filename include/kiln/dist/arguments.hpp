#pragma once
// The argument checks every backend makes before a collective, and check_shapes' agreement (all ranks exchange a
// key of their arguments and compare), so the MPI and NCCL backends reject the same mistakes with the same words.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dist/process_group.hpp"

namespace kiln::dist::detail {

// options.check_shapes, or KILN_DIST_CHECK_SHAPES=1 in the environment.
inline bool check_shapes_requested(const ProcessGroupOptions& options) {
  const char* env = std::getenv("KILN_DIST_CHECK_SHAPES");
  return options.check_shapes || (env && std::string_view(env) == "1");
}

// Every tensor defined and of the first one's dtype; root a rank of the group.
inline void check_collective_arguments(const char* name, std::initializer_list<AnyTensor> tensors, int root,
                                       int size) {
  for (const AnyTensor& t : tensors) {
    check<std::invalid_argument>(t.defined(), name, ": the tensor is undefined");
    check<DTypeError>(t.dtype() == tensors.begin()->dtype(), name, ": output and input dtypes differ (",
                      dtype_name(tensors.begin()->dtype()), " and ", dtype_name(t.dtype()), ")");
  }
  check<std::invalid_argument>(root >= 0 && root < size, name, ": root ", root, " is not a rank of a group of ", size);
}

inline void check_peer(const char* name, int peer, int tag, int rank, int size) {
  check<std::invalid_argument>(peer >= 0 && peer < size && peer != rank, name, ": peer rank ", peer,
                               " must be another rank of the group of ", size, " (this is rank ", rank, ")");
  check<std::invalid_argument>(tag >= 0 && tag <= 32767, name, ": tag ", tag, " must be in [0, 32767]");
}

inline void check_all_gather_sizes(const char* name, const AnyTensor& output, const AnyTensor& input, int size) {
  check<ShapeError>(output.numel() == int64_t(size) * input.numel(), name, ": output of shape ", output.shape(),
                    " must have ", size, " x ", input.numel(), " elements for input of shape ", input.shape(), " on ",
                    size, " ranks");
}
inline void check_reduce_scatter_sizes(const char* name, const AnyTensor& output, const AnyTensor& input, int size) {
  check<ShapeError>(input.numel() == int64_t(size) * output.numel(), name, ": input of shape ", input.shape(),
                    " must have ", size, " x ", output.numel(), " elements for output of shape ", output.shape(),
                    " on ", size, " ranks");
}
inline void check_all_to_all_sizes(const char* name, const AnyTensor& output, const AnyTensor& input, int size) {
  check<ShapeError>(input.numel() == output.numel() && input.numel() % size == 0, name, ": input of shape ",
                    input.shape(), " and output of shape ", output.shape(),
                    " must have the same number of elements, a multiple of the ", size, " ranks");
}

// check_shapes: what the ranks compare before a collective (dtype, the sizes hashed, op, root).
using AgreementKey = std::array<int64_t, 4>;
inline AgreementKey agreement_key(std::initializer_list<AnyTensor> tensors, std::optional<ReduceOp> op, int root) {
  uint64_t numel = 0;  // the sizes of all tensors, hashed
  for (const AnyTensor& t : tensors) numel = numel * 1000003u + uint64_t(t.numel());
  return {int64_t(tensors.begin()->dtype()), int64_t(numel), op ? int64_t(*op) : -1, root};
}
inline const AgreementKey kBarrierKey = {0, 0, 0, 0};

// `all` holds every rank's key in rank order: throws DistError (on every rank alike) unless they are equal.
inline void check_agreement(const char* name, int rank, const AgreementKey& mine, const std::vector<int64_t>& all) {
  const int size = int(all.size() / mine.size());
  for (int r = 0; r < size; ++r)
    if (!std::equal(mine.begin(), mine.end(), all.begin() + 4 * r)) {
      std::string table;
      for (int q = 0; q < size; ++q)
        table += kiln::detail::cat(q ? "; " : "", "rank ", q, ": dtype ", dtype_name(ScalarType(all[size_t(4 * q)])),
                                   ", size code ", all[size_t(4 * q + 1)], ", op ", all[size_t(4 * q + 2)], ", root ",
                                   all[size_t(4 * q + 3)]);
      throw DistError(name, rank, "check_shapes: the ranks called it with different arguments (" + table + ")");
    }
}

}  // namespace kiln::dist::detail
