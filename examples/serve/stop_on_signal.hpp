#pragma once
// Graceful shutdown: SIGINT and SIGTERM only write a byte to a pipe (all a signal handler may safely do);
// a watcher thread reads it and calls the stop function (ModelServer::stop) from ordinary code.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <functional>
#include <stdexcept>
#include <thread>

namespace serve {

class StopOnSignal {
 public:
  explicit StopOnSignal(std::function<void()> stop) {
    if (::pipe(pipe_) != 0) throw std::runtime_error("cannot create the signal pipe");
    ::fcntl(pipe_[1], F_SETFL, O_NONBLOCK);  // a handler never blocks, even on a full pipe
    signal_write_fd_ = pipe_[1];
    watcher_ = std::thread([this, stop = std::move(stop)] {
      char byte = 0;
      while (::read(pipe_[0], &byte, 1) < 0 && errno == EINTR) {
      }
      if (byte == kSignalled) stop();
    });
    struct sigaction action = {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &action, nullptr);
    ::sigaction(SIGTERM, &action, nullptr);
  }
  ~StopOnSignal() {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    const char done = kDone;
    (void)!::write(pipe_[1], &done, 1);  // wakes the watcher if no signal came
    watcher_.join();
    ::close(pipe_[0]);
    ::close(pipe_[1]);
  }
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

 private:
  static constexpr char kSignalled = 's', kDone = 'd';
  static inline int signal_write_fd_ = -1;  // pipe_[1], for the handler
  static void on_signal(int) {
    const int saved = errno;
    const char byte = kSignalled;
    (void)!::write(signal_write_fd_, &byte, 1);
    errno = saved;
  }

  int pipe_[2] = {-1, -1};
  std::thread watcher_;
};

}  // namespace serve
