// Compile-time budget, train_mlp: a user's training program (docs/performance.md): an MLP with nn layers,
// cross-entropy, Adam, a LR schedule, a DataLoader over a TensorDataset, gradient clipping, and a state_dict.
#include <kiln/data.hpp>
#include <kiln/kiln.hpp>
#include <kiln/nn.hpp>
#include <kiln/optim.hpp>

#include <cstdio>

int main() {
  using namespace kiln;
  namespace F = kiln::nn::functional;
  manual_seed(0);
  const Tensor<float> x = randn<float>({256, 8});
  const Tensor<int64_t> y = randint<int64_t>(0, 3, {256});
  data::DataLoader loader(data::TensorDataset(x, y), {.batch_size = 32, .shuffle = true});
  nn::Sequential net(nn::Linear(8, 32), nn::ReLU(), nn::Dropout(0.1), nn::Linear(32, 3));
  optim::Adam opt(net->parameters(), optim::AdamOptions(1e-2));
  optim::StepLR schedule(opt, 10, 0.5);
  double last = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (const auto& batch : loader) {
      opt.zero_grad();
      const Tensor<float> loss = F::cross_entropy(net(batch.data), batch.target);
      loss.backward();
      optim::clip_grad_norm_(net->parameters(), 1.0);
      opt.step();
      last = double(loss.item());
    }
    schedule.step();
  }
  std::printf("loss %g, %zu tensors in the state_dict\n", last, net->state_dict().size());
  return 0;
}
