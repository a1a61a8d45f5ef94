#pragma once
// metrics.jsonl: one JSON object per line, appended and flushed as the run goes, so a crashed
// or interrupted run still leaves every line it finished. Keys are documented in the README.
//
//   MetricsWriter metrics(run_dir + "/metrics.jsonl");
//   metrics.write({{"step", 12}, {"loss", 0.41}, {"lr", 0.05}});
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace bigbatch {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_;
};

}  // namespace bigbatch
