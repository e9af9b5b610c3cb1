#pragma once
// Command-line options of tiny_gpt; a bad argument throws command_line::ArgsError with the reason.
#include <string>

#include "../amp_flag.hpp"
#include "../command_line.hpp"
#include "../device_flag.hpp"

namespace tiny_gpt {

using command_line::ArgsError;
using command_line::amp_flag;
using command_line::device_flag;

struct Args {
  std::string data_dir = "/usr/share/games/fortunes";
  std::string out_dir = "tiny_gpt_out";  // checkpoint.safetensors
  std::string device = "cpu";  // --device cpu|cuda|cuda:N
  std::string amp;  // --amp bf16|fp16: the forward and the loss under autocast; fp16 with a GradScaler ("": float)
  int64_t steps = 2000, batch_size = 32, block = 128, layers = 4, heads = 4, embed = 128;
  double lr = 1e-3, weight_decay = 0.1, clip = 1.0, dropout = 0.1;
  int64_t warmup = 100, eval_every = 250, eval_batches = 20;
  int threads = 0;  // 0: every core
  uint64_t seed = 1;
  bool resume = false, quiet = false;
  std::string prompt = "\n";
  int64_t sample_chars = 500, top_k = 40;
  double temperature = 0.8;
};

inline constexpr const char* kUsage =
    "usage: tiny_gpt [--steps N] [--batch-size N] [--block N] [--layers N] [--heads N] [--embed N]\n"
    "                [--lr X] [--warmup N] [--weight-decay X] [--clip X] [--dropout X] [--eval-every N]\n"
    "                [--eval-batches N] [--threads N] [--seed N] [--data DIR] [--out DIR] [--resume] [--quiet]\n"
    "                [--prompt TEXT] [--sample-chars N] [--temperature X] [--top-k N] [--device cpu|cuda[:N]]\n"
    "                [--amp bf16|fp16]\n"
    "Trains a character-level GPT on Debian's fortunes package (/usr/share/games/fortunes) with AdamW, a\n"
    "linear warmup then cosine learning rate, gradient clipping, a validation loss every --eval-every steps\n"
    "(and a checkpoint, OUT/checkpoint.safetensors), then samples text from --prompt. --steps 0 with --resume\n"
    "only samples from the checkpoint. --device cuda trains on a GPU (the program loads the CUDA driver, NVRTC\n"
    "and cuBLAS at run time). --amp runs the forward pass and the loss under autocast (linear layers and\n"
    "attention in bfloat16 or float16, on a GPU the attention on tensor cores; the rest in float); fp16 adds a\n"
    "GradScaler, the gradients unscaled before clipping. On a CPU it costs time (docs/amp.md).\n";

inline Args parse_args(int argc, char** argv) {
  Args a;
  for (command_line::Flags f(argc, argv); f.next();) {
    const std::string_view flag = f.flag();
    if (flag == "--steps") a.steps = f.number<int64_t>(0);
    else if (flag == "--batch-size") a.batch_size = f.number<int64_t>(1);
    else if (flag == "--block") a.block = f.number<int64_t>(2);
    else if (flag == "--layers") a.layers = f.number<int64_t>(1);
    else if (flag == "--heads") a.heads = f.number<int64_t>(1);
    else if (flag == "--embed") a.embed = f.number<int64_t>(1);
    else if (flag == "--lr") a.lr = f.real(1e-8, 1);
    else if (flag == "--warmup") a.warmup = f.number<int64_t>(0);
    else if (flag == "--weight-decay") a.weight_decay = f.real(0, 1);
    else if (flag == "--clip") a.clip = f.real(0, 1e9);
    else if (flag == "--dropout") a.dropout = f.real(0, 0.9);
    else if (flag == "--eval-every") a.eval_every = f.number<int64_t>(1);
    else if (flag == "--eval-batches") a.eval_batches = f.number<int64_t>(1);
    else if (flag == "--threads") a.threads = f.number<int>(1);
    else if (flag == "--seed") a.seed = f.number<uint64_t>(0);
    else if (flag == "--data") a.data_dir = f.value();
    else if (flag == "--out") a.out_dir = f.value();
    else if (flag == "--resume") a.resume = true;
    else if (flag == "--quiet") a.quiet = true;
    else if (flag == "--prompt") a.prompt = f.value();
    else if (flag == "--sample-chars") a.sample_chars = f.number<int64_t>(0);
    else if (flag == "--temperature") a.temperature = f.real(1e-3, 100);
    else if (flag == "--top-k") a.top_k = f.number<int64_t>(0);
    else if (flag == "--device") a.device = device_flag(f.value());
    else if (flag == "--amp") a.amp = amp_flag(f.value());
    else f.unknown();
  }
  if (a.embed % a.heads != 0)
    throw ArgsError("--embed (" + std::to_string(a.embed) + ") must be a multiple of --heads (" + std::to_string(a.heads) + ")");
  return a;
}

}  // namespace tiny_gpt
