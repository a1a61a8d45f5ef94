#include "task/task.h"

#include "data/text_corpus.h"
#include "models/scripted_model.h"
#include "task/prediction_rows.h"

namespace bigbatch {

namespace {

// The loss and its sum in fp32: bf16 (autocast) or half outputs are widened; fp32 and fp64
// stay as they are.
torch::Tensor at_least_fp32(const torch::Tensor& t) {
  const auto type = t.scalar_type();
  return type == torch::kBFloat16 || type == torch::kHalf ? t.to(torch::kFloat32) : t;
}

}  // namespace

Task Task::of(const torch::nn::Module& model, bool regression) {
  const auto* scripted = dynamic_cast<const ScriptedModelImpl*>(&model);
  if (scripted && scripted->computes_loss())
    return Task(Task::Kind::OwnLoss);
  return Task(regression ? Task::Kind::Regress : Task::Kind::Classify);
}

TaskLoss Task::loss(torch::nn::Sequential& model, const Batch& batch, Precision precision,
                    PredictionTally* tally) const {
  const c10::DeviceType device = batch.inputs.device().type();
  TaskLoss result;
  if (kind_ == Task::Kind::OwnLoss) {
    ModuleLoss own;
    {
      AutocastScope autocast(precision, device);
      own = as_scripted(*model)->forward_loss(batch.inputs, batch.targets);
    }
    result.loss_sum = at_least_fp32(own.loss_sum);
    result.items = own.items;
    if (tally)
      tally->add_loss(result.loss_sum);
    return result;
  }
  torch::Tensor output;
  {
    AutocastScope autocast(precision, device);
    output = model->forward(batch.inputs);
  }
  output = at_least_fp32(output);
  result.items = batch.items;
  if (kind_ == Task::Kind::Regress) {
    result.loss_sum = summed_squared_error(output, batch.targets);
    if (tally)
      tally->add_loss(result.loss_sum);
    return result;
  }
  const PredictionRows rows = prediction_rows(output, batch.targets);
  result.loss_sum = summed_cross_entropy(rows);
  if (tally)
    tally->add(rows.logits, result.loss_sum, rows.targets);
  return result;
}

int64_t Task::items_of(const torch::Tensor& targets) {
  // Classification and regression: one item per sample; token targets: those that are not
  // padding.
  return targets.dim() == 1 || targets.is_floating_point()
             ? targets.size(0)
             : targets.ne(kIgnoreTarget).sum().item<int64_t>();
}

}  // namespace bigbatch
