#pragma once
// The set-up's rank-agreement stage: what every rank of a job must share, described and compared
// with rank 0's before the first collective whose tensors depend on it (dist/rank_agreement.h
// holds the torch-free description and its comparison). Ranks started differently stop
// together, each naming what differs.
//
//   check_ranks_agree(reducer, [&] { return describe_configuration(requested); });
//   const RankDescription digests = training_data_digests(data.train);
//   check_ranks_agree(reducer, [&] { return describe_data_and_model(requested, data, digests, m);
//   });
#include <torch/torch.h>

#include <functional>

#include "config/train_config.h"
#include "data/dataset.h"
#include "dist/gradient_reducer.h"
#include "dist/rank_agreement.h"

namespace bigbatch {

// What must be the same on every rank of a job: the configuration as resolved from flags and
// files (less what is a rank's own business: its progress display and thread count), then the
// data (sizes, sample shape, a digest of the training samples) and the model's parameters.
// Paths that only rank 0 uses (its run directory, its output file, the initial weights it
// broadcasts) are left out: machines may name their local copies differently.
RankDescription describe_configuration(const TrainConfig& requested);

// The training samples' contents, as digests named by what they cover: what a rank compares
// with rank 0, and what a resume compares with its checkpoint.
RankDescription training_data_digests(const TensorDataset& train);

RankDescription describe_data_and_model(const TrainConfig& requested, const DatasetSplits& data,
                                        const RankDescription& data_digests,
                                        torch::nn::Module& model);

// `describe` runs only in a job of several ranks: a single process has no one to agree with,
// and the description digests the whole training set.
void check_ranks_agree(GradientReducer& reducer, const std::function<RankDescription()>& describe);

}  // namespace bigbatch
