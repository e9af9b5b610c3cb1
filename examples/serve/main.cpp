// Serves the Fashion-MNIST CNN of a training checkpoint over HTTP, with dynamic batching (docs/serving.md).
//
//   serve --checkpoint fashion_mnist_out/checkpoint.safetensors --port 8080      (serve --help for every option)
//   curl --data-binary @fashion_mnist_out/png/0.png http://127.0.0.1:8080/predictions/fashion_mnist
#include <chrono>
#include <cstdio>

#include "args.hpp"
#include "server.hpp"
#include "stop_on_signal.hpp"

namespace serve {

int run(const Args& args) {
  ModelServer server(Classifier::from_checkpoint(args.checkpoint, args.threads), args.server);
  const int port = server.bind();
  StopOnSignal stop_on_signal([&server] { server.stop(); });
  std::printf("serve: %s on http://%s:%d/predictions/%s (%d compute threads, batches of up to %lld images waiting "
              "up to %lld ms, %d HTTP threads); SIGINT or SIGTERM stops it\n",
              args.checkpoint.c_str(), args.server.host.c_str(), port, kModelName, args.threads,
              (long long)args.server.batching.max_batch,
              (long long)std::chrono::duration_cast<std::chrono::milliseconds>(args.server.batching.max_delay).count(),
              args.server.http_threads);
  std::fflush(stdout);
  server.listen();
  std::printf("serve: stopped\n");
  return 0;
}

}  // namespace serve

int main(int argc, char** argv) { return command_line::run_main("serve", serve::kUsage, argc, argv, serve::parse_args, serve::run); }
