#include "checkpoint/checkpoint_paths.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

class CheckpointPathsTest : public ::testing::Test {
 protected:
  fs::path run_ = fs::temp_directory_path() / ("bigbatch_ckpt_paths_" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(run_ / "checkpoints"); }
  void TearDown() override { fs::remove_all(run_); }
  void make(const std::string& name, bool complete) {
    fs::create_directories(run_ / "checkpoints" / name);
    if (complete)
      std::ofstream(run_ / "checkpoints" / name / "state.json") << "{}";
  }
};

TEST_F(CheckpointPathsTest, NamesAreZeroPadded) {
  EXPECT_EQ(checkpoint_directory_name(123), "step_000123");
  EXPECT_EQ(checkpoint_directory_name(123, 5), "step_000123_0005");
}

TEST_F(CheckpointPathsTest, FindsTheNewestCompleteCheckpoint) {
  make("step_000010", true);
  make("step_000100", true);
  make("step_000200", false);         // a crash before state.json: not complete
  make(".tmp-step_000300-77", true);  // an unfinished write: never taken
  make("step_000100_0003", true);     // three micro-steps into update 101: the newest
  make("step_abc", true);             // not ours
  const auto all = list_checkpoints(run_.string());
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].first, 10 * 1000000);
  EXPECT_EQ(fs::path(all[1].second).filename(), "step_000100");
  const std::string latest = find_latest_checkpoint(run_.string());
  EXPECT_EQ(fs::path(latest).filename(), "step_000100_0003");
  EXPECT_EQ(find_latest_checkpoint(latest), latest);
  EXPECT_EQ(fs::path(run_directory_of_checkpoint(latest)), run_);
  EXPECT_EQ(fs::path(run_directory_of_checkpoint(latest + "/")), run_);
}

TEST_F(CheckpointPathsTest, LeftoversOfInterruptedWritesAndPruningsAreRemoved) {
  make("step_000010", true);
  make(".tmp-step_000020-77", false);   // a write killed before its rename
  make(".trash-step_000005-77", true);  // a pruning killed before its removal finished
  EXPECT_EQ(remove_checkpoint_leftovers(run_.string()), 2);
  EXPECT_TRUE(fs::exists(run_ / "checkpoints" / "step_000010" / "state.json"));
  EXPECT_FALSE(fs::exists(run_ / "checkpoints" / ".tmp-step_000020-77"));
  EXPECT_FALSE(fs::exists(run_ / "checkpoints" / ".trash-step_000005-77"));
  EXPECT_EQ(remove_checkpoint_leftovers(run_.string()), 0);
  EXPECT_EQ(remove_checkpoint_leftovers((run_ / "missing").string()), 0);
}

TEST_F(CheckpointPathsTest, NoCheckpointIsAClearError) {
  EXPECT_THROW(find_latest_checkpoint(run_.string()), Error);
  EXPECT_THROW(find_latest_checkpoint((run_ / "missing").string()), Error);
}

}  // namespace
}  // namespace bigbatch
