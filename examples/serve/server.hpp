#pragma once
// The HTTP layer (Debian's cpp-httplib): routes, JSON answers and errors, metrics, and the settings for
// the load it carries. cpp-httplib serves each connection on one pool thread for as long as it is kept
// alive, so the pool is sized to the connections (its default of 8 threads would cap a batch at 8 images).
//
//   POST /predictions/fashion_mnist   body: a PNG or binary PGM image -> {"Trouser": 0.97, ...} (all classes,
//                                     most probable first)
//   GET  /ping                        {"status": "Healthy"}
//   GET  /metrics                     Prometheus text (metrics.hpp)
// Every error is a 4xx or 5xx status with {"error": "..."}.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../fashion_mnist/model.hpp"
#include "batcher.hpp"
#include "classifier.hpp"
#include "input.hpp"
#include "kiln/io/json.hpp"
#include "metrics.hpp"
// After kiln's headers: <httplib.h> brings <resolv.h>, whose macro _res would rename a parameter of Eigen's.
#include <httplib.h>
#include <sys/socket.h>

namespace serve {

inline constexpr const char* kModelName = "fashion_mnist";

// cpp-httplib 0.11.4 listens with a backlog of 5, a constant compiled into Debian's library: 64 clients
// connecting at once overflowed it (SYN cookies, some failing, and requests lost on connections the client
// thought open). listen() again on the bound socket raises the backlog (Linux updates it in place).
class HttpServer : public httplib::Server {
 public:
  bool raise_listen_backlog() { return ::listen(svr_sock_, SOMAXCONN) == 0; }
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: a free port, which bind() returns
  int http_threads = 128;  // connections served at once; more wait for a free thread
  size_t max_body_bytes = size_t(1) << 20;
  size_t keep_alive_max_requests = 100000;  // per connection, then the client reconnects
  int keep_alive_seconds = 5;  // an idle connection is closed after this (and delays shutdown at most this)
  ImageLimits image_limits;
  Batcher::Options batching;
};

// Messages may quote the request (a path, a model name): bytes that are not UTF-8 become '?', so that the
// answer stays valid JSON.
inline std::string json_error(std::string message) {
  if (!kiln::io::detail::is_valid_utf8(message))
    for (char& c : message)
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
  std::string out = "{\"error\": ";
  kiln::io::detail::append_json_string(out, message);
  return out + "}";
}

// {"class": probability, ...}, most probable first (ties in class order). A model with NaN or infinite
// weights is an error (HTTP 500), not an answer: JSON has no such numbers, and NaN would not sort.
inline std::string json_probabilities(const std::vector<float>& probabilities) {
  for (const float p : probabilities)
    if (!std::isfinite(p)) throw std::runtime_error("the model answered a probability that is not finite");
  std::vector<size_t> order(probabilities.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probabilities[a] > probabilities[b]; });
  std::string out = "{";
  for (size_t i : order) {
    if (out.size() > 1) out += ", ";
    kiln::io::detail::append_json_string(out, fashion_mnist::kClassNames[i]);
    char value[32];
    std::snprintf(value, sizeof value, ": %.6g", double(probabilities[i]));
    out += value;
  }
  return out + "}";
}

class ModelServer {
 public:
  ModelServer(Classifier classifier, ServerOptions options)
      : options_(std::move(options)),
        classifier_(std::move(classifier)),
        batcher_({1, fashion_mnist::kImageSide, fashion_mnist::kImageSide},
                 [this](const kiln::Tensor<float>& images) { return classifier_.probabilities(images); },
                 options_.batching, [this](int64_t size) { metrics_.observe_batch(size); }) {
    configure();
  }

  // Binds the host and port of the options; returns the port (the one chosen when it was 0).
  int bind() {
    const int port = options_.port == 0 ? http_.bind_to_any_port(options_.host)
                                        : (http_.bind_to_port(options_.host, options_.port) ? options_.port : -1);
    if (port < 0)
      throw std::runtime_error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                               " (in use, or not an address of this machine)");
    if (!http_.raise_listen_backlog()) throw std::runtime_error("cannot raise the listen backlog");
    return port;
  }
  // Serves until stop(); returns once the requests in flight are answered.
  void listen() {
    listening_ = true;
    if (!stop_requested_) http_.listen_after_bind();
    listening_ = false;
  }
  // From any thread but a signal handler's, before or during listen(): a stop that comes before
  // cpp-httplib's loop runs would be lost (its stop() acts only on a running server), so it waits for the
  // loop, or keeps listen() from starting it.
  void stop() {
    stop_requested_ = true;
    while (listening_ && !http_.is_running()) std::this_thread::yield();
    http_.stop();
  }

  const Metrics& metrics() const { return metrics_; }

 private:
  void configure() {
    const size_t threads = size_t(options_.http_threads);
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http_.set_keep_alive_max_count(options_.keep_alive_max_requests);
    http_.set_keep_alive_timeout(options_.keep_alive_seconds);
    http_.set_payload_max_length(options_.max_body_bytes);
    // Headers and body go out in two writes: without TCP_NODELAY the second waits for the client's delayed ACK.
    http_.set_tcp_nodelay(true);

    http_.Post("/predictions/([^/]+)", [this](const httplib::Request& req, httplib::Response& res) { predict(req, res); });
    http_.Get("/ping", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\": \"Healthy\"}", "application/json");
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.prometheus_text(), "text/plain; version=0.0.4");
    });
    // Errors raised by cpp-httplib itself (no route, body over the limit) get a JSON body too; errors of the
    // handlers above already have one.
    http_.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      res.set_content(json_error(httplib_error_message(req, res.status)), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }));
    // Any other handler that throws (out of memory) answers 500 with the message too.
    http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
      res.status = 500;
      res.set_content(json_error(message_of(error)), "application/json");
    });
    // Counted after routing and before the answer is written (httplib's logger runs after it is sent): a client that
    // has its answer finds it in /metrics. httplib calls this for its own error answers (400, 404, 413) too.
    http_.set_post_routing_handler(
        [this](const httplib::Request&, httplib::Response& res) { metrics_.count_response(res.status); });
  }

  std::string httplib_error_message(const httplib::Request& req, int status) const {
    if (status == 413) return "the request body is over the limit of " + std::to_string(options_.max_body_bytes) + " bytes";
    if (status == 404) return "no such path: " + req.method + " " + req.path;
    if (status == 400) return "the request could not be read (malformed, or a body without a Content-Length)";
    return "HTTP status " + std::to_string(status);
  }

  static std::string message_of(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "unknown error";
    }
  }

  void predict(const httplib::Request& req, httplib::Response& res) {
    const auto start = std::chrono::steady_clock::now();
    const Metrics::InFlight in_flight(metrics_);
    auto fail = [&](int status, const std::string& message) {
      res.status = status;
      res.set_content(json_error(message), "application/json");
    };
    const std::string model = req.matches[1].str();
    if (model != kModelName) {
      fail(404, "no model named " + kiln::io::detail::quoted(model) + "; this server serves \"" + kModelName + "\"");
    } else {
      try {
        std::vector<float> input = model_input(decode_image(req.body, options_.image_limits));
        res.set_content(json_probabilities(batcher_.submit(std::move(input)).get()), "application/json");
      } catch (const UnsupportedImageFormat& e) {
        fail(415, e.what());
      } catch (const ImageError& e) {
        fail(400, e.what());
      } catch (const std::exception& e) {  // the forward failed, or answered NaN
        fail(500, e.what());
      }
    }
    metrics_.observe_latency(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  const ServerOptions options_;
  Metrics metrics_;
  Classifier classifier_;
  Batcher batcher_;  // after what its forward and observer use: destroyed (answering its queue) before them
  HttpServer http_;
  std::atomic<bool> listening_ = false, stop_requested_ = false;
};

}  // namespace serve
