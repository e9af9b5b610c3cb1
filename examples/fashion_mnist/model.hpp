#pragma once
// The Fashion-MNIST model as training (examples/fashion_mnist) writes it and serving (examples/serve) reads
// it: the network, its input (1x28x28, normalized with the training set's mean and std) and its classes.
#include <array>
#include <string_view>

#include "kiln/nn.hpp"

namespace fashion_mnist {

inline constexpr int64_t kImageSide = 28;

// Fashion-MNIST's mean and standard deviation over the training images (pixels in [0, 1]).
inline constexpr float kMean = 0.2860f, kStd = 0.3530f;

// The labels 0..9 in the dataset's order.
inline constexpr std::array<std::string_view, 10> kClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

// Conv 1->64 k3 p1, BatchNorm, ReLU, MaxPool 2; Conv 64->128 k3 p1, BatchNorm, ReLU, MaxPool 2;
// Linear 6272->512, ReLU, Linear 512->10.
inline kiln::nn::Sequential make_model() {
  namespace nn = kiln::nn;
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 64, 3).padding(1)), nn::BatchNorm2d(64), nn::ReLU(),
                        nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(64, 128, 3).padding(1)), nn::BatchNorm2d(128),
                        nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(6272, 512), nn::ReLU(),
                        nn::Linear(512, int64_t(kClassNames.size())));
}

}  // namespace fashion_mnist
