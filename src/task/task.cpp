#include "task/task.h"

#include "core/error.h"
#include "core/text.h"
#include "data/text_corpus.h"
#include "models/user_module.h"
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
  const auto* module = dynamic_cast<const UserModuleImpl*>(&model);
  if (module && module->computes_loss())
    return Task(Task::Kind::OwnLoss, false);
  return Task(regression ? Task::Kind::Regress : Task::Kind::Classify,
              module && module->has_loss_method());
}

Task Task::with_label_smoothing(double epsilon) const {
  if (epsilon == 0.0)
    return *this;
  const std::string flag = "--label-smoothing " + format_significant(epsilon);
  check_config(kind_ != Kind::Regress, flag + " smooths class targets, but this run regresses",
               "drop " + flag + ", or give integer class labels");
  check_config(kind_ != Kind::OwnLoss && !module_loss_,
               flag + " smooths bigbatch's cross-entropy, but the module computes its own loss",
               "smooth inside the module's loss (F.cross_entropy(..., label_smoothing=" +
                   format_significant(epsilon) + ")), or drop " + flag);
  Task smoothed = *this;
  smoothed.label_smoothing_ = epsilon;
  return smoothed;
}

TaskLoss Task::loss(torch::nn::Sequential& model, const Batch& batch, Precision precision,
                    PredictionTally* tally) const {
  const c10::DeviceType device = batch.inputs.device().type();
  TaskLoss result;
  if (module_loss_) {
    ScoredLoss scored;
    {
      AutocastScope autocast(precision, device);
      scored = as_user_module(*model)->forward_and_loss(batch.inputs, batch.targets);
    }
    result.loss_sum = at_least_fp32(scored.loss_sum);
    result.items = batch.items;
    if (tally) {
      if (kind_ == Task::Kind::Classify) {
        const PredictionRows rows = prediction_rows(at_least_fp32(scored.logits), batch.targets);
        tally->add(rows.logits, result.loss_sum, rows.targets);
      } else {
        tally->add_loss(result.loss_sum);
      }
    }
    return result;
  }
  if (kind_ == Task::Kind::OwnLoss) {
    ModuleLoss own;
    {
      AutocastScope autocast(precision, device);
      own = as_user_module(*model)->forward_loss(batch.inputs, batch.targets);
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
  result.loss_sum = summed_cross_entropy(rows, label_smoothing_);
  if (tally)
    tally->add(rows.logits, result.loss_sum, rows.targets);
  return result;
}

TaskLoss Task::sample_losses(torch::nn::Sequential& model, const Batch& batch,
                             Precision precision) const {
  const Task plain(kind_, module_loss_);
  TaskLoss result;
  if (module_loss_ || kind_ == Kind::OwnLoss) {
    std::vector<torch::Tensor> each;
    for (int64_t row = 0; row < batch.size(); ++row) {
      Batch one{batch.inputs.slice(0, row, row + 1), batch.targets.slice(0, row, row + 1), 0};
      one.items = items_of(one.targets);
      const TaskLoss loss = plain.loss(model, one, precision);
      each.push_back(loss.loss_sum.reshape({}));
      result.items += loss.items;
    }
    result.loss_sum = torch::stack(each);
    return result;
  }
  torch::Tensor output;
  {
    AutocastScope autocast(precision, batch.inputs.device().type());
    output = model->forward(batch.inputs);
  }
  output = at_least_fp32(output);
  result.items = batch.items;
  if (kind_ == Kind::Regress) {
    const torch::Tensor error =
        (output.reshape(batch.targets.sizes()) - batch.targets.to(output.scalar_type())).square();
    result.loss_sum = error.dim() > 1 ? error.flatten(1).sum(1) : error;
    return result;
  }
  // One prediction per sample, or per position of a token row (padding ignored: 0).
  const PredictionRows rows = prediction_rows(output, batch.targets);
  const torch::Tensor each =
      torch::nn::functional::cross_entropy(rows.logits, rows.targets,
                                           torch::nn::functional::CrossEntropyFuncOptions()
                                               .reduction(torch::kNone)
                                               .ignore_index(kIgnoreTarget));
  result.loss_sum = each.reshape({batch.size(), -1}).sum(1);
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
