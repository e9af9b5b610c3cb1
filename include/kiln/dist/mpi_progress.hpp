#pragma once
// Background progress for the MPI backend. Open MPI moves a non-blocking collective only inside MPI calls (it has
// no progress thread of its own by default), so an all_reduce started during backward would otherwise wait for the
// next call from the training thread. While switched on (DistributedDataParallel does, from its first bucket to
// the end of the backward), a thread calls MPI_Iprobe on the group's communicator every 50 us, which runs Open
// MPI's progress engine (and so libnbc's schedules) without receiving anything.
//
// kiln's MPI calls all take mpi_mutex(), so with MPI_THREAD_SERIALIZED no two threads are ever inside MPI at
// once. When MPI was initialized by the program with less than MPI_THREAD_SERIALIZED, the thread is not used.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kiln/dist/mpi_header.hpp"

namespace kiln::dist::detail {

// Held around every MPI call kiln makes.
inline std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

inline bool mpi_threads_serialized() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_SERIALIZED;
}

class MpiProgressThread {
 public:
  explicit MpiProgressThread(MPI_Comm comm) : comm_(comm) {}
  ~MpiProgressThread() {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  MpiProgressThread(const MpiProgressThread&) = delete;
  MpiProgressThread& operator=(const MpiProgressThread&) = delete;

  void set_active(bool on) {
    {
      std::lock_guard lock(mutex_);
      active_ = on;
      if (on && !thread_.joinable()) thread_ = std::thread([this] { run(); });
    }
    wake_.notify_one();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [this] { return active_ || quit_; });
      if (quit_) return;
      lock.unlock();
      {
        std::lock_guard mpi(mpi_mutex());
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
    }
  }

  MPI_Comm comm_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool active_ = false, quit_ = false;
  std::thread thread_;
};

}  // namespace kiln::dist::detail
