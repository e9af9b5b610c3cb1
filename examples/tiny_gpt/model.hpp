#pragma once
// A character-level GPT (pre-LayerNorm transformer decoder): token and position embeddings, `layers` blocks
// of causal multi-head self-attention (flex_attention with a causal block mask) and a GELU MLP, each added
// to the residual stream, a final LayerNorm and a linear head to the vocabulary.
#include "kiln/attention.hpp"
#include "kiln/nn.hpp"

namespace tiny_gpt {

using namespace kiln;

struct Config {
  int64_t vocab = 0, block = 128, layers = 4, heads = 4, embed = 128;
  double dropout = 0.1;
};

class BlockImpl : public nn::Module {
 public:
  explicit BlockImpl(const Config& c)
      : Module("Block"), dropout_(c.dropout),
        ln1(register_module("ln1", std::make_shared<nn::LayerNormImpl>(Shape{c.embed}))),
        attn(register_module("attn", std::make_shared<nn::MultiheadAttentionImpl>(
                                         nn::MultiheadAttentionOptions(c.embed, c.heads).batch_first(true)))),
        ln2(register_module("ln2", std::make_shared<nn::LayerNormImpl>(Shape{c.embed}))),
        fc(register_module("fc", std::make_shared<nn::LinearImpl>(c.embed, 4 * c.embed))),
        proj(register_module("proj", std::make_shared<nn::LinearImpl>(4 * c.embed, c.embed))) {}

  template <class M>
  Tensor<float> forward(const Tensor<float>& x, const attention::BlockMask<M>& causal) {
    const Tensor<float> h = ln1->forward(x);
    const Tensor<float> a = nn::functional::dropout(attn->forward_flex(h, h, h, attention::NoScoreMod{}, causal), dropout_, is_training());
    const Tensor<float> y = x + a;
    const Tensor<float> m = proj->forward(Tensor<float>(gelu(fc->forward(ln2->forward(y)))));
    return y + nn::functional::dropout(m, dropout_, is_training());
  }

 private:
  double dropout_;

 public:
  std::shared_ptr<nn::LayerNormImpl> ln1;
  std::shared_ptr<nn::MultiheadAttentionImpl> attn;
  std::shared_ptr<nn::LayerNormImpl> ln2;
  std::shared_ptr<nn::LinearImpl> fc, proj;
};

class GPTImpl : public nn::Module {
 public:
  explicit GPTImpl(const Config& c)
      : Module("GPT"), config(c),
        tok(register_module("tok", std::make_shared<nn::EmbeddingImpl>(c.vocab, c.embed))),
        pos(register_module("pos", std::make_shared<nn::EmbeddingImpl>(c.block, c.embed))),
        ln_f(register_module("ln_f", std::make_shared<nn::LayerNormImpl>(Shape{c.embed}))),
        head(register_module("head", std::make_shared<nn::LinearImpl>(c.embed, c.vocab))) {
    // Registered through a ModuleList (state_dict names "blocks.<i>...."), held typed for forward's mask argument.
    nn::ModuleList list;
    for (int64_t i = 0; i < c.layers; ++i) {
      blocks.push_back(std::make_shared<BlockImpl>(c));
      list->push_back(blocks.back());
    }
    register_module("blocks", list.ptr());
    NoGradGuard no_grad;  // GPT-2's small initial embeddings
    normal_(tok->weight, 0, 0.02);
    normal_(pos->weight, 0, 0.02);
  }

  // idx [B, T] (T <= block) -> logits [B, T, vocab].
  Tensor<float> forward(const Tensor<int64_t>& idx) {
    const int64_t t = idx.size(1);
    check<ShapeError>(idx.dim() == 2 && t >= 1 && t <= config.block, "GPT: expected token ids [B, T] with T <= ",
                      config.block, ", got ", idx.shape());
    if (causal_.Lq != t) causal_ = attention::create_block_mask(attention::causal(), 1, 1, t, t, 64, 64);
    Tensor<float> x(tok->forward(idx) + pos->forward(arange<int64_t>(t).to(idx.device())));
    x = nn::functional::dropout(x, config.dropout, is_training());
    for (const auto& b : blocks) x = b->forward(x, causal_);
    return head->forward(ln_f->forward(x));
  }

  Config config;
  std::shared_ptr<nn::EmbeddingImpl> tok, pos;
  std::vector<std::shared_ptr<BlockImpl>> blocks;
  std::shared_ptr<nn::LayerNormImpl> ln_f;
  std::shared_ptr<nn::LinearImpl> head;

 private:
  decltype(attention::create_block_mask(attention::causal(), 1, 1, 1, 1)) causal_{attention::causal()};
};
using nn::ModuleHolder;
KILN_MODULE(GPT);

// The mean cross-entropy of predicting each next token: inputs x [B, T], targets y [B, T] (x shifted by one).
inline Tensor<float> next_token_loss(GPT& model, const Tensor<int64_t>& x, const Tensor<int64_t>& y) {
  const Tensor<float> logits = model(x);
  const int64_t n = x.numel();
  return nn::functional::cross_entropy(logits.view({n, logits.size(2)}), y.view({n}));
}

}  // namespace tiny_gpt
