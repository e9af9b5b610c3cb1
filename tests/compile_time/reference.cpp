// The compile-time budget's yardstick: a fixed translation unit that includes nothing of kiln (the standard
// library, Highway and Eigen, which kiln builds on; one Eigen product, a sort, a map), compiled like the others.
// scripts/compile_time.py scales every limit by its time on the machine at hand against its time on the machine
// the limits were set on (docs/performance.md), so the budget follows kiln, not the CI machine's speed.
#include <hwy/highway.h>

#include <Eigen/Dense>
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

float reference_work(const float* a, int n) {
  const Eigen::Map<const Eigen::MatrixXf> m(a, n, n);
  const Eigen::MatrixXf p = m * m.transpose();
  std::vector<float> v(p.data(), p.data() + p.size());
  std::sort(v.begin(), v.end(), std::greater<float>());
  std::map<std::string, std::shared_ptr<float>> table;
  for (float x : v) {
    std::ostringstream key;
    key << x;
    table.emplace(key.str(), std::make_shared<float>(x));
  }
  return v.front() + float(table.size());
}
