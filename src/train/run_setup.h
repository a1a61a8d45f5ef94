#pragma once
// What every command that builds a model from a TrainConfig shares (train, fit, verify): the
// model's shape from the data, the data loaded outside the memory budget, the checks of the
// metrics a run watches, the micro-batch fit. (The CPU's settings and memory accounting, which
// commands start with, are device/resources.h.)
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "config/train_config.h"
#include "data/dataset.h"
#include "models/models.h"
#include "train/micro_batch_fit.h"

namespace bigbatch {

ModelSpec model_spec(const TrainConfig& config, const TensorDataset& data);

// The configured model for this data: make_model, then --norm group's rewrite.
torch::nn::Sequential build_model(const TrainConfig& config, const TensorDataset& data);

// The weights' record of the sentencepiece model their token ids mean something in (its digest).
inline constexpr const char* kTokenizerDigestKey = "tokenizer_digest";
// Refuses weights (their metadata) trained with another sentencepiece model than the one
// `sentencepiece_model` names now, replaced under its name: its ids would decode into other
// pieces (sample) and be scored as other tokens (evaluate). Weights without the record (bytes,
// token files) pass. `source` names the run or the file in the message.
void check_tokenizer_of_weights(const std::map<std::string, std::string>& metadata,
                                const std::string& sentencepiece_model, const std::string& source);

// A user's module (models/user_module.h) meets the data before anything trains or is written:
// some parameter trains; one forward pass on two samples (in eval mode: no dropout, no random
// numbers drawn) gives outputs of the shape the data needs, with a gradient path to the
// parameters; a loss of its own is summed over the batch, not averaged; a stop target on
// accuracy or RMSE has predictions to score. Error (Model or Config) naming what is wrong.
class UserModuleImpl;
void check_user_module(UserModuleImpl& module, const TrainConfig& config,
                       const TensorDataset& data);

// --target (or --target-accuracy), --early-stop and --keep-best name metrics the run's
// evaluations will report: the split is there and the data has the metric (accuracy: labels;
// rmse: a regression; perplexity and bpb: token rows, bpb with known text bytes), and
// --early-stop and --keep-best decide on the test split only when it is named (test_loss).
// Checked before anything is written.
void check_watched_metrics(const TrainConfig& config, const DatasetSplits& data);
// --eval-every evaluates held-out splits: there is one (validation or test).
void check_eval_every(const TrainConfig& config, const DatasetSplits& data);
// The flag that set the stop target, for errors.
std::string stop_target_flag(const TrainConfig& config);

// Training mode with --bn-mode applied, and BatchNorm's running-statistics momentum corrected
// for `micro_steps` micro-batches per update (unless --no-bn-momentum-correction). Call again
// when the micro-steps per update change (an out-of-memory back-off). Returns the momentum
// per micro-step now in use (0 when the model has no BatchNorm).
double prepare_for_training(torch::nn::Sequential& model, const TrainConfig& config,
                            int64_t micro_steps);

// PyTorch's default BatchNorm momentum, which the models use.
inline constexpr double kBatchNormMomentum = 0.1;

struct ResolvedRun;
// --micro-batch-tokens on token rows: what cutting the first epoch's windows by tokens makes of
// them on rank 0 (ResolvedRun::token_cut), so the plan speaks of the micro-steps that will run;
// nothing otherwise.
void measure_token_cut(ResolvedRun& run, const TrainConfig& config, const TensorDataset& train);

// How a run's IDX images were normalised: as its config.toml records, or, for a run from
// before the normalisation was recorded, Fashion-MNIST's constants (what every IDX run used).
PixelNormalisation idx_pixels(const TrainConfig& config);

// The largest micro-batch a run of `config` over `world_size` ranks can train at: a rank's share
// of its global batch (of the largest the automatic batch may reach, of a schedule's smallest,
// which every step must serve; of the default batch when none is given). Probing past it
// measures sizes the run never uses.
int64_t largest_useful_micro_batch(const TrainConfig& config, int64_t world_size);

// The micro-batch search for this configuration, up to `max_micro_batch`, under
// --memory-budget (or the memory the system reports available); `on_probe` (when given) hears
// of each probe. `make_model` replaces build_model (a C++ program's own model).
FitResult measure_micro_batch_fit(const TrainConfig& config, const TensorDataset& data,
                                  int64_t max_micro_batch,
                                  const std::function<void(int64_t, bool)>& on_probe = {},
                                  const ModelFactory& make_model = {});

// The gpt's blocks can be recomputed (--recompute): more micro-batch for the same memory, the
// same weights, about 1.3x the compute. A fit chooses it when it is the only way any micro-batch
// fits, or when its fastest size is faster than the fastest without it by more than both
// measurements' noise (at least 3%): never for nothing.
struct FitChoice {
  FitResult plain;                      // as configured
  std::optional<FitResult> recomputed;  // with --recompute, when measured
  bool recompute = false;               // the choice: train with --recompute
  const FitResult& chosen() const { return recompute ? *recomputed : plain; }
};
enum class RecomputeProbe {
  Always,           // `bigbatch fit`: both tables, to compare
  WhenNothingFits,  // --micro-batch auto: only when the plain search finds no size
};
// measure_micro_batch_fit as configured, and for a gpt not yet recomputing, with --recompute as
// `when` says.
FitChoice measure_fit_choice(const TrainConfig& config, const TensorDataset& data,
                             int64_t max_micro_batch, RecomputeProbe when,
                             const std::function<void(int64_t, bool)>& on_probe = {},
                             const ModelFactory& make_model = {});

}  // namespace bigbatch
