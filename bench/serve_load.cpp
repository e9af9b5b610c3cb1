// Load test of examples/serve over 127.0.0.1: throughput and p50/p99 latency at 1, 8 and 64 concurrent
// keep-alive connections (one client thread each), with dynamic batching (--max-batch 64) and without
// (--max-batch 1). Each phase is bounded in requests and in seconds and counts every non-200 answer or
// transport failure as an error; the exit status is non-zero when any phase had one.
//
//   serve_load                        the server in this process (a randomly initialized model: the same
//                                     work per image as a trained one), both configurations
//   serve_load --port 8080            a server already running on 127.0.0.1:8080, as it is configured
// Options: --requests N (per phase, default 4000), --seconds S (per phase, default 15), --threads N (the
// in-process server's compute threads, default every core), --max-delay-ms N (its batch delay, default 2).
// docs/performance.md has the figures.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../examples/command_line.hpp"
#include "../examples/serve/server.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int port = 0;  // 0: start the server in this process
  int64_t requests = 4000;
  int seconds = 15;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  int max_delay_ms = 2;
};

constexpr const char* kUsage =
    "usage: serve_load [--port N] [--requests N] [--seconds S] [--threads N] [--max-delay-ms N]\n"
    "Load test of examples/serve over 127.0.0.1 at 1, 8 and 64 connections: the server in this process with\n"
    "and without batching, or the one running on --port N. Exit status 1 when any request failed.\n";

Options parse(int argc, char** argv) {
  Options o;
  for (command_line::Flags f(argc, argv); f.next();) {
    if (f.flag() == "--port") o.port = f.number<int>(1);
    else if (f.flag() == "--requests") o.requests = f.number<int64_t>(1);
    else if (f.flag() == "--seconds") o.seconds = f.number<int>(1);
    else if (f.flag() == "--threads") o.threads = f.number<int>(1);
    else if (f.flag() == "--max-delay-ms") o.max_delay_ms = f.number<int>(0);
    else f.unknown();
  }
  return o;
}

// 64 different 28x28 gray PNGs of random pixels (the server's work does not depend on what they show).
std::vector<std::string> request_bodies() {
  std::mt19937 gen(1);
  std::vector<std::string> bodies;
  std::vector<unsigned char> pixels(size_t(fashion_mnist::kImageSide * fashion_mnist::kImageSide));
  for (int i = 0; i < 64; ++i) {
    for (unsigned char& p : pixels) p = static_cast<unsigned char>(gen() & 255);
    bodies.push_back(serve::encode_png(pixels.data(), fashion_mnist::kImageSide, fashion_mnist::kImageSide, 1));
  }
  return bodies;
}

struct PhaseResult {
  int64_t answered = 0, errors = 0;
  double seconds = 0, p50_ms = 0, p99_ms = 0;
};

// The server's kiln_serve_batch_size_sum and _count (images and forwards so far), from GET /metrics.
std::pair<double, double> batch_totals(int port) {
  httplib::Client client("127.0.0.1", port);
  const httplib::Result r = client.Get("/metrics");
  if (!r || r->status != 200) return {0, 0};
  auto value = [&](const std::string& name) {
    const size_t at = r->body.find("\n" + name + " ");
    return at == std::string::npos ? 0.0 : std::stod(r->body.substr(at + name.size() + 2));
  };
  return {value("kiln_serve_batch_size_sum"), value("kiln_serve_batch_size_count")};
}

// `connections` client threads share a budget of `requests` and a deadline; each first sends two
// requests untimed (connecting, and warming the server's caches), then waits for the others.
PhaseResult run_phase(int port, int connections, const Options& options, const std::vector<std::string>& bodies) {
  std::atomic<int64_t> budget = options.requests;
  std::atomic<int> warmed = 0;
  std::atomic<int64_t> errors = 0;
  std::vector<std::vector<double>> latencies(static_cast<size_t>(connections));
  Clock::time_point start, deadline;
  std::atomic<bool> go = false;
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c)
    threads.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);
      client.set_connection_timeout(30);
      client.set_read_timeout(60);
      size_t next = size_t(c);
      auto send = [&] {
        const httplib::Result r = client.Post("/predictions/fashion_mnist", bodies[next++ % bodies.size()], "image/png");
        if (r && r->status == 200) return true;
        std::fprintf(stderr, "serve_load: %s\n", r ? ("status " + std::to_string(r->status) + ": " + r->body).c_str()
                                                     : ("no answer: " + httplib::to_string(r.error())).c_str());
        return false;
      };
      for (int i = 0; i < 2; ++i)
        if (!send()) ++errors;
      ++warmed;
      while (!go) std::this_thread::yield();
      while (budget.fetch_sub(1) > 0 && Clock::now() < deadline) {
        const Clock::time_point t0 = Clock::now();
        if (!send()) ++errors;
        latencies[size_t(c)].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    });
  while (warmed < connections) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  start = Clock::now();
  deadline = start + std::chrono::seconds(options.seconds);
  go = true;
  for (std::thread& t : threads) t.join();
  PhaseResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  result.answered = int64_t(all.size());
  result.errors = errors;
  if (!all.empty()) {
    result.p50_ms = all[all.size() / 2];
    result.p99_ms = all[std::min(all.size() - 1, size_t(double(all.size()) * 0.99))];
  }
  return result;
}

int64_t run_phases(const char* config, int port, const Options& options, const std::vector<std::string>& bodies) {
  int64_t errors = 0;
  for (int connections : {1, 8, 64}) {
    const auto [images_before, forwards_before] = batch_totals(port);
    const PhaseResult r = run_phase(port, connections, options, bodies);
    const auto [images_after, forwards_after] = batch_totals(port);
    std::printf("| %s | %d | %lld | %.2f | %.0f | %.2f | %.2f | %.1f | %lld |\n", config, connections,
                (long long)r.answered, r.seconds, double(r.answered) / r.seconds, r.p50_ms, r.p99_ms,
                (images_after - images_before) / std::max(1.0, forwards_after - forwards_before), (long long)r.errors);
    std::fflush(stdout);
    errors += r.errors;
  }
  return errors;
}

int run(const Options& options) {
  const std::vector<std::string> bodies = request_bodies();
  std::printf("| server | connections | requests | seconds | images/s | p50 ms | p99 ms | mean batch | errors |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  if (options.port != 0) return run_phases(("127.0.0.1:" + std::to_string(options.port)).c_str(), options.port, options, bodies) == 0 ? 0 : 1;
  int64_t errors = 0;
  for (const int64_t max_batch : {int64_t(64), int64_t(1)}) {
    serve::ServerOptions server_options;
    server_options.port = 0;
    server_options.batching = {.max_batch = max_batch, .max_delay = std::chrono::milliseconds(options.max_delay_ms)};
    serve::ModelServer server(serve::Classifier(fashion_mnist::make_model(), options.threads), server_options);
    const int port = server.bind();
    std::thread listening([&] { server.listen(); });
    const std::string config =
        max_batch == 1 ? "--max-batch 1" : "--max-batch 64 --max-delay-ms " + std::to_string(options.max_delay_ms);
    errors += run_phases(config.c_str(), port, options, bodies);
    server.stop();
    listening.join();
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return command_line::run_main("serve_load", kUsage, argc, argv, parse, run); }
