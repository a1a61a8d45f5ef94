#include "report/tensorboard_log.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "core/clock.h"
#include "core/error.h"
#include "io/tfrecord.h"

namespace bigbatch {
namespace {

// --- The three protobuf messages, field by field (tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto): Event {double wall_time = 1; int64 step = 2;
// string file_version = 3; Summary summary = 5;}, Summary {repeated Value value = 1;},
// Value {string tag = 1; float simple_value = 2;}.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}
void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (field << 3) | type);
}
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}
template <typename T>
void put_fixed(std::string& out, uint32_t field, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  put_key(out, field, sizeof(T) == 4 ? kFixed32 : kFixed64);
  unsigned char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // protobuf's fixed fields are little-endian, as x86 is
  out.append(reinterpret_cast<const char*>(raw), sizeof(T));
}

std::string event_header(double wall_time, int64_t step) {
  std::string event;
  put_fixed(event, 1, wall_time);
  if (step != 0) {  // proto3 leaves a default out
    put_key(event, 2, kVarint);
    put_varint(event, static_cast<uint64_t>(step));
  }
  return event;
}

// --- Which record keys become which tags.
std::optional<double> number(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  // Null in metrics.jsonl is a value that was not finite: left out live as in a replay.
  if (it == record.end() || !it->is_number() || !std::isfinite(it->get<double>()))
    return std::nullopt;
  return it->get<double>();
}

struct ScalarList {
  std::vector<TensorBoardScalar>& out;
  int64_t step;
  void add(const nlohmann::json& record, const char* key, const std::string& tag) {
    add_at(record, key, tag, step);
  }
  void add_at(const nlohmann::json& record, const char* key, const std::string& tag, int64_t at) {
    if (const auto value = number(record, key))
      out.push_back({tag, at, *value});
  }
};

// An update's line: it has a rate.
void update_scalars(const nlohmann::json& record, ScalarList& list) {
  static const std::pair<const char*, const char*> kTags[] = {
      {"loss", "train/loss"},
      {"lr", "train/lr"},
      {"grad_norm", "train/grad_norm"},
      {"lr_gain", "train/lr_gain"},
      {"global_batch", "batch/global_batch"},
      {"micro_batch", "batch/micro_batch"},
      {"micro_steps", "batch/micro_steps"},
      {"micro_batch_tokens", "batch/micro_batch_tokens"},
      {"grad_noise_scale", "noise_scale/update"},
      {"samples_per_s", "throughput/samples_per_s"},
      {"tokens_per_s", "throughput/tokens_per_s"},
      {"peak_bytes", "memory/peak_bytes"},
      {"rss_peak_bytes", "memory/rss_peak_bytes"},
      {"epoch", "progress/epoch"},
      {"samples_seen", "progress/samples_seen"},
      {"tokens_seen", "progress/tokens_seen"},
  };
  for (const auto& [key, tag] : kTags)
    list.add(record, key, tag);
  if (const auto samples = number(record, "samples_seen"))
    list.add_at(record, "loss", "by_samples/train_loss", int64_t(*samples));
  if (const auto tokens = number(record, "tokens_seen"))
    list.add_at(record, "loss", "by_tokens/train_loss", int64_t(*tokens));
}

// An epoch's line or an evaluation's: the training figures over the epoch, the noise scale's
// estimate, and the held-out figures (val_*, test_*).
void evaluation_scalars(const nlohmann::json& record, ScalarList& list) {
  static const std::pair<const char*, const char*> kTags[] = {
      {"train_loss", "train/epoch_loss"},
      {"train_accuracy", "train/epoch_accuracy"},
      {"train_rmse", "train/epoch_rmse"},
      {"grad_noise_scale", "noise_scale/epoch"},
      {"grad_noise_scale_low", "noise_scale/epoch_low"},
      {"grad_noise_scale_high", "noise_scale/epoch_high"},
  };
  for (const auto& [key, tag] : kTags)
    list.add(record, key, tag);
  const auto samples = number(record, "samples_seen");
  const auto tokens = number(record, "tokens_seen");
  for (const char* split : {"val", "test"}) {
    for (const char* metric : {"loss", "accuracy", "perplexity", "bpb", "rmse"}) {
      const std::string key = std::string(split) + "_" + metric;
      list.add(record, key.c_str(), std::string(split) + "/" + metric);
      if (samples)
        list.add_at(record, key.c_str(), "by_samples/" + key, int64_t(*samples));
      if (tokens)
        list.add_at(record, key.c_str(), "by_tokens/" + key, int64_t(*tokens));
    }
  }
}

std::string event_file_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
    std::strcpy(host, "localhost");
  char name[512];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d.bigbatch",
                static_cast<long long>(unix_time_now()), host, static_cast<int>(::getpid()));
  return name;
}

}  // namespace

std::vector<TensorBoardScalar> tensorboard_scalars(const nlohmann::json& record) {
  std::vector<TensorBoardScalar> scalars;
  if (!record.is_object())
    return scalars;
  const auto step = number(record, "step");
  if (!step)
    return scalars;
  ScalarList list{scalars, int64_t(*step)};
  const auto event = record.find("event");
  if (event != record.end()) {
    if (*event == "evaluation")
      evaluation_scalars(record, list);
  } else if (record.contains("lr")) {
    update_scalars(record, list);
  } else {
    evaluation_scalars(record, list);
  }
  return scalars;
}

std::string scalar_event(double wall_time, int64_t step,
                         const std::vector<TensorBoardScalar>& scalars) {
  std::string summary;
  for (const auto& scalar : scalars) {
    std::string value;
    put_bytes(value, 1, scalar.tag);
    put_fixed(value, 2, static_cast<float>(scalar.value));
    put_bytes(summary, 1, value);
  }
  std::string event = event_header(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

std::string file_version_event(double wall_time) {
  std::string event = event_header(wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

bool is_bigbatch_event_file(const std::string& name) {
  const std::string prefix = "events.out.tfevents.", suffix = ".bigbatch";
  return name.size() > prefix.size() + suffix.size() && name.rfind(prefix, 0) == 0 &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TensorBoardLog::TensorBoardLog(const std::string& run_dir, const std::string& metrics_path)
    : file_(run_dir + "/" + event_file_name(), "TensorBoard event file", AppendFile::Start::Empty) {
  try {
    file_.append(tfrecord_frame(file_version_event(unix_time_now())));
    std::ifstream kept(metrics_path);
    std::string line;
    while (std::getline(kept, line)) {
      // The resume checked every line it kept; one that is not JSON has nothing to show.
      const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!record.is_discarded())
        write(record);
    }
    file_.flush();
  } catch (const Error&) {
    // A full disk: the older files still say what they said, and this one is not left behind.
    std::error_code ignored;
    std::filesystem::remove(file_.path(), ignored);
    throw;
  }
  // The records of the older files are all in this one now (those past the checkpoint are
  // gone from metrics.jsonl too).
  remove_event_files(run_dir, std::filesystem::path(file_.path()).filename(), &not_removed_);
}

int64_t remove_event_files(const std::string& run_dir, const std::string& keep,
                           std::vector<std::string>* not_removed) {
  int64_t removed = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir, ignored)) {
    const std::string name = entry.path().filename();
    if (name == keep || !is_bigbatch_event_file(name) || !entry.is_regular_file(ignored))
      continue;
    std::error_code error;
    if (std::filesystem::remove(entry.path(), error))
      ++removed;
    else if (error && not_removed)
      not_removed->push_back(entry.path().string() + " (" + error.message() + ")");
  }
  return removed;
}

void TensorBoardLog::write(const nlohmann::json& record) {
  const auto scalars = tensorboard_scalars(record);
  if (scalars.empty())
    return;
  const double wall_time = number(record, "time").value_or(unix_time_now());
  // One event per step: the by_samples/by_tokens figures have steps of their own.
  std::map<int64_t, std::vector<TensorBoardScalar>> by_step;
  std::vector<int64_t> order;
  for (const auto& scalar : scalars) {
    auto& group = by_step[scalar.step];
    if (group.empty())
      order.push_back(scalar.step);
    group.push_back(scalar);
  }
  for (const int64_t step : order)
    file_.append(tfrecord_frame(scalar_event(wall_time, step, by_step[step])));
}

}  // namespace bigbatch
