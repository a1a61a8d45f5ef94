#include "train/evaluate.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "train/prediction_tally.h"

namespace bigbatch {

EvalResult evaluate(torch::nn::Sequential& model, const TensorDataset& data, int64_t batch_size,
                    Precision precision) {
  EvalResult result;
  if (data.size() == 0)
    return result;
  // Each layer's own mode comes back afterwards (a frozen BatchNorm stays in eval mode).
  std::vector<std::pair<std::shared_ptr<torch::nn::Module>, bool>> modes;
  for (const auto& module : model->modules(/*include_self=*/true))
    modes.emplace_back(module, module->is_training());
  model->eval();
  {
    c10::InferenceMode inference;
    PredictionTally tally;
    for (int64_t begin = 0; begin < data.size(); begin += batch_size) {
      const int64_t end = std::min(data.size(), begin + batch_size);
      const auto batch = data.slice(begin, end);
      torch::Tensor logits;
      {
        AutocastScope autocast(precision);
        logits = model->forward(batch.inputs).to(torch::kFloat32);
      }
      tally.add(logits,
                torch::nn::functional::cross_entropy(
                    logits, batch.targets,
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)),
                batch.targets);
    }
    result.items = data.size();
    result.loss = tally.loss_sum() / double(result.items);
    result.accuracy = double(tally.correct()) / double(result.items);
  }
  for (const auto& [module, training] : modes)
    module->train(training);
  return result;
}

}  // namespace bigbatch
