#pragma once
// Where a program's device time goes, kernel by kernel: with profiling on (KILN_PROFILE=1 in the environment, or
// cuda::enable_profiling(true)), every kernel launch and cuBLAS product waits for its stream and adds its wall time,
// launch included, to a line for its kernel; the lines are printed to stderr when the program ends, the largest
// total first. A profiled program runs slower (each call waits for the device): it shows which kernels a training
// step spends its time in, not the step's speed.
//
// A line names a generated kernel by its entry and a tag of its source (one entry name, such as kiln_forward,
// serves many expressions); KILN_DEBUG=1 prints each kernel's source under the same tag when it is compiled.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cuda {

namespace detail {
inline std::atomic<bool>& profiling_flag() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("KILN_PROFILE");
    return v && *v && std::string_view(v) != "0";
  }();
  return on;
}
}  // namespace detail

inline bool profiling() { return detail::profiling_flag().load(std::memory_order_relaxed); }
inline void enable_profiling(bool on) { detail::profiling_flag().store(on, std::memory_order_relaxed); }

// A short tag of a kernel's source (FNV-1a, 6 hex digits), the same in the profile and in KILN_DEBUG's output.
inline std::string source_tag(std::string_view source) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : source) h = (h ^ uint8_t(c)) * 1099511628211ull;
  char tag[8];
  std::snprintf(tag, sizeof tag, "%06x", unsigned(h & 0xffffff));
  return tag;
}

class KernelProfile {
 public:
  struct Line {
    std::string name;
    int64_t calls = 0;
    double seconds = 0;
  };

  static KernelProfile& get() {
    static KernelProfile profile;
    return profile;
  }

  void add(const std::string& name, double seconds) {
    std::lock_guard lock(mutex_);
    Line& line = lines_[name];
    line.name = name;
    ++line.calls;
    line.seconds += seconds;
  }

  // The lines so far, the largest total first.
  std::vector<Line> lines() const {
    std::vector<Line> out;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [name, line] : lines_) out.push_back(line);
    }
    std::stable_sort(out.begin(), out.end(), [](const Line& a, const Line& b) { return a.seconds > b.seconds; });
    return out;
  }

  void clear() {
    std::lock_guard lock(mutex_);
    lines_.clear();
  }

  // A table: total ms, share of the whole, calls, mean us per call, name.
  std::string report() const {
    const std::vector<Line> all = lines();
    double total = 0;
    for (const Line& l : all) total += l.seconds;
    std::string out = "kiln profile (KILN_PROFILE): device time by kernel, launch included\n"
                      "  total ms   share    calls   mean us  kernel\n";
    char row[96];
    for (const Line& l : all) {
      std::snprintf(row, sizeof row, "%10.2f %6.1f%% %8lld %9.1f  ", l.seconds * 1e3, total > 0 ? 100 * l.seconds / total : 0.0,
                    static_cast<long long>(l.calls), l.seconds * 1e6 / double(l.calls));
      out += row + l.name + "\n";
    }
    return out;
  }

  ~KernelProfile() {
    if (!lines().empty()) std::fputs(report().c_str(), stderr);
  }

 private:
  KernelProfile() = default;
  mutable std::mutex mutex_;
  std::map<std::string, Line> lines_;
};

}  // namespace kiln::cuda
