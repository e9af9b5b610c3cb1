#pragma once
// Command-line options of the server; a bad argument throws command_line::ArgsError with the reason.
#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>

#include "../command_line.hpp"
#include "server.hpp"

namespace serve {

struct Args {
  std::string checkpoint = "fashion_mnist_out/checkpoint.safetensors";
  int threads = 0;  // compute threads, 0: every core
  ServerOptions server;
};

inline constexpr const char* kUsage =
    "usage: serve [--checkpoint PATH] [--host ADDRESS] [--port N] [--threads N] [--http-threads N]\n"
    "             [--max-batch N] [--max-delay-ms N]\n"
    "Serves the Fashion-MNIST CNN of a training checkpoint (examples/fashion_mnist) over HTTP:\n"
    "  POST /predictions/fashion_mnist  (body: a PNG or binary PGM image) -> class probabilities as JSON\n"
    "  GET /ping, GET /metrics (Prometheus)\n"
    "  --checkpoint PATH   default fashion_mnist_out/checkpoint.safetensors\n"
    "  --host ADDRESS      default 127.0.0.1 (0.0.0.0: every interface)\n"
    "  --port N            default 8080; 0 picks a free port\n"
    "  --threads N         compute threads of the model, default: every core\n"
    "  --http-threads N    connections served at once, default 128\n"
    "  --max-batch N       images per forward, default 64; 1: no batching\n"
    "  --max-delay-ms N    how long a batch waits for more images after its first, default 2\n"
    "SIGINT or SIGTERM stops it after the requests in flight are answered.\n";

inline Args parse_args(int argc, char** argv) {
  Args a;
  for (command_line::Flags f(argc, argv); f.next();) {
    const std::string_view flag = f.flag();
    if (flag == "--checkpoint") a.checkpoint = f.value();
    else if (flag == "--host") a.server.host = f.value();
    else if (flag == "--port") {
      a.server.port = f.number<int>(0);
      if (a.server.port > 65535)
        throw command_line::ArgsError("--port expects a port number up to 65535, got " + std::to_string(a.server.port));
    } else if (flag == "--threads") a.threads = f.number<int>(1);
    else if (flag == "--http-threads") a.server.http_threads = f.number<int>(1);
    else if (flag == "--max-batch") a.server.batching.max_batch = f.number<int64_t>(1);
    else if (flag == "--max-delay-ms") a.server.batching.max_delay = std::chrono::milliseconds(f.number<int>(0));
    else f.unknown();
  }
  if (a.threads == 0) a.threads = int(std::max(1u, std::thread::hardware_concurrency()));
  return a;
}

}  // namespace serve
