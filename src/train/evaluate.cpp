#include "train/evaluate.h"

#include "models/user_module.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "device/device.h"
#include "task/prediction_tally.h"
#include "task/task.h"

namespace bigbatch {

int64_t evaluation_rows_in_training(const TensorDataset& train, int64_t micro_batch,
                                    int64_t micro_batch_tokens, bool memory_budget) {
  const int64_t rows = evaluation_rows(train);
  if (!memory_budget)
    return rows;
  const int64_t training_rows = train.is_tokens() && micro_batch_tokens > 0
                                    ? std::max<int64_t>(1, micro_batch_tokens / train.width())
                                    : micro_batch;
  return std::min(rows, training_rows);
}

namespace {

// The model in eval mode (BatchNorm on its running statistics, no dropout) and no autograd
// graph; each layer's own mode comes back afterwards (a frozen BatchNorm stays in eval mode).
class InferenceScope {
 public:
  explicit InferenceScope(torch::nn::Sequential& model) {
    for (const auto& module : model->modules(/*include_self=*/true))
      modes_.emplace_back(module, module->is_training());
    model->eval();
  }
  ~InferenceScope() {
    for (const auto& [module, training] : modes_)
      module->train(training);
  }
  InferenceScope(const InferenceScope&) = delete;
  InferenceScope& operator=(const InferenceScope&) = delete;

 private:
  std::vector<std::pair<std::shared_ptr<torch::nn::Module>, bool>> modes_;
  c10::InferenceMode inference_;
};

}  // namespace

SampleLossList sample_losses(torch::nn::Sequential& model, const TensorDataset& data,
                             int64_t batch_size, Precision precision) {
  SampleLossList result;
  InferenceScope inference(model);
  const Task task = Task::of(*model, data);
  const torch::Device device = model_device(*model);
  result.per_sample.reserve(size_t(data.size()));
  for (int64_t begin = 0; begin < data.size(); begin += batch_size) {
    const int64_t end = std::min(data.size(), begin + batch_size);
    const TaskLoss loss =
        task.sample_losses(model, to_device(batch_of(data, begin, end), device), precision);
    const torch::Tensor values = loss.loss_sum.to(torch::kCPU, torch::kFloat64).contiguous();
    const double* first = values.data_ptr<double>();
    result.per_sample.insert(result.per_sample.end(), first, first + values.numel());
    result.items += loss.items;
  }
  return result;
}

EvalResult evaluate(torch::nn::Sequential& model, const TensorDataset& data, int64_t batch_size,
                    Precision precision) {
  EvalResult result;
  if (data.size() == 0)
    return result;
  {
    InferenceScope inference(model);
    PredictionTally tally;
    const Task task = Task::of(*model, data);
    int64_t items = 0;
    const torch::Device device = model_device(*model);
    for (int64_t begin = 0; begin < data.size(); begin += batch_size) {
      const int64_t end = std::min(data.size(), begin + batch_size);
      const Batch batch = to_device(batch_of(data, begin, end), device);
      items += task.loss(model, batch, precision, &tally).items;
    }
    // The task counts each batch's items (a module with its own loss counts them itself).
    result.items = items;
    result.loss_sum = tally.loss_sum();
    result.loss = result.items > 0 ? result.loss_sum / double(result.items) : 0.0;
    result.has_accuracy = task.scores_predictions();
    result.accuracy = result.has_accuracy ? double(tally.correct()) / double(result.items) : 0.0;
    result.is_regression = task.is_regression();
    if (result.is_regression && result.items > 0) {
      // Over every output of every sample: the error in the targets' own units.
      result.rmse = std::sqrt(result.loss_sum / double(result.items * data.outputs()));
    }
    if (data.is_tokens()) {
      // Bits per byte of text: the summed loss in bits over the text bytes predicted (the
      // end-of-text targets carry loss but are not text).
      int64_t bytes = 0;
      for (int64_t b : data.bytes)
        bytes += b;
      result.has_bits_per_byte = bytes > 0;
      result.bits_per_byte = bytes > 0 ? result.loss_sum / std::log(2.0) / double(bytes) : 0;
    }
  }
  return result;
}

nlohmann::json eval_record(const std::string& prefix, const EvalResult& r, bool tokens) {
  nlohmann::json record = {{prefix + "_loss", r.loss}};
  if (r.has_accuracy)  // a module with its own loss has no predictions to score
    record[prefix + "_accuracy"] = r.accuracy;
  if (r.is_regression)
    record[prefix + "_rmse"] = r.rmse;
  if (tokens) {
    record[prefix + "_perplexity"] = std::exp(r.loss);
    if (r.has_bits_per_byte)  // text whose bytes are known (not token files)
      record[prefix + "_bpb"] = r.bits_per_byte;
  }
  return record;
}

nlohmann::json HeldOutEvaluation::figures(int64_t step, torch::nn::Sequential& model,
                                          const DatasetSplits& data, int64_t batch_size,
                                          Precision precision) {
  if (evaluated_step_ == step)
    return evaluated_;
  // Tests: a signal that arrives while the model is evaluated, at a known moment.
  if (const char* raise_signal = std::getenv("BIGBATCH_SIGNAL_AT_EVALUATION_FOR_TESTS"))
    std::raise(std::atoi(raise_signal));
  const bool tokens = data.train.is_tokens();
  nlohmann::json figures = nlohmann::json::object();
  if (data.validation.size() > 0) {
    last_validation_ = evaluate(model, data.validation, batch_size, precision);
    figures.update(eval_record("val", last_validation_, tokens));
  }
  if (data.test.size() > 0) {  // text corpora have no test split
    last_test_ = evaluate(model, data.test, batch_size, precision);
    figures.update(eval_record("test", last_test_, tokens));
  }
  evaluated_step_ = step;
  evaluated_ = figures;
  return figures;
}

}  // namespace bigbatch
