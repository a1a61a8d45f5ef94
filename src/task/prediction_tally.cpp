#include "task/prediction_tally.h"

#include "stats/prediction_counts.h"

namespace bigbatch {

namespace {
// What the host loop reads directly: fp32 logits and loss in CPU memory, row-major, and int64
// targets (the bf16 autocast path hands the loss fp32 logits too).
bool readable_on_host(const torch::Tensor& logits, const torch::Tensor& summed_loss,
                      const torch::Tensor& targets) {
  return logits.device().is_cpu() && summed_loss.device().is_cpu() && targets.device().is_cpu() &&
         logits.dim() == 2 && logits.scalar_type() == torch::kFloat32 && logits.is_contiguous() &&
         summed_loss.numel() == 1 && summed_loss.scalar_type() == torch::kFloat32 &&
         targets.dim() == 1 && targets.scalar_type() == torch::kInt64 && targets.is_contiguous() &&
         targets.size(0) == logits.size(0);
}
}  // namespace

void PredictionTally::add(const torch::Tensor& logits, const torch::Tensor& summed_loss,
                          const torch::Tensor& targets) {
  if (readable_on_host(logits, summed_loss, targets)) {
    host_loss_sum_ += double(*summed_loss.data_ptr<float>());
    host_correct_ += count_correct_predictions(logits.data_ptr<float>(), logits.size(0),
                                               logits.size(1), targets.data_ptr<int64_t>());
    return;
  }
  torch::NoGradGuard no_grad;
  if (!device_loss_sum_.defined()) {
    device_loss_sum_ = torch::zeros({}, summed_loss.options().dtype(torch::kFloat64));
    device_correct_ = torch::zeros({}, targets.options().dtype(torch::kInt64));
  }
  device_loss_sum_.add_(summed_loss.detach().reshape({}).to(torch::kFloat64));
  device_correct_.add_(logits.detach().argmax(1).eq(targets).sum());
}

void PredictionTally::add_loss(const torch::Tensor& summed_loss) {
  torch::NoGradGuard no_grad;
  if (!summed_loss.is_cuda()) {
    host_loss_sum_ += summed_loss.detach().item<double>();
    return;
  }
  if (!device_loss_sum_.defined()) {
    device_loss_sum_ = torch::zeros({}, summed_loss.options().dtype(torch::kFloat64));
    device_correct_ = torch::zeros({}, summed_loss.options().dtype(torch::kInt64));
  }
  device_loss_sum_.add_(summed_loss.detach().reshape({}).to(torch::kFloat64));
}

double PredictionTally::loss_sum() const {
  return host_loss_sum_ + (device_loss_sum_.defined() ? device_loss_sum_.item<double>() : 0.0);
}

int64_t PredictionTally::correct() const {
  return host_correct_ + (device_correct_.defined() ? device_correct_.item<int64_t>() : 0);
}

void PredictionTally::reset(double loss_sum, int64_t correct) {
  host_loss_sum_ = loss_sum;
  host_correct_ = correct;
  if (device_loss_sum_.defined()) {
    device_loss_sum_.zero_();
    device_correct_.zero_();
  }
}

}  // namespace bigbatch
