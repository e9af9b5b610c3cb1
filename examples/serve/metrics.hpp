#pragma once
// The server's counters and histograms, written in Prometheus' text exposition format (version 0.0.4):
//   kiln_serve_requests_total                HTTP requests answered (every path and status)
//   kiln_serve_errors_total{code="..."}      of those, the answers with a 4xx or 5xx status, by status
//   kiln_serve_predictions_in_flight         predictions being handled now (decoding, queued or computed)
//   kiln_serve_request_duration_seconds      prediction latency: from the handler's start to its answer
//   kiln_serve_batch_size                    images per forward of the batcher
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds)
      : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1) {}

  void observe(double value) {
    size_t bucket = 0;
    while (bucket < upper_bounds_.size() && value > upper_bounds_[bucket]) ++bucket;
    ++counts_[bucket];
    sum_ += value;
  }

  // The cumulative buckets (le="..."), _sum and _count lines.
  void write(std::string& out, const std::string& name) const {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      cumulative += counts_[i];
      const std::string le = i < upper_bounds_.size() ? number(upper_bounds_[i]) : "+Inf";
      out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
    }
    out += name + "_sum " + number(sum_) + "\n";
    out += name + "_count " + std::to_string(cumulative) + "\n";
  }

  static std::string number(double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", v);
    return text;
  }

 private:
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last one is +Inf
  double sum_ = 0;
};

class Metrics {
 public:
  void count_response(int status) {
    std::lock_guard lock(mutex_);
    ++requests_;
    if (status >= 400) ++errors_by_code_[status];
  }
  // Counts a prediction as in flight for its lifetime.
  class InFlight {
   public:
    explicit InFlight(Metrics& metrics) : metrics_(metrics) { metrics_.add_in_flight(1); }
    ~InFlight() { metrics_.add_in_flight(-1); }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    Metrics& metrics_;
  };
  int64_t in_flight() const {
    std::lock_guard lock(mutex_);
    return in_flight_;
  }

  void observe_latency(double seconds) {
    std::lock_guard lock(mutex_);
    latency_.observe(seconds);
  }
  void observe_batch(int64_t size) {
    std::lock_guard lock(mutex_);
    batch_size_.observe(double(size));
  }

  std::string prometheus_text() const {
    std::lock_guard lock(mutex_);
    std::string out;
    out += "# HELP kiln_serve_requests_total HTTP requests answered.\n# TYPE kiln_serve_requests_total counter\n";
    out += "kiln_serve_requests_total " + std::to_string(requests_) + "\n";
    out += "# HELP kiln_serve_errors_total HTTP requests answered with an error status.\n";
    out += "# TYPE kiln_serve_errors_total counter\n";
    for (const auto& [code, count] : errors_by_code_)
      out += "kiln_serve_errors_total{code=\"" + std::to_string(code) + "\"} " + std::to_string(count) + "\n";
    out += "# HELP kiln_serve_predictions_in_flight Predictions being handled.\n";
    out += "# TYPE kiln_serve_predictions_in_flight gauge\n";
    out += "kiln_serve_predictions_in_flight " + std::to_string(in_flight_) + "\n";
    out += "# HELP kiln_serve_request_duration_seconds Prediction latency in the server.\n";
    out += "# TYPE kiln_serve_request_duration_seconds histogram\n";
    latency_.write(out, "kiln_serve_request_duration_seconds");
    out += "# HELP kiln_serve_batch_size Images per batched forward.\n# TYPE kiln_serve_batch_size histogram\n";
    batch_size_.write(out, "kiln_serve_batch_size");
    return out;
  }

 private:
  void add_in_flight(int64_t change) {
    std::lock_guard lock(mutex_);
    in_flight_ += change;
  }

  mutable std::mutex mutex_;
  uint64_t requests_ = 0;
  int64_t in_flight_ = 0;
  std::map<int, uint64_t> errors_by_code_;
  Histogram latency_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}};
  Histogram batch_size_{{1, 2, 4, 8, 16, 32, 64, 128, 256}};
};

}  // namespace serve
