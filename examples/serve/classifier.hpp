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

class Classifier {
 public:
  // threads: OpenMP threads of each forward.
  Classifier(kiln::nn::Sequential net, int threads) : net_(std::move(net)), threads_(threads) { net_->eval(); }

  // The "model" section of a checkpoint that examples/fashion_mnist wrote; throws std::runtime_error naming
  // the file and what is wrong (missing, corrupt, not this model).
  static Classifier from_checkpoint(const std::filesystem::path& path, int threads) {
    try {
      kiln::nn::Sequential net = fashion_mnist::make_model();
      net->load_state_dict(kiln::io::Checkpoint::load(path).section<float>("model"));
      return Classifier(std::move(net), threads);
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
