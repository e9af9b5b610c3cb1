#pragma once
// Text from the model, one character at a time: the logits of the last position (the context cropped to
// the block size) divided by the temperature, all but the top-k set to -inf, softmax, one multinomial draw.
#include <limits>
#include <string>
#include <vector>

#include "corpus.hpp"
#include "model.hpp"

namespace tiny_gpt {

struct SampleOptions {
  int64_t chars = 500;
  double temperature = 0.8;
  int64_t top_k = 40;  // 0: all
};

inline std::string sample(GPT& model, const Corpus& corpus, const std::string& prompt, const SampleOptions& o,
                          Generator& gen) {
  NoGradGuard no_grad;
  model->eval();
  std::vector<int64_t> tokens = corpus.encode(prompt.empty() ? "\n" : prompt);
  const int64_t vocab = model->config.vocab, block = model->config.block;
  const Device device = model->parameters().front().device();
  for (int64_t n = 0; n < o.chars; ++n) {
    const int64_t t = std::min<int64_t>(int64_t(tokens.size()), block);
    const Tensor<int64_t> context = tensor(std::vector<int64_t>(tokens.end() - t, tokens.end())).view({1, t}).to(device);
    // (The vocabulary's logits come to the host for top-k and the draw.)
    Tensor<float> logits(model(context).select(1, t - 1).view({vocab}).cpu() / float(o.temperature));
    if (o.top_k > 0 && o.top_k < vocab) {
      const float kth = std::get<0>(topk(logits, o.top_k)).data_ptr()[o.top_k - 1];
      logits = masked_fill(logits, Tensor<bool>(logits < kth), -std::numeric_limits<float>::infinity());
    }
    tokens.push_back(multinomial(softmax(logits, 0), 1, false, &gen).data_ptr()[0]);
  }
  model->train();
  return corpus.decode(tokens);
}

}  // namespace tiny_gpt
