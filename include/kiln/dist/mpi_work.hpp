#pragma once
// The MPI backend's Work: one non-blocking MPI request polled with MPI_Test against the group's deadline.
// Open MPI 4.1.4 never reports a dead peer through MPI_Test (measured, docs/distributed.md): the deadline is
// what turns a lost rank into a DistError. A failed or timed-out request aborts the group's shared state, so
// every other Work of the group and every later collective throws at once, and its buffers are kept alive for
// good (MPI may still write into them).
#include "kiln/dist/mpi_header.hpp"
#include "kiln/dist/mpi_progress.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/dist/mpi_types.hpp"
#include "kiln/dist/process_group.hpp"

namespace kiln::dist::detail {

// Set when any group failed: MPI_Finalize at exit is then skipped (it would wait for the lost peers).
inline bool& any_group_aborted() {
  static bool flag = false;
  return flag;
}

// What the groups of one communicator share.
struct MpiCommState {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::chrono::milliseconds timeout{0};
  bool aborted = false;
  std::string abort_reason;
  uint64_t sequence = 0;  // collectives started, for messages

  [[noreturn]] void fail(const std::string& op, const std::string& message) {
    if (!aborted) {
      aborted = true;
      any_group_aborted() = true;
      abort_reason = op + ": " + message;
    }
    throw DistError(op, rank, message);
  }
  void check_usable(const std::string& op) const {
    if (aborted)
      throw DistError(op, rank, kiln::detail::cat("the process group (rank ", rank, " of ", size,
                                                  ") was aborted after an earlier failure (", abort_reason, ")"));
  }
};

// Buffers of failed requests: never freed, since MPI may still write into them.
inline void abandon(std::vector<AnyTensor>&& buffers) {
  static std::mutex mutex;
  static auto* kept = new std::vector<AnyTensor>();  // leaked on purpose
  std::lock_guard lock(mutex);
  for (AnyTensor& b : buffers) kept->push_back(std::move(b));
}

// What an operation moves, for its error message (built only when there is one).
struct OpDescription {
  int64_t numel = -1;  // -1: no data (barrier)
  ScalarType dtype = ScalarType::Float;
  int peer = -1;  // send / recv
  int tag = 0;
  bool receives = false;
  std::string text() const {
    if (numel < 0) return "no data";
    std::string s = kiln::detail::cat(numel, " ", dtype_name(dtype), " values");
    if (peer >= 0) s += kiln::detail::cat(receives ? " from rank " : " to rank ", peer, ", tag ", tag);
    return s;
  }
};

class MpiWork : public Work {
 public:
  // `buffers` stay alive until the request completes; `finish` runs once it did (copy back, divide for avg).
  MpiWork(std::shared_ptr<MpiCommState> state, const char* op, OpDescription what, MPI_Request request,
          std::vector<AnyTensor> buffers, std::function<void()> finish)
      : state_(std::move(state)),
        op_(op),
        what_(what),
        request_(request),
        buffers_(std::move(buffers)),
        finish_(std::move(finish)),
        sequence_(state_->sequence),
        deadline_(std::chrono::steady_clock::now() + state_->timeout) {}
  ~MpiWork() override {
    if (done_) return;
    try {
      wait();
    } catch (...) {  // the group is aborted now; the buffers were abandoned
    }
  }

  bool is_completed() override { return poll(); }
  // Polls in a tight loop (yielding) for the first 20 ms, then every 100 us: a long wait (a large transfer, a
  // lost peer) leaves the cores to the other ranks and threads instead of spinning until the timeout.
  void wait() override {
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (!poll()) {
      if (std::chrono::steady_clock::now() < spin_until) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  bool poll() {
    if (done_) return true;
    if (state_->aborted) give_up(kiln::detail::cat("the process group was aborted after an earlier failure (",
                                                   state_->abort_reason, ")"));
    int flag = 0, rc;
    {
      std::lock_guard lock(mpi_mutex());
      rc = MPI_Test(&request_, &flag, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) give_up(kiln::detail::cat("MPI reported an error on rank ", state_->rank, ": ",
                                                     mpi_error_string(rc)));
    if (flag) {
      done_ = true;
      buffers_.clear();
      if (finish_) finish_();
      return true;
    }
    if (std::chrono::steady_clock::now() > deadline_)
      give_up(kiln::detail::cat(
          "timed out after ", state_->timeout.count(), " ms on rank ", state_->rank, " of ", state_->size,
          " (operation #", sequence_, ", ", what_.text(),
          "): another rank exited, hangs or called a different collective; the process group is aborted"));
    return false;
  }
  [[noreturn]] void give_up(const std::string& message) {
    done_ = true;
    abandon(std::move(buffers_));
    state_->fail(op_, message);
  }

  std::shared_ptr<MpiCommState> state_;
  const char* op_;
  OpDescription what_;
  MPI_Request request_;
  std::vector<AnyTensor> buffers_;
  std::function<void()> finish_;
  uint64_t sequence_;
  std::chrono::steady_clock::time_point deadline_;
  bool done_ = false;
};

}  // namespace kiln::dist::detail
