// A character-level GPT trained on Debian's fortunes (examples/tiny_gpt/corpus.hpp) with AdamW, a linear warmup
// then cosine learning rate, gradient clipping, a validation loss and an atomic checkpoint every --eval-every
// steps, and text sampled at the end (temperature, top-k, multinomial). docs/attention.md walks through it.
//
//   tiny_gpt --steps 2000 --threads 2          (tiny_gpt --help for every option)
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "args.hpp"
#include "corpus.hpp"
#include "kiln/io.hpp"
#include "kiln/io/checkpoint.hpp"
#include "kiln/optim.hpp"
#include "model.hpp"
#include "sample.hpp"

namespace tiny_gpt {


// The mean loss over the same `batches` validation windows at every evaluation (a fixed generator).
double validation_loss(GPT& model, const Corpus& corpus, const Args& a) {
  NoGradGuard no_grad;
  const AutocastGuard amp = command_line::amp_scope(a.amp, model->parameters().front().device());
  model->eval();
  Generator gen(12345);
  double total = 0;
  for (int64_t i = 0; i < a.eval_batches; ++i) {
    const Batch b = sample_batch(corpus.val, a.batch_size, a.block, gen, model->parameters().front().device());
    total += next_token_loss(model, b.x, b.y).item();
  }
  model->train();
  return total / double(a.eval_batches);
}

// step N/M [####....] loss, learning rate, tokens/s, ETA: redrawn in place on a terminal, a line every
// tenth of the eval interval otherwise.
class Progress {
 public:
  Progress(int64_t steps, bool enabled) : steps_(steps), enabled_(enabled), tty_(isatty(fileno(stdout))) {}
  void update(int64_t step, double loss, double lr, int64_t tokens) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (tty_ ? now - drawn_ < std::chrono::milliseconds(100) && step != steps_ : step % std::max<int64_t>(1, steps_ / 40) != 0)
      return;
    drawn_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count(), rate = double(tokens) / elapsed;
    const long eta = long(elapsed / double(step - first_ + 1) * double(steps_ - step));
    const int filled = int(24 * step / steps_);
    std::printf("%sstep %lld/%lld [%s%s] loss %.4f lr %.2e %.0f tok/s ETA %ld:%02ld%s", tty_ ? "\r" : "", (long long)step,
                (long long)steps_, std::string(size_t(filled), '#').c_str(), std::string(size_t(24 - filled), '.').c_str(),
                loss, lr, rate, eta / 60, eta % 60, tty_ ? "" : "\n");
    std::fflush(stdout);
  }
  void end_line() {
    if (enabled_ && tty_) std::printf("\n");
  }
  void restart(int64_t first) {
    first_ = first;
    start_ = Clock::now();
  }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t steps_, first_ = 1;
  bool enabled_, tty_;
  Clock::time_point start_ = Clock::now(), drawn_{};
};

int run(const Args& a) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes, also into a pipe or log file
  set_num_threads(a.threads > 0 ? a.threads : int(std::max(1u, std::thread::hardware_concurrency())));
  const Device device = command_line::training_device(a.device);
  const fs::path checkpoint_path = fs::path(a.out_dir) / "checkpoint.safetensors";
  std::string text;
  try {
    text = read_fortunes(a.data_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tiny_gpt: cannot read the corpus: %s\nInstall Debian's package with `apt-get install fortunes`, "
                         "or pass --data DIR.\n", e.what());
    return 1;
  }
  std::optional<io::Checkpoint> saved;
  if (a.resume) saved = io::Checkpoint::load(checkpoint_path);
  std::string vocab;
  if (saved) {
    const Tensor<int64_t> v = saved->get("vocab").as<int64_t>();
    for (int64_t i = 0; i < v.numel(); ++i) vocab += char(v.data_ptr()[i]);
  }
  const Corpus corpus = make_corpus(text, vocab);
  manual_seed(a.seed);
  const Config config{int64_t(corpus.vocab.size()), a.block, a.layers, a.heads, a.embed, a.dropout};
  GPT model(config);
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  if (saved) model->load_state_dict(saved->section<float>("model"));
  model->to(device);  // (before the optimizer: its state is made where the parameters are)
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(a.lr).weight_decay(a.weight_decay).betas(0.9, 0.95));
  const int64_t warmup = std::min(a.warmup, std::max<int64_t>(a.steps - 1, 0));
  optim::SequentialLR schedule(opt, {std::make_shared<optim::LinearLR>(opt, 1e-2, 1.0, std::max<int64_t>(warmup, 1)),
                                     std::make_shared<optim::CosineAnnealingLR>(opt, std::max<int64_t>(a.steps - warmup, 1), a.lr / 10)},
                               {warmup});
  Generator batches(a.seed);
  int64_t start = 0;
  if (saved) {
    check(saved->scalar<int64_t>("config.embed") == a.embed && saved->scalar<int64_t>("config.layers") == a.layers &&
              saved->scalar<int64_t>("config.heads") == a.heads && saved->scalar<int64_t>("config.block") == a.block &&
              saved->scalar<int64_t>("config.steps") == a.steps,
          checkpoint_path.string(), ": saved by a run with another model size, --block or --steps");
    opt.load_state_dict(saved->section("optimizer"));
    schedule.load_state_dict(saved->section("scheduler"));
    saved->restore("generator", default_generator());
    saved->restore("batches", batches);
    start = saved->scalar<int64_t>("step");
    std::printf("resumed from %s at step %lld\n", checkpoint_path.c_str(), (long long)start);
  }
  std::printf("kiln %s, SIMD %s, %d threads, on %s: %zu characters (%zu train, %zu validation), vocabulary %zu, "
              "GPT %lld layers x %lld heads x %lld, %lld parameters\n",
              kiln::version(), simd_target(), get_num_threads(), device.str().c_str(), text.size(), size_t(corpus.train.numel()),
              size_t(corpus.val.numel()), corpus.vocab.size(), (long long)a.layers, (long long)a.heads,
              (long long)a.embed, (long long)params);
  if (start == 0 && a.steps > 0) std::printf("step 0: validation loss %.4f\n", validation_loss(model, corpus, a));

  GradScaler scaler(GradScalerOptions{.enabled = a.amp == "fp16"});
  Progress bar(a.steps, !a.quiet);
  bar.restart(start + 1);
  int64_t tokens = 0;
  for (int64_t step = start + 1; step <= a.steps; ++step) {
    const Batch b = sample_batch(corpus.train, a.batch_size, a.block, batches, device);
    opt.zero_grad();
    Tensor<float> loss;
    {
      const AutocastGuard amp = command_line::amp_scope(a.amp, device);
      loss = next_token_loss(model, b.x, b.y);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);  // (clipping reads the true gradients)
    optim::clip_grad_norm_(model->parameters(), a.clip);
    scaler.step(opt);
    scaler.update();
    schedule.step();
    tokens += b.x.numel();
    bar.update(step, loss.item(), opt.param_groups()[0].options.lr(), tokens);
    if (step % a.eval_every == 0 || step == a.steps) {
      bar.end_line();
      std::printf("step %lld: validation loss %.4f\n", (long long)step, validation_loss(model, corpus, a));
      io::Checkpoint ckpt;
      ckpt.put("model", model->state_dict()).put("optimizer", opt.state_dict()).put("scheduler", schedule.state_dict());
      ckpt.put("generator", default_generator()).put("batches", batches);
      ckpt.put("step", full<int64_t>({}, step))
          .put("config.embed", full<int64_t>({}, a.embed))
          .put("config.layers", full<int64_t>({}, a.layers))
          .put("config.heads", full<int64_t>({}, a.heads))
          .put("config.block", full<int64_t>({}, a.block))
          .put("config.steps", full<int64_t>({}, a.steps));
      std::vector<int64_t> v(corpus.vocab.begin(), corpus.vocab.end());
      for (auto& c : v) c = int64_t(static_cast<unsigned char>(c));
      ckpt.put("vocab", tensor(v));
      ckpt.metadata()["written_by"] = "kiln examples/tiny_gpt";
      fs::create_directories(a.out_dir);
      ckpt.save(checkpoint_path);
    }
  }
  if (a.sample_chars > 0) {
    Generator gen(a.seed + 1);
    std::printf("---- sample (temperature %.2f, top-k %lld) ----\n%s\n", a.temperature, (long long)a.top_k,
                sample(model, corpus, a.prompt, {a.sample_chars, a.temperature, a.top_k}, gen).c_str());
  }
  return 0;
}

}  // namespace tiny_gpt

int main(int argc, char** argv) {
  using namespace tiny_gpt;
  return command_line::run_main("tiny_gpt", kUsage, argc, argv, parse_args, run);
}
