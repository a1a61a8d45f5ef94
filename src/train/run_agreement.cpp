#include "train/run_agreement.h"

#include <cstring>

#include "config/option_table.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "data/token_rows.h"
#include "models/user_module.h"

namespace bigbatch {

RankDescription describe_configuration(const TrainConfig& requested) {
  RankDescription out;
  for (const auto& line : split(render_toml_config(requested), '\n')) {
    const auto equals = line.find(" = ");
    if (equals == std::string::npos)
      continue;
    const std::string key = line.substr(0, equals);
    if (key != "progress" && key != "threads" && key != "out" && key != "save-weights" &&
        key != "init-weights")
      out.emplace_back(key, line.substr(equals + 3));
  }
  return out;
}

RankDescription training_data_digests(const TensorDataset& train) {
  RankDescription out;
  if (train.is_tokens()) {
    // Every training row's tokens, read as a batch reads them, and where each row lies.
    const TokenRows& rows = *train.rows;
    out.emplace_back("training samples", std::to_string(train.size()) + " rows of " +
                                             std::to_string(rows.width) + " tokens");
    DataDigest tokens;
    std::vector<int64_t> row(size_t(rows.width) + 1);
    for (int64_t r = 0; r < rows.rows(); ++r) {
      // All of the row's tokens: its inputs and the last target.
      const int64_t count = rows.lengths[size_t(r)] + 1;
      rows.source->read(rows.starts[size_t(r)], count, row.data());
      tokens.add(row.data(), size_t(count) * sizeof(int64_t));
    }
    out.emplace_back("training tokens", tokens.value());
    out.emplace_back("training rows",
                     data_digest(rows.starts.data(), rows.starts.size() * sizeof(int64_t)) +
                         data_digest(rows.lengths.data(), rows.lengths.size() * sizeof(int64_t)));
    return out;
  }
  const auto digest = [](const torch::Tensor& t) {
    const torch::Tensor c = t.contiguous();
    return data_digest(c.data_ptr(), c.nbytes());
  };
  out.emplace_back("training samples", std::to_string(train.size()) + " of shape " +
                                           c10::str(train.inputs.sizes().slice(1)));
  out.emplace_back("training inputs", digest(train.inputs));
  out.emplace_back("training targets", digest(train.targets));
  return out;
}

RankDescription describe_data_and_model(const TrainConfig& requested, const DatasetSplits& data,
                                        const RankDescription& data_digests,
                                        torch::nn::Module& model) {
  RankDescription out;
  if (is_torchscript_model(requested.model))
    out.emplace_back("model file", file_digest(torchscript_path(requested.model)));
  out.insert(out.end(), data_digests.begin(), data_digests.end());
  out.emplace_back("validation samples", std::to_string(data.validation.size()));
  out.emplace_back("test samples", std::to_string(data.test.size()));
  for (const auto& named : model.named_parameters())
    out.emplace_back("parameter " + named.key(), c10::str(named.value().sizes()));
  return out;
}

void check_ranks_agree(GradientReducer& reducer, const std::function<RankDescription()>& describe) {
  if (reducer.world_size() == 1)
    return;
  const RankDescription description = describe();
  // Rank 0's text: its length first, so every rank can receive it.
  std::string text = encode_description(description);
  std::vector<torch::Tensor> length = {torch::tensor({static_cast<int64_t>(text.size())})};
  reducer.broadcast_from_first_rank(length);
  const int64_t size = length[0].item<int64_t>();
  std::vector<torch::Tensor> bytes = {torch::zeros({size}, torch::kUInt8)};
  if (reducer.rank() == 0)
    std::memcpy(bytes[0].data_ptr(), text.data(), text.size());
  reducer.broadcast_from_first_rank(bytes);
  const std::string reference(static_cast<const char*>(bytes[0].data_ptr()),
                              static_cast<size_t>(size));
  const auto differences = description_differences(description, decode_description(reference));
  // Every rank learns which ranks differ, so that all of them stop, not only those.
  torch::Tensor differing = torch::zeros({reducer.world_size()}, torch::kInt64);
  differing[reducer.rank()] = differences.empty() ? 0 : 1;
  reducer.sum_over_ranks(differing);
  std::vector<std::string> ranks;
  for (int64_t rank = 0; rank < reducer.world_size(); ++rank) {
    if (differing[rank].item<int64_t>() != 0)
      ranks.push_back(std::to_string(rank));
  }
  if (ranks.empty())
    return;
  const std::string hint = "start every rank with the same flags, config file, data and model file";
  if (!differences.empty()) {
    // The first few differences: one setting explains the parameter shapes that follow it.
    constexpr size_t kShown = 3;
    std::vector<std::string> shown(differences.begin(),
                                   differences.begin() + std::min(differences.size(), kShown));
    if (differences.size() > kShown)
      shown.push_back("and " + std::to_string(differences.size() - kShown) + " more");
    throw Error(
        ErrorKind::Distributed,
        "rank " + std::to_string(reducer.rank()) + " differs from rank 0: " + join(shown, "; "),
        hint);
  }
  throw Error(ErrorKind::Distributed,
              "rank " + std::to_string(reducer.rank()) + ": rank(s) " + join(ranks, ", ") +
                  " were started differently from rank 0 (their messages say how)",
              hint);
}

}  // namespace bigbatch
