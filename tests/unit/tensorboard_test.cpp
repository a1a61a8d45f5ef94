// TensorBoard event files: the TFRecord framing and its CRC-32C against published vectors, an
// Event's bytes field by field, which record keys become which tags, and the files a run
// directory keeps. tests/e2e/test_tensorboard.py reads a run's events back with TensorBoard's own
// reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/append_file.h"
#include "core/files.h"
#include "io/tfrecord.h"
#include "report/metrics_writer.h"
#include "report/tensorboard_log.h"

namespace bigbatch {
namespace {

uint32_t crc_of(const std::string& bytes) {
  return crc32c(bytes.data(), bytes.size());
}

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values)
    out += static_cast<char>(v);
  return out;
}

TEST(Crc32c, MatchesPublishedCheckValues) {
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);  // the catalogue's check value
  EXPECT_EQ(crc_of(""), 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i)
    ascending += static_cast<char>(i);
  EXPECT_EQ(crc_of(ascending), 0x46DD794Eu);
  // Continuing a CRC over a second part equals the CRC of the whole.
  EXPECT_EQ(crc32c("56789", 5, crc32c("1234", 4)), 0xE3069283u);
}

TEST(TfRecord, FramesLengthDataAndTheirMaskedChecksums) {
  const std::string data = "abc";
  const std::string record = tfrecord_frame(data);
  ASSERT_EQ(record.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(record.substr(0, 8), bytes({3, 0, 0, 0, 0, 0, 0, 0}));
  const auto u32_at = [&](size_t offset) {
    uint32_t value = 0;
    std::memcpy(&value, record.data() + offset, 4);
    return value;
  };
  const uint32_t length_crc = crc32c(record.data(), 8);
  EXPECT_EQ(u32_at(8), ((length_crc >> 15) | (length_crc << 17)) + 0xa282ead8u);
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(u32_at(15), masked_crc32c("abc", 3));
  // The mask of an empty record's CRC (0) is the constant itself.
  EXPECT_EQ(masked_crc32c("", 0), 0xa282ead8u);
}

TEST(TensorBoardEvents, EncodeEventSummaryAndValueFieldByField) {
  const std::string event = scalar_event(1.5, 3, {{"a", 3, 0.5}});
  const std::string expected =
      bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F})  // wall_time = 1.5, double
      + bytes({0x10, 3})                           // step = 3, varint
      + bytes({0x2A, 10})                          // summary, 10 bytes
      + bytes({0x0A, 8})                           // one value, 8 bytes
      + bytes({0x0A, 1, 'a'})                      // tag "a"
      + bytes({0x15, 0, 0, 0, 0x3F});              // simple_value = 0.5f
  EXPECT_EQ(event, expected);
  // A step past 127 takes varint continuation bytes; step 0 is left out (proto3's default).
  EXPECT_EQ(scalar_event(0, 300, {}).substr(9, 3), bytes({0x10, 0xAC, 0x02}));
  EXPECT_EQ(scalar_event(0, 0, {}), bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x2A, 0}));
  EXPECT_EQ(file_version_event(0).substr(9), bytes({0x1A, 13}) + "brain.Event:2");
}

std::map<std::string, std::pair<int64_t, double>> by_tag(const nlohmann::json& record) {
  std::map<std::string, std::pair<int64_t, double>> out;
  for (const auto& scalar : tensorboard_scalars(record))
    out[scalar.tag] = {scalar.step, scalar.value};
  return out;
}

TEST(TensorBoardEvents, UpdateRecordsShowTrainingBatchAndProgressFigures) {
  const auto tags = by_tag({{"step", 7},
                            {"epoch", 0.5},
                            {"samples_seen", 448},
                            {"tokens_seen", 9000},
                            {"loss", 2.25},
                            {"lr", 0.05},
                            {"grad_norm", 1.5},
                            {"global_batch", 64},
                            {"micro_batch", 32},
                            {"grad_noise_scale", nullptr},
                            {"skipped", false},
                            {"time", 1.7e9}});
  EXPECT_EQ(tags.at("train/loss"), std::make_pair(int64_t{7}, 2.25));
  EXPECT_EQ(tags.at("train/lr"), std::make_pair(int64_t{7}, 0.05));
  EXPECT_EQ(tags.at("batch/global_batch"), std::make_pair(int64_t{7}, 64.0));
  EXPECT_EQ(tags.at("progress/epoch"), std::make_pair(int64_t{7}, 0.5));
  // The same loss against samples and tokens, so runs at other batch sizes line up.
  EXPECT_EQ(tags.at("by_samples/train_loss"), std::make_pair(int64_t{448}, 2.25));
  EXPECT_EQ(tags.at("by_tokens/train_loss"), std::make_pair(int64_t{9000}, 2.25));
  EXPECT_EQ(tags.count("noise_scale/update"), 0u) << "null until measured: left out";
  EXPECT_EQ(tags.count("time"), 0u);
  EXPECT_EQ(tags.size(), 10u);
}

TEST(TensorBoardEvents, EpochAndEvaluationRecordsShowHeldOutFigures) {
  const auto epoch = by_tag({{"epoch", 1},
                             {"step", 6},
                             {"samples_seen", 384},
                             {"train_loss", 2.17},
                             {"train_accuracy", 0.29},
                             {"train_seconds", 0.02},
                             {"test_accuracy", 0.45},
                             {"val_loss", 2.03},
                             {"grad_noise_scale", 48.6},
                             {"grad_noise_scale_high", nullptr}});
  EXPECT_EQ(epoch.at("train/epoch_loss"), std::make_pair(int64_t{6}, 2.17));
  EXPECT_EQ(epoch.at("test/accuracy"), std::make_pair(int64_t{6}, 0.45));
  EXPECT_EQ(epoch.at("val/loss"), std::make_pair(int64_t{6}, 2.03));
  EXPECT_EQ(epoch.at("by_samples/val_loss"), std::make_pair(int64_t{384}, 2.03));
  EXPECT_EQ(epoch.at("noise_scale/epoch"), std::make_pair(int64_t{6}, 48.6));
  EXPECT_EQ(epoch.count("noise_scale/epoch_high"), 0u);
  EXPECT_EQ(epoch.count("train/loss"), 0u) << "an epoch's loss is not an update's";

  const auto evaluation = by_tag({{"event", "evaluation"},
                                  {"step", 40},
                                  {"epoch", 2.5},
                                  {"samples_seen", 2560},
                                  {"tokens_seen", 65536},
                                  {"val_bpb", 2.1}});
  EXPECT_EQ(evaluation.at("val/bpb"), std::make_pair(int64_t{40}, 2.1));
  EXPECT_EQ(evaluation.at("by_tokens/val_bpb"), std::make_pair(int64_t{65536}, 2.1));

  for (const char* event : {"train_start", "oom_backoff", "batch_change", "target_reached"})
    EXPECT_TRUE(tensorboard_scalars({{"event", event}, {"step", 3}, {"lr", 0.1}}).empty()) << event;
  EXPECT_TRUE(tensorboard_scalars({{"loss", 1.0}}).empty()) << "no step: nowhere to show it";
  EXPECT_TRUE(tensorboard_scalars(nlohmann::json::array()).empty());
}

class TensorBoardDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("bigbatch-tb-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::string> event_files() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_))
      if (is_bigbatch_event_file(entry.path().filename()))
        names.push_back(entry.path().string());
    return names;
  }
  std::filesystem::path dir_;
};

TEST_F(TensorBoardDirectory, AResumedRunReplacesItsEventsWithWhatMetricsKept) {
  const std::string metrics_path = (dir_ / "metrics.jsonl").string();
  std::string first_file;
  {
    TensorBoardLog tensorboard(dir_.string(), metrics_path);  // no metrics yet: a fresh run
    MetricsWriter metrics(metrics_path);
    tensorboard.write(metrics.write({{"step", 1}, {"loss", 2.0}, {"lr", 0.1}}));
    tensorboard.write(metrics.write({{"step", 2}, {"loss", 1.5}, {"lr", 0.1}}));
    first_file = tensorboard.path();
  }
  // Something that is not ours stays; an older file of ours (another process's) goes.
  std::ofstream(dir_ / "events.out.tfevents.123.other") << "x";
  const std::string older = (dir_ / "events.out.tfevents.0000000001.host.1.bigbatch").string();
  std::ofstream(older) << "x";
  ASSERT_EQ(event_files().size(), 2u);
  std::filesystem::remove(older);
  ASSERT_EQ(event_files(), std::vector<std::string>{first_file});
  const std::string first = read_text_file(first_file);
  std::ofstream(older) << "x";
  {
    TensorBoardLog resumed(dir_.string(), metrics_path);
    resumed.flush();
    EXPECT_FALSE(path_exists(older));
    ASSERT_EQ(event_files(), std::vector<std::string>{resumed.path()});
    // Same records, same stamped times: the same bytes (the version event's time aside).
    const std::string replayed = read_text_file(resumed.path());
    const size_t version_bytes = tfrecord_frame(file_version_event(0)).size();
    EXPECT_EQ(replayed.substr(version_bytes), first.substr(version_bytes));
  }
  EXPECT_TRUE(path_exists((dir_ / "events.out.tfevents.123.other").string()));
}

TEST(TensorBoardEvents, OnlyItsOwnFilesAreBigbatchs) {
  EXPECT_TRUE(is_bigbatch_event_file("events.out.tfevents.1764850000.host.123.bigbatch"));
  EXPECT_FALSE(is_bigbatch_event_file("events.out.tfevents.1764850000.host.123.1"));
  EXPECT_FALSE(is_bigbatch_event_file("events.out.tfevents..bigbatch"));
  EXPECT_FALSE(is_bigbatch_event_file("metrics.jsonl"));
}

TEST(MetricsWriter, StampsEachRecordWithItsTime) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("bigbatch-metrics-" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(path);
  const double before = unix_time_now();
  {
    MetricsWriter metrics(path);
    const auto written = metrics.write({{"step", 1}});
    EXPECT_GE(written.at("time").get<double>(), before);
    EXPECT_EQ(metrics.write({{"step", 2}, {"time", 5.0}}).at("time"), 5.0) << "kept as given";
  }
  EXPECT_EQ(read_text_file(path).find("\"step\":1,\"time\":"), 1u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace bigbatch
