#pragma once
// What a run learns, decided once from the model and the data, and what depends on it: the
// summed loss of a batch and the items its mean is over, whether predictions are scored, and
// the figures a split's evaluation reports.
//
//   Classify  logits against class indices; one item per sample, or per target token for a
//             language model's token rows (padding counts nowhere); cross-entropy summed;
//             accuracy scored
//   Regress   outputs against float targets; the squared error summed over samples and outputs;
//             RMSE reported, nothing scored
//   OwnLoss   a user's module that computes its loss itself (forward(inputs, targets) ->
//             (loss sum, items), models/user_module.h); nothing scored
//
// A user's module may instead keep forward(inputs) -> logits and export loss(outputs,
// targets): it classifies or regresses as above, scored as above, with its own loss in place
// of bigbatch's. A classifier's training loss may be label-smoothed (--label-smoothing);
// evaluations report the plain cross-entropy, so that their loss, perplexity and bits per byte
// mean what they say.
//
// Whether the data are token rows (perplexity, bits per byte) is the data's to say, not the
// task's: a language model classifies tokens.
//
//   const Task task = Task::of(*model, data.train);
//   TaskLoss loss = task.loss(model, batch, Precision::Fp32, &tally);
//   loss.loss_sum.backward();
#include <torch/torch.h>

#include <cstdint>

#include "data/dataset.h"
#include "device/precision.h"
#include "task/prediction_tally.h"

namespace bigbatch {

// One batch's loss summed over its items (fp32 at least), and their count.
struct TaskLoss {
  torch::Tensor loss_sum;
  int64_t items = 0;
};

class Task {
 public:
  // (The configuration's --task, config/modes.h, names what the data are to be read as; this is
  // what the run then computes.)
  enum class Kind { Classify, Regress, OwnLoss };

  // The module's own loss when it computes one; else regression when `regression` (float
  // targets), else classification.
  static Task of(const torch::nn::Module& model, bool regression);
  static Task of(const torch::nn::Module& model, const TensorDataset& train) {
    return of(model, train.is_regression());
  }
  // This task with bigbatch's cross-entropy smoothed by `epsilon` (PyTorch's label_smoothing:
  // the target is (1 - epsilon) on the class and epsilon spread evenly over every logit).
  // Error (Config) for a task whose loss is not bigbatch's cross-entropy.
  Task with_label_smoothing(double epsilon) const;

  Kind kind() const { return kind_; }
  // Whether predictions are compared with the targets: accuracy is measured and reported.
  bool scores_predictions() const { return kind_ == Kind::Classify; }
  bool is_regression() const { return kind_ == Kind::Regress; }
  bool computes_own_loss() const { return kind_ == Kind::OwnLoss; }
  // The module's loss(outputs, targets) gives the loss (items still counted by bigbatch).
  bool uses_module_loss() const { return module_loss_; }
  double label_smoothing() const { return label_smoothing_; }

  // The forward pass of `batch` (on the model's device) under `precision`'s autocast and its
  // summed loss, computed in fp32 (a lower-precision output is widened first). `batch.items`
  // is the item count unless the module counts its own. Adds the loss, and a classifier's
  // predictions, to `tally` when one is given.
  TaskLoss loss(torch::nn::Sequential& model, const Batch& batch, Precision precision,
                PredictionTally* tally = nullptr) const;

  // Each sample's plain loss (no label smoothing) summed over its items, [rows] in fp32 at
  // least, and the batch's items: what a branch test pairs sample by sample. A module that sums
  // its own loss over the batch is run one sample at a time.
  TaskLoss sample_losses(torch::nn::Sequential& model, const Batch& batch,
                         Precision precision) const;

  // The items of a batch of `targets`: its samples, or a language model's target tokens (those
  // that are not kIgnoreTarget).
  static int64_t items_of(const torch::Tensor& targets);

 private:
  Task(Kind kind, bool module_loss) : kind_(kind), module_loss_(module_loss) {}
  Kind kind_;
  bool module_loss_ = false;
  double label_smoothing_ = 0.0;
};

}  // namespace bigbatch
