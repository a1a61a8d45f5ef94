// The sweep's grid: batch lists (with geometric runs), word lists, cells and their names.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "sweep/sweep_grid.h"

namespace bigbatch {
namespace {

std::string list_error(const std::string& text) {
  try {
    parse_batch_list(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SweepGrid, BatchLists) {
  EXPECT_EQ(parse_batch_list("256,1024"), (std::vector<int64_t>{256, 1024}));
  EXPECT_EQ(parse_batch_list("32,64,...,4096"),
            (std::vector<int64_t>{32, 64, 128, 256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(parse_batch_list("16, 64, ..., 1024"), (std::vector<int64_t>{16, 64, 256, 1024}));
  EXPECT_EQ(parse_batch_list("100"), (std::vector<int64_t>{100}));
  EXPECT_NE(list_error("32,64,...,100").find("does not reach 100"), std::string::npos);
  EXPECT_NE(list_error("32,...,4096").find("needs two sizes before"), std::string::npos);
  EXPECT_NE(list_error("32,48,...,4096").find("not a whole number"), std::string::npos);
  EXPECT_NE(list_error("64,32").find("not increasing"), std::string::npos);
  EXPECT_NE(list_error("32,big").find("'big'"), std::string::npos);
  EXPECT_NE(list_error("").find("is not a batch size"), std::string::npos);
  EXPECT_NE(list_error("1,2,...,4294967296").find("not a batch size"), std::string::npos);
}

TEST(SweepGrid, CellsAreBatchMajorWithSortableNames) {
  SweepGrid grid;
  grid.global_batches = {64, 1024};
  grid.lr_scalings = parse_word_list("none,linear", "--lr-scaling", [](const std::string&) {});
  grid.warmups = {"0u", "2.5e"};
  const auto cells = grid.cells();
  ASSERT_EQ(cells.size(), 8u);
  EXPECT_EQ(cells.front().name(), "gb000064-none-w0u");
  EXPECT_EQ(cells[3].name(), "gb000064-linear-w2_5e");
  EXPECT_EQ(cells.back().global_batch, 1024);
  EXPECT_EQ(cells[1].series(), "none, warmup 2.5e");
  EXPECT_THROW(parse_word_list("none,,linear", "--lr-scaling", [](const std::string&) {}), Error);
  // Two cells of one name would share one run directory.
  EXPECT_THROW(parse_word_list("linear,none,linear", "--lr-scaling", [](const std::string&) {}),
               Error);
}

TEST(SweepGrid, CellsAtTheReferenceBatchShareOneRun) {
  // Issue 35: at the batch the rate is tuned at, none, linear, sqrt and auto all train at the
  // base rate; AdaScale keeps its own run (two micro-steps, its gain measured).
  SweepGrid grid;
  grid.global_batches = {64, 256};
  grid.lr_scalings = {"none", "linear", "adascale", "sqrt"};
  grid.warmups = {"0u", "2e"};
  grid.reference_batch = 64;
  const auto cells = grid.cells();
  ASSERT_EQ(cells.size(), 16u);
  std::vector<std::string> shared;
  for (const SweepCell& cell : cells) {
    if (!cell.same_as.empty())
      shared.push_back(cell.name() + " -> " + cell.run_name());
    else
      EXPECT_EQ(cell.run_name(), cell.name());
  }
  EXPECT_EQ(shared, (std::vector<std::string>{"gb000064-linear-w0u -> gb000064-none-w0u",
                                              "gb000064-linear-w2e -> gb000064-none-w2e",
                                              "gb000064-sqrt-w0u -> gb000064-none-w0u",
                                              "gb000064-sqrt-w2e -> gb000064-none-w2e"}));
  grid.reference_batch = 32;  // --lr-ref-batch off the grid: every cell is its own run
  for (const SweepCell& cell : grid.cells())
    EXPECT_TRUE(cell.same_as.empty()) << cell.name();
}

TEST(SweepGrid, AdaScaleCellsKeepTwoMicroStepsPerUpdate) {
  const SweepCell linear_small{16, "linear", "0u"};
  const SweepCell linear_large{256, "linear", "0u"};
  EXPECT_EQ(linear_small.micro_batch(32), 16);  // never above the global batch
  EXPECT_EQ(linear_large.micro_batch(32), 32);
  const SweepCell adascale_small{32, "adascale", "0u"};
  const SweepCell adascale_large{256, "adascale", "0u"};
  const SweepCell adascale_odd{33, "adascale", "0u"};
  EXPECT_EQ(adascale_small.micro_batch(32), 16);  // two micro-steps: the gain's two batch sizes
  EXPECT_EQ(adascale_large.micro_batch(32), 32);
  EXPECT_EQ(adascale_odd.micro_batch(64), 16);  // 16 + 16 + 1: uneven, still exact
}

}  // namespace
}  // namespace bigbatch
