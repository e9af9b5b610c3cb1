// examples/tiny_gpt's model, batches and sampler end to end on a text it can learn exactly (one sentence
// repeated): the validation loss falls from ln(vocab) to near zero, and greedy sampling continues the
// sentence. Also the checkpoint round trip of the model (state_dict names nested as blocks.<i>.attn...).
#include <doctest/doctest.h>

#include <cmath>

#include "../../examples/tiny_gpt/corpus.hpp"
#include "../../examples/tiny_gpt/model.hpp"
#include "../../examples/tiny_gpt/sample.hpp"
#include "kiln/optim.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_attention_tiny_gpt {

using namespace tiny_gpt;

TEST_CASE("tiny_gpt: a small GPT learns a repeated sentence and greedy sampling continues it") {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  const Corpus corpus = make_corpus(text);
  CHECK(corpus.vocab.size() == 28);  // the 26 letters of the pangram, space and dot
  CHECK(corpus.decode(corpus.encode("lazy dog")) == "lazy dog");
  manual_seed(1);
  GPT model(Config{int64_t(corpus.vocab.size()), 32, 2, 2, 32, 0.0});
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(3e-3).weight_decay(0.0));
  Generator gen(2);
  auto loss_of = [&](const Batch& b) { return next_token_loss(model, b.x, b.y); };
  const double first = loss_of(sample_batch(corpus.val, 16, 32, gen)).item();
  CHECK(first == doctest::Approx(std::log(28.0)).epsilon(0.15));
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    Tensor<float> loss = loss_of(sample_batch(corpus.train, 16, 32, gen));
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
  }
  double last;
  {
    NoGradGuard no_grad;
    model->eval();
    last = loss_of(sample_batch(corpus.val, 16, 32, gen)).item();
    model->train();
  }
  CHECK(last < 0.1);
  Generator sampler(3);
  const std::string out = sample(model, corpus, "the quick", {40, 1.0, 1}, sampler);
  CHECK(out == "the quick brown fox jumps over the lazy dog. the ");
}

// The same code paths in a few steps: what the sanitizer build runs of tiny_gpt (the case above, 150 steps, takes
// 43 s there and is left to the other builds: tests/meson.build).
TEST_CASE("tiny_gpt: AdamW steps on one batch lower its loss; sampling and the state_dict round trip") {
  const Corpus corpus = make_corpus("the quick brown fox jumps over the lazy dog. the quick brown fox jumps. ");
  manual_seed(4);
  const Config config{int64_t(corpus.vocab.size()), 32, 2, 2, 32, 0.0};
  GPT model(config);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(3e-3).weight_decay(0.0));
  Generator gen(5);
  const Batch batch = sample_batch(corpus.train, 4, 16, gen);
  const double first = next_token_loss(model, batch.x, batch.y).item();
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    Tensor<float> loss = next_token_loss(model, batch.x, batch.y);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
  }
  CHECK(next_token_loss(model, batch.x, batch.y).item() < first - 0.1);
  Generator sampler(6);
  CHECK(sample(model, corpus, "the", {8, 1.0, 1}, sampler).size() == 3 + 8);
  // The state_dict round trip into a fresh model gives the same logits.
  GPT copy(config);
  copy->load_state_dict(model->state_dict());
  CHECK(model->state_dict().count("blocks.1.attn.in_proj_weight") == 1);
  NoGradGuard no_grad;
  model->eval();
  copy->eval();
  const Tensor<int64_t> x = tensor(corpus.encode("over the lazy")).view({1, 13});
  CHECK(max(abs(model(x) - copy(x))).item() == 0.0f);
}

}  // namespace test_attention_tiny_gpt
