#pragma once
// The equivalence tests' measure: the max over tensors of ||a - b|| / ||b||, relative to each
// tensor's own scale, so small and large layers count alike. BIGBATCH_TEST_VERBOSE=1 prints
// every tensor's figures.
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace bigbatch {

inline double max_relative_difference(const std::vector<torch::Tensor>& a,
                                      const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = b[i].norm().item<double>();
    const double diff = (a[i] - b[i]).norm().item<double>();
    if (std::getenv("BIGBATCH_TEST_VERBOSE"))
      std::printf("  tensor %zu: |b| %.3g  |a-b| %.3g\n", i, scale, diff);
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  }
  return worst;
}

}  // namespace bigbatch
