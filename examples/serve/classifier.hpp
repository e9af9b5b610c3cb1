#pragma once
// The served model: the Fashion-MNIST CNN with the weights of a training checkpoint, in eval mode,
// answering class probabilities for a batch of normalized images.
#include <filesystem>
#include <stdexcept>
#include <string>

#include "../fashion_mnist/model.hpp"
#include "kiln/io/checkpoint.hpp"
#include "kiln/kiln.hpp"

namespace serve {

// An eval-mode BatchNorm right after a convolution is a per-channel affine map, so it folds into the
// convolution's weight and bias (as PyTorch's fuse_conv_bn_eval): the same answers up to rounding, one pass
// over the activations fewer per block. The other modules are shared with `net`.
inline kiln::nn::Sequential fold_batch_norms(const kiln::nn::Sequential& net) {
  namespace nn = kiln::nn;
  kiln::NoGradGuard no_grad;
  nn::Sequential folded;
  for (size_t i = 0; i < net->size(); ++i) {
    const auto conv = std::dynamic_pointer_cast<nn::Conv2dImpl>((*net)[i]);
    const auto norm = i + 1 < net->size() ? std::dynamic_pointer_cast<nn::BatchNormImpl>((*net)[i + 1]) : nullptr;
    if (!conv || !norm) {
      folded->push_back((*net)[i]);
      continue;
    }
    const int64_t channels = conv->options.out_channels;
    const kiln::Tensor<float> scale(norm->weight / kiln::sqrt(norm->running_var + float(norm->eps())));
    const kiln::Tensor<float> bias = conv->bias.defined() ? conv->bias : kiln::zeros<float>({channels});
    nn::Conv2d fused(nn::Conv2dOptions(conv->options).bias(true));
    fused->weight.copy_(conv->weight * scale.view({channels, 1, 1, 1}));
    fused->bias.copy_((bias - norm->running_mean) * scale + norm->bias);
    folded->push_back(fused);
    ++i;  // the BatchNorm, now inside the convolution
  }
  return folded;
}

class Classifier {
 public:
  // threads: OpenMP threads of each forward. net is used in eval mode, its BatchNorms folded.
  Classifier(const kiln::nn::Sequential& net, int threads) : net_(fold_batch_norms(net)), threads_(threads) {
    net_->eval();
  }

  // The "model" section of a checkpoint that examples/fashion_mnist wrote; throws std::runtime_error naming
  // the file and what is wrong (missing, corrupt, not this model).
  static Classifier from_checkpoint(const std::filesystem::path& path, int threads) {
    try {
      kiln::nn::Sequential net = fashion_mnist::make_model();
      net->load_state_dict(kiln::io::Checkpoint::load(path).section<float>("model"));
      return Classifier(net, threads);
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot load the model from " + path.string() + ": " + e.what() +
                               " (examples/fashion_mnist writes one: bash scripts/run_example.sh)");
    }
  }

  // images [B, 1, 28, 28], normalized -> probabilities [B, 10].
  kiln::Tensor<float> probabilities(const kiln::Tensor<float>& images) {
    kiln::InferenceMode inference;
    // OpenMP's thread count belongs to the calling thread, and this runs on the batcher's.
    kiln::set_num_threads(threads_);
    return kiln::softmax(net_(images), 1);
  }

 private:
  kiln::nn::Sequential net_;
  int threads_;
};

}  // namespace serve
