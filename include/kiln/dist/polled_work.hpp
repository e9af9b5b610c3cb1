#pragma once
// What every backend's Work shares (no MPI or NCCL header here): the group's state that a failure aborts, and
// PolledWork, one operation in flight polled against the group's deadline. A backend supplies the test, "has it
// completed?" (MPI_Test for MPI; the communicator's asynchronous error and an event for NCCL). Neither Open MPI
// 4.1.4 nor NCCL reports a dead peer by itself (measured for MPI, docs/distributed.md): the deadline is what turns
// a lost rank into a DistError. A failed or timed-out operation aborts the group's state, so every other Work of
// the group and every later collective throws at once, and its buffers are kept alive for good (the transport may
// still write into them).
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/dist/process_group.hpp"

namespace kiln::dist::detail {

// Set when any group failed: MPI_Finalize at exit is then skipped (it would wait for the lost peers).
inline bool& any_group_aborted() {
  static bool flag = false;
  return flag;
}

// What the groups of one communicator share. A backend overrides abort_communicator() to tear its communicator
// down after the first failure (NCCL: ncclCommAbort); MPI leaves it (freeing it would wait for the lost peers).
struct CommState {
  virtual ~CommState() = default;
  int rank = 0, size = 1;
  std::chrono::milliseconds timeout{0};
  bool aborted = false;
  std::string abort_reason;
  uint64_t sequence = 0;  // operations started, for messages

  [[noreturn]] void fail(const std::string& op, const std::string& message) {
    if (!aborted) {
      aborted = true;
      any_group_aborted() = true;
      abort_reason = op + ": " + message;
      abort_communicator();
    }
    throw DistError(op, rank, message);
  }
  void check_usable(const std::string& op) const {
    if (aborted)
      throw DistError(op, rank, kiln::detail::cat("the process group (rank ", rank, " of ", size,
                                                  ") was aborted after an earlier failure (", abort_reason, ")"));
  }

 protected:
  virtual void abort_communicator() {}
};

// Buffers of failed operations: never freed, since the transport may still write into them.
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

class PolledWork final : public Work {
 public:
  // Whether the operation completed; a non-empty *error says it failed (and why).
  using Test = std::function<bool(std::string* error)>;

  // `buffers` stay alive until the operation completes; `finish` runs once it did (copy back, divide for avg).
  PolledWork(std::shared_ptr<CommState> state, const char* op, OpDescription what, Test test,
             std::vector<AnyTensor> buffers, std::function<void()> finish)
      : state_(std::move(state)),
        op_(op),
        what_(what),
        test_(std::move(test)),
        buffers_(std::move(buffers)),
        finish_(std::move(finish)),
        sequence_(state_->sequence),
        deadline_(std::chrono::steady_clock::now() + state_->timeout) {}
  ~PolledWork() override {
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
    std::string error;
    const bool complete = test_(&error);
    if (!error.empty()) give_up(error);
    if (complete) {
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

  std::shared_ptr<CommState> state_;
  const char* op_;
  OpDescription what_;
  Test test_;
  std::vector<AnyTensor> buffers_;
  std::function<void()> finish_;
  uint64_t sequence_;
  std::chrono::steady_clock::time_point deadline_;
  bool done_ = false;
};

}  // namespace kiln::dist::detail
