#pragma once
// A one-line live progress bar for a training epoch: batch, running loss and accuracy, images/s, ETA.
// On a terminal the line is redrawn in place (at most 10 times a second); otherwise (a log file, CI)
// a line is printed every tenth of the epoch.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace fashion_mnist {

class ProgressBar {
 public:
  ProgressBar(int epoch, int epochs, int64_t batches, bool enabled)
      : epoch_(epoch), epochs_(epochs), batches_(batches), enabled_(enabled), tty_(isatty(fileno(stdout))) {}

  // After batch `done` (1-based) with the epoch's running mean loss and accuracy so far.
  void update(int64_t done, double loss, double accuracy, int64_t images) {
    if (!enabled_) return;
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const bool last = done == batches_;
    if (tty_) {
      if (!last && now - drawn_ < std::chrono::milliseconds(100)) return;
    } else if (!last && done * 10 / batches_ == (done - 1) * 10 / batches_) {
      return;
    }
    drawn_ = now;
    constexpr int kWidth = 24;
    const int filled = int(kWidth * done / batches_);
    const double eta = done > 0 ? elapsed / double(done) * double(batches_ - done) : 0;
    std::printf("%sepoch %d/%d [%s%s] %lld/%lld loss %.4f acc %.4f %.0f img/s ETA %s%s", tty_ ? "\r" : "", epoch_,
                epochs_, std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), (long long)done,
                (long long)batches_, loss, accuracy, elapsed > 0 ? double(images) / elapsed : 0.0, clock_text(eta).c_str(),
                tty_ && !last ? "" : "\n");
    std::fflush(stdout);
  }

  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  static std::string clock_text(double seconds) {
    const long s = long(seconds + 0.5);
    char text[32];
    std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
    return text;
  }

  int epoch_, epochs_;
  int64_t batches_;
  bool enabled_, tty_;
  Clock::time_point start_ = Clock::now(), drawn_{};
};

}  // namespace fashion_mnist
