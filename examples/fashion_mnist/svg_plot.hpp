#pragma once
// The training curves as a small standalone SVG: the training loss (mean per logged interval) on the
// left axis and the test accuracy after each epoch on the right one, against epochs.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/io/atomic_file.hpp"

namespace fashion_mnist {

struct Curves {
  std::vector<double> loss_epoch, loss;  // x (fractional epoch) and value of each logged training loss
  std::vector<double> accuracy;          // test accuracy after epoch 1, 2, ...
};

inline void write_curves_svg(const std::filesystem::path& path, const Curves& c) {
  constexpr double W = 640, H = 360, L = 60, R = 60, T = 30, B = 40;
  const double epochs = std::max<double>(1, double(c.accuracy.size()));
  const double loss_max = c.loss.empty() ? 1 : std::max(1e-9, *std::max_element(c.loss.begin(), c.loss.end()));
  auto x_of = [&](double epoch) { return L + (W - L - R) * epoch / epochs; };
  auto y_loss = [&](double v) { return T + (H - T - B) * (1 - v / loss_max); };
  auto y_acc = [&](double v) { return T + (H - T - B) * (1 - v); };
  std::string svg;
  char buf[256];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    svg += buf;
  };
  add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
  add("<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  add("<text x=\"%.0f\" y=\"18\" text-anchor=\"middle\">Fashion-MNIST: training loss and test accuracy</text>\n", W / 2);
  add("<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
  add("<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T, L, H - B);
  add("<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", W - R, T, W - R, H - B);
  for (int e = 0; e <= int(epochs); ++e)
    add("<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%d</text>\n", x_of(e), H - B + 16, e);
  add("<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">epoch</text>\n", W / 2, H - 6);
  for (int k = 0; k <= 4; ++k) {
    add("<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#c0392b\">%.2f</text>\n", L - 6, y_loss(loss_max * k / 4) + 4, loss_max * k / 4);
    add("<text x=\"%.0f\" y=\"%.1f\" fill=\"#2471a3\">%.2f</text>\n", W - R + 6, y_acc(k / 4.0) + 4, k / 4.0);
  }
  auto polyline = [&](const std::vector<double>& xs, const std::vector<double>& ys, auto y_of, const char* color) {
    svg += "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"";
    svg += color;
    svg += "\" points=\"";
    for (size_t i = 0; i < ys.size(); ++i) add("%.1f,%.1f ", x_of(xs[i]), y_of(ys[i]));
    svg += "\"/>\n";
  };
  polyline(c.loss_epoch, c.loss, y_loss, "#c0392b");
  std::vector<double> acc_x;
  for (size_t i = 0; i < c.accuracy.size(); ++i) acc_x.push_back(double(i + 1));
  polyline(acc_x, c.accuracy, y_acc, "#2471a3");
  for (size_t i = 0; i < c.accuracy.size(); ++i)
    add("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#2471a3\"/>\n", x_of(acc_x[i]), y_acc(c.accuracy[i]));
  add("<text x=\"%.0f\" y=\"%.0f\" fill=\"#c0392b\">training loss</text>\n", L + 8, T + 14);
  add("<text x=\"%.0f\" y=\"%.0f\" fill=\"#2471a3\" text-anchor=\"end\">test accuracy</text>\n", W - R - 8, T + 14);
  svg += "</svg>\n";
  kiln::io::write_file_atomic(path, {reinterpret_cast<const uint8_t*>(svg.data()), svg.size()});
}

}  // namespace fashion_mnist
