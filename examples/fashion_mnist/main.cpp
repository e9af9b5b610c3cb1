// The main job: PyTorch's tutorial CNN, adapted to 1x28x28, trained on Fashion-MNIST with Adam and a
// one-cycle learning rate, evaluated on the test set and checkpointed after every epoch; --resume
// continues from the checkpoint exactly where it stopped (same threads: bitwise the same steps).
//
//   fashion_mnist --epochs 3 --threads 2          (fashion_mnist --help for every option)
//   fashion_mnist --device cuda                   (on a GPU: the model, each batch and the optimizer's state there)
//   mpirun -np 2 fashion_mnist --distributed      (data-parallel with SyncBatchNorm: replicas.hpp; with
//                                                  --device cuda a GPU per rank, over NCCL)
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <thread>

#include "args.hpp"
#include "kiln/data.hpp"
#include "kiln/io.hpp"
#include "kiln/io/checkpoint.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"
#include "model.hpp"
#include "progress.hpp"
#include "replicas.hpp"
#include "svg_plot.hpp"
#include "../serve/png.hpp"

using namespace kiln;
namespace F = kiln::nn::functional;
namespace fs = std::filesystem;

namespace fashion_mnist {

struct Split {
  Tensor<float> images;  // [N, 1, 28, 28], normalized
  Tensor<int64_t> labels;
};

Split load_split(const fs::path& dir, const char* prefix) {
  const fs::path images = dir / (std::string(prefix) + "-images-idx3-ubyte.gz");
  const fs::path labels = dir / (std::string(prefix) + "-labels-idx1-ubyte.gz");
  Split s{Tensor<float>((io::read_idx_images(images) - kMean) / kStd), io::read_idx_labels(labels)};
  check<ShapeError>(s.images.size(0) == s.labels.size(0) && s.images.size(2) == 28 && s.images.size(3) == 28,
                    images.string(), ": expected 28x28 images, one label each; got ", s.images.shape(), " and ",
                    s.labels.shape());
  return s;
}

int64_t correct(const Tensor<float>& logits, const Tensor<int64_t>& labels) {
  return sum(argmax(logits, 1) == labels).item();
}

double evaluate(nn::Sequential& net, const Split& test, const Args& args, Device device) {
  NoGradGuard no_grad;
  const AutocastGuard amp = command_line::amp_scope(args.amp, device);
  net->eval();
  int64_t right = 0;
  constexpr int64_t kBatch = 1000;
  for (int64_t i = 0; i < test.images.size(0); i += kBatch) {
    const int64_t n = std::min(kBatch, test.images.size(0) - i);
    right += correct(net(test.images.narrow(0, i, n).to(device)), test.labels.narrow(0, i, n).to(device));
  }
  net->train();
  return double(right) / double(test.images.size(0));
}

// "Ankle boot" -> "ankle-boot": a class name as a part of a file name.
std::string file_name_part(std::string_view name) {
  std::string out;
  for (const char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : '-';
  return out;
}

// --export-png DIR N: the first N test images as 8-bit gray PNG files DIR/<index>_<class>.png, requests
// for examples/serve (curl --data-binary @DIR/0_ankle-boot.png ...).
int export_test_pngs(const Args& args) {
  const fs::path dir = args.data_dir;
  const Tensor<float> images = io::read_idx_images(dir / "t10k-images-idx3-ubyte.gz");  // in [0, 1]: bytes / 255
  const Tensor<int64_t> labels = io::read_idx_labels(dir / "t10k-labels-idx1-ubyte.gz");
  const int64_t pixels = kImageSide * kImageSide;
  check<ShapeError>(images.numel() == images.size(0) * pixels && labels.numel() == images.size(0),
                    dir.string(), ": expected 28x28 test images, one label each");
  fs::create_directories(args.export_png_dir);
  const int64_t n = std::min(args.export_png_count, images.size(0));
  std::vector<unsigned char> bytes(static_cast<size_t>(pixels));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = labels.data_ptr()[i];
    check(label >= 0 && label < int64_t(kClassNames.size()), dir.string(), ": test label ", i, " is ", label);
    for (int64_t k = 0; k < pixels; ++k) bytes[size_t(k)] = static_cast<unsigned char>(std::lround(images.data_ptr()[i * pixels + k] * 255));
    const std::string png = serve::encode_png(bytes.data(), kImageSide, kImageSide, 1);
    io::write_file_atomic(fs::path(args.export_png_dir) / (std::to_string(i) + "_" + file_name_part(kClassNames[size_t(label)]) + ".png"),
                          std::span(reinterpret_cast<const uint8_t*>(png.data()), png.size()));
  }
  std::printf("wrote the first %lld test images to %s as PNG files (<index>_<class>.png)\n", (long long)n,
              args.export_png_dir.c_str());
  return 0;
}

int run(const Args& args) {
  manual_seed(args.seed);
  nn::Sequential net = make_model();
  const Device device = command_line::training_device(args.device);
  net->to(device);  // (before the optimizer: its state is made where the parameters are)
  Replicas replicas(args.distributed, net, device);  // --distributed: rank 0's parameters on every rank
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  set_num_threads(args.threads > 0 ? args.threads : std::max(1, cores / replicas.size()));
  Split train, test;
  try {
    train = load_split(args.data_dir, "train");
    test = load_split(args.data_dir, "t10k");
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "fashion_mnist: cannot read the dataset: %s\n"
                 "Install Debian's package with `apt-get install dataset-fashion-mnist`, or pass --data DIR.\n",
                 e.what());
    return 1;
  }
  if (replicas.main()) fs::create_directories(args.out_dir);
  const fs::path checkpoint_path = fs::path(args.out_dir) / "checkpoint.safetensors";

  data::DataLoader loader(data::TensorDataset(train.images, train.labels),
                          replicas.loader_options({.batch_size = args.batch_size, .shuffle = true,
                                                   .num_workers = args.workers, .seed = args.seed}));
  const int64_t batches = args.limit_batches > 0 ? std::min(args.limit_batches, loader.size()) : loader.size();
  const int64_t total_steps = batches * args.epochs;
  optim::Adam opt(net->parameters(), optim::AdamOptions(args.lr));
  // float16 gradients underflow without loss scaling; bfloat16 has float's range and needs none (as in PyTorch).
  GradScaler scaler(GradScalerOptions{.enabled = args.amp == "fp16"});
  std::unique_ptr<optim::LRScheduler> schedule;
  if (args.schedule == "onecycle") schedule = std::make_unique<optim::OneCycleLR>(opt, args.lr, total_steps, 0.25);

  Curves curves;
  int start_epoch = 0;
  if (args.resume) {
    const io::Checkpoint ckpt = io::Checkpoint::load(checkpoint_path);
    check(ckpt.scalar<int64_t>("config.batch_size") == args.batch_size, checkpoint_path.string(),
          ": saved by a run with another --batch-size");
    // A one-cycle schedule's length is part of the run; a constant learning rate can go on for more epochs.
    check(!schedule || ckpt.scalar<int64_t>("config.total_steps") == total_steps, checkpoint_path.string(),
          ": saved by a run with other --epochs or --limit-batches; a one-cycle schedule resumes only with the same"
          " (or train with --schedule constant)");
    net->load_state_dict(ckpt.section<float>("model"));
    opt.load_state_dict(ckpt.section("optimizer"));
    if (schedule) schedule->load_state_dict(ckpt.section("scheduler"));
    if (scaler.is_enabled()) scaler.load_state_dict(ckpt.section("scaler"));
    ckpt.restore("generator", default_generator());
    start_epoch = int(ckpt.scalar<int64_t>("epoch"));
    auto values = [&](const char* name) {
      const Tensor<double> t = ckpt.get(name).as<double>();
      return std::vector<double>(t.data_ptr(), t.data_ptr() + t.numel());
    };
    curves = {values("curves.loss_epoch"), values("curves.loss"), values("curves.accuracy")};
    if (replicas.main()) std::printf("resumed from %s after epoch %d\n", checkpoint_path.c_str(), start_epoch);
  }
  if (replicas.main())
    std::printf("kiln %s, SIMD %s, %d ranks of %d threads, %d loader workers, on %s: %lld training images, %lld test images\n",
                kiln::version(), simd_target(), replicas.size(), get_num_threads(), args.workers, device.str().c_str(),
                (long long)train.images.size(0), (long long)test.images.size(0));

  for (int epoch = start_epoch; epoch < args.epochs; ++epoch) {
    loader.set_epoch(epoch);
    ProgressBar bar(epoch + 1, args.epochs, batches, !args.quiet && replicas.main());  // rank 0's part
    double loss_sum = 0, interval_loss = 0;
    int64_t right = 0, seen = 0, done = 0, interval = 0;
    const int64_t log_every = std::max<int64_t>(1, batches / 20);
    for (auto& batch : loader) {
      opt.zero_grad();
      Tensor<float> logits, loss;
      const Tensor<int64_t> target = batch.target.to(device);
      {
        const AutocastGuard amp = command_line::amp_scope(args.amp, device);
        logits = replicas.forward(batch.data.to(device));
        loss = F::cross_entropy(logits, target);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      if (schedule) schedule->step();
      const double l = loss.item();
      loss_sum += l * double(batch.target.numel());
      right += correct(logits.detach(), target);
      seen += batch.target.numel();
      interval_loss += l;
      if (++interval == log_every) {
        curves.loss_epoch.push_back(epoch + double(done + 1) / double(batches));
        curves.loss.push_back(interval_loss / double(interval));
        interval_loss = 0;
        interval = 0;
      }
      bar.update(++done, loss_sum / double(seen), double(right) / double(seen), seen);
      if (done == batches) break;
    }
    const double train_seconds = bar.seconds();
    std::vector<double> totals{loss_sum, double(right), double(seen)};  // over all ranks
    replicas.sum(totals);
    loss_sum = totals[0], right = int64_t(totals[1]), seen = int64_t(totals[2]);
    const double accuracy = evaluate(net, test, args, device);
    curves.accuracy.push_back(accuracy);
    if (!replicas.main()) continue;  // rank 0 reports and writes
    std::printf("epoch %d/%d: train loss %.4f, train accuracy %.4f, test accuracy %.4f, %.1f s (%.0f img/s)\n",
                epoch + 1, args.epochs, loss_sum / double(seen), double(right) / double(seen), accuracy, train_seconds,
                double(seen) / train_seconds);

    io::Checkpoint ckpt;
    ckpt.put("model", net->state_dict()).put("optimizer", opt.state_dict()).put("generator", default_generator());
    if (schedule) ckpt.put("scheduler", schedule->state_dict());
    if (scaler.is_enabled()) ckpt.put("scaler", scaler.state_dict());
    ckpt.put("epoch", full<int64_t>({}, epoch + 1))
        .put("config.total_steps", full<int64_t>({}, total_steps))
        .put("config.batch_size", full<int64_t>({}, args.batch_size))
        .put("curves.loss_epoch", tensor(curves.loss_epoch))
        .put("curves.loss", tensor(curves.loss))
        .put("curves.accuracy", tensor(curves.accuracy));
    ckpt.metadata()["written_by"] = "kiln examples/fashion_mnist";
    ckpt.save(checkpoint_path);
    write_curves_svg(fs::path(args.out_dir) / "curves.svg", curves);
  }
  if (replicas.main())
    std::printf("final test accuracy %.4f; checkpoint %s, curves %s\n",
                curves.accuracy.empty() ? 0.0 : curves.accuracy.back(), checkpoint_path.c_str(),
                (fs::path(args.out_dir) / "curves.svg").c_str());
  return 0;
}

}  // namespace fashion_mnist

int main(int argc, char** argv) {
  using namespace fashion_mnist;
  return command_line::run_main("fashion_mnist", kUsage, argc, argv, parse_args, [](const Args& args) {
    return args.export_png_dir.empty() ? run(args) : export_test_pngs(args);
  });
}
