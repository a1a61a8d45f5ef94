#include "stats/loss_spikes.h"

#include <algorithm>
#include <cmath>

namespace bigbatch {

double recent_loss_median(const std::vector<double>& recent) {
  if (recent.size() < kLossesBeforeSpikeGuard)
    return 0;
  std::vector<double> sorted = recent;
  std::sort(sorted.begin(), sorted.end());
  if (!(sorted.front() > 0) || !std::isfinite(sorted.back()))
    return 0;
  const size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

bool is_loss_spike(const std::vector<double>& recent, double loss, double factor) {
  if (factor <= 0 || !std::isfinite(loss))
    return false;
  const double median = recent_loss_median(recent);
  return median > 0 && loss > factor * median;
}

void remember_applied_loss(std::vector<double>& recent, double loss) {
  recent.push_back(loss);
  if (recent.size() > kRecentLosses)
    recent.erase(recent.begin(), recent.end() - kRecentLosses);
}

}  // namespace bigbatch
