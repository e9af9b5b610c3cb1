#pragma once
// Command-line options of the Fashion-MNIST example; a bad argument throws command_line::ArgsError with the reason.
#include <stdexcept>
#include <string>

#include "../amp_flag.hpp"
#include "../command_line.hpp"
#include "../device_flag.hpp"

namespace fashion_mnist {

using command_line::ArgsError;
using command_line::amp_flag;
using command_line::device_flag;

struct Args {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string out_dir = "fashion_mnist_out";  // checkpoint.safetensors and curves.svg
  int epochs = 3;
  int threads = 0;  // 0: every core
  int workers = 1;  // data-loading threads
  int64_t batch_size = 64;
  double lr = 2e-3;  // OneCycle's peak
  std::string schedule = "onecycle";  // or "constant"
  uint64_t seed = 1;
  int64_t limit_batches = 0;  // per epoch, 0: all (for quick runs and tests)
  bool resume = false;
  bool quiet = false;  // no progress bar, one line per epoch
  bool distributed = false;  // data-parallel under mpirun, or with --device cuda a NCCL file store (replicas.hpp)
  std::string device = "cpu";  // --device cpu|cuda|cuda:N
  std::string amp;  // --amp bf16|fp16: forward and loss under autocast; fp16 with a GradScaler ("": float)
  std::string export_png_dir;  // --export-png DIR N: write N test images as PNG files instead of training
  int64_t export_png_count = 0;
};

inline constexpr const char* kUsage =
    "usage: fashion_mnist [--epochs N] [--threads N] [--workers N] [--batch-size N] [--lr X]\n"
    "                     [--schedule onecycle|constant] [--seed N] [--data DIR] [--out DIR]\n"
    "                     [--limit-batches N] [--resume] [--quiet] [--amp bf16|fp16] [--device cpu|cuda[:N]]\n"
    "       mpirun -np N fashion_mnist --distributed [options]   (--batch-size is the global batch; over MPI,\n"
    "                                                              or NCCL with --device cuda)\n"
    "       fashion_mnist --export-png DIR N [--data DIR]\n"
    "Trains a CNN on Fashion-MNIST (Debian's dataset-fashion-mnist), evaluates on the test set and writes\n"
    "a checkpoint each epoch (OUT/checkpoint.safetensors) and the curves (OUT/curves.svg).\n"
    "--amp runs the forward pass and the loss under autocast (convolutions and linear layers in bfloat16 or\n"
    "float16, the rest in float) on the training device; fp16 adds a GradScaler. On this CPU it costs time\n"
    "(docs/amp.md).\n"
    "--device cuda trains on a GPU (the program loads the CUDA driver, NVRTC and cuBLAS at run time).\n"
    "--export-png writes the first N test images as PNG files DIR/<index>_<class>.png (requests for\n"
    "examples/serve) and trains nothing.\n";

inline Args parse_args(int argc, char** argv) {
  Args a;
  for (command_line::Flags f(argc, argv); f.next();) {
    const std::string_view flag = f.flag();
    if (flag == "--epochs") a.epochs = f.number<int>(1);
    else if (flag == "--threads") a.threads = f.number<int>(1);
    else if (flag == "--workers") a.workers = f.number<int>(0);
    else if (flag == "--batch-size") a.batch_size = f.number<int64_t>(1);
    else if (flag == "--lr") a.lr = f.real(1e-9, 10);
    else if (flag == "--schedule") {
      a.schedule = f.value();
      if (a.schedule != "onecycle" && a.schedule != "constant")
        throw ArgsError("--schedule expects onecycle or constant, got \"" + a.schedule + "\"");
    } else if (flag == "--seed") a.seed = f.number<uint64_t>(0);
    else if (flag == "--data") a.data_dir = f.value();
    else if (flag == "--out") a.out_dir = f.value();
    else if (flag == "--limit-batches") a.limit_batches = f.number<int64_t>(1);
    else if (flag == "--resume") a.resume = true;
    else if (flag == "--quiet") a.quiet = true;
    else if (flag == "--distributed") a.distributed = true;
    else if (flag == "--device") a.device = device_flag(f.value());
    else if (flag == "--amp") a.amp = amp_flag(f.value());
    else if (flag == "--export-png") {
      a.export_png_dir = f.value();
      a.export_png_count = f.number<int64_t>(1);
    } else f.unknown();
  }
  return a;
}

}  // namespace fashion_mnist
