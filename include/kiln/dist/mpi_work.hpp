#pragma once
// The MPI backend's Work: one non-blocking MPI request, tested with MPI_Test, polled against the group's deadline
// by PolledWork (polled_work.hpp).
#include "kiln/dist/mpi_header.hpp"
#include "kiln/dist/mpi_progress.hpp"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/dist/mpi_types.hpp"
#include "kiln/dist/polled_work.hpp"

namespace kiln::dist::detail {

struct MpiCommState : CommState {
  MPI_Comm comm = MPI_COMM_NULL;
};

inline std::shared_ptr<Work> make_mpi_work(const std::shared_ptr<MpiCommState>& state, const char* op,
                                           OpDescription what, MPI_Request request, std::vector<AnyTensor> buffers,
                                           std::function<void()> finish) {
  auto test = [request, rank = state->rank](std::string* error) mutable {
    int flag = 0, rc;
    {
      std::lock_guard lock(mpi_mutex());
      rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) *error = kiln::detail::cat("MPI reported an error on rank ", rank, ": ", mpi_error_string(rc));
    return flag != 0;
  };
  return std::make_shared<PolledWork>(state, op, what, std::move(test), std::move(buffers), std::move(finish));
}

}  // namespace kiln::dist::detail
