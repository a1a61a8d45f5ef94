#pragma once
// Ranks of one job must be started alike: the same configuration, the same data, the same
// model. A rank started with another --hidden or --global-batch would otherwise crash inside a
// collective (gloo aborts the process on tensors of different sizes) or train with a wrong
// divisor. At set-up every rank compares its description with rank 0's (one broadcast of rank
// 0's text, one sum of the verdicts), so all ranks stop together, before anything is written,
// and each differing rank names what differs.
//
// This file is the torch-free part (the description and its comparison); train/training_run.cpp
// exchanges it.
//
//   description_differences({{"hidden", "[64]"}}, {{"hidden", "[32]"}});
//   // {"hidden = [64] here, [32] on rank 0"}
#include <string>
#include <utility>
#include <vector>

namespace bigbatch {

using RankDescription = std::vector<std::pair<std::string, std::string>>;  // (key, value)

// The lines of `description` that differ from `reference` ("hidden = [64] here, [32] on rank
// 0"), keys missing on either side included. Empty when they agree. Torch-free, for tests.
std::vector<std::string> description_differences(const RankDescription& description,
                                                 const RankDescription& reference);

// The text form sent between ranks ("key\tvalue\n" lines) and back.
std::string encode_description(const RankDescription& description);
RankDescription decode_description(const std::string& text);

}  // namespace bigbatch
