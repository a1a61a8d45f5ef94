#include "dist/rank_agreement.h"

#include <gtest/gtest.h>

namespace bigbatch {
namespace {

TEST(RankAgreement, NamesEveryDifferenceAgainstRankZero) {
  const RankDescription zero = {{"hidden", "[ 32 ]"}, {"seed", "1"}, {"dataset", "fashion-mnist"}};
  EXPECT_TRUE(description_differences(zero, zero).empty());
  const RankDescription one = {{"hidden", "[ 64 ]"}, {"seed", "1"}, {"lr", "0.1"}};
  EXPECT_EQ(description_differences(one, zero),
            (std::vector<std::string>{"hidden = [ 64 ] here, [ 32 ] on rank 0",
                                      "lr = 0.1 here, unset on rank 0",
                                      "dataset unset here, fashion-mnist on rank 0"}));
}

TEST(RankAgreement, TheTextFormRoundTrips) {
  const RankDescription d = {
      {"model", "torchscript:a b.pt"}, {"parameter 1.weight", "[32, 784]"}, {"empty", ""}};
  EXPECT_EQ(decode_description(encode_description(d)), d);
}

}  // namespace
}  // namespace bigbatch
