#pragma once
// metrics.jsonl: one JSON object per line, appended as the run goes. Lines are written out in
// whole-line batches at least once a second, at every flush() (the trainer flushes before each
// checkpoint and after each epoch's record) and when the writer closes, also on the way out of
// an error. A process killed outright loses at most its last second of lines, all of them after
// its last checkpoint, which a resumed run drops and writes again anyway. A write that fails
// (a full disk) cuts the file back to its last whole line before the error is raised, so the
// file never ends in half a record. Writing each line
// with its own system call cost 2-3% of an update at micro-batch 16 (measured). Keys are
// documented in the README.
//
//   MetricsWriter metrics(run_dir + "/metrics.jsonl");
//   metrics.write({{"step", 12}, {"loss", 0.41}, {"lr", 0.05}});
//   metrics.flush();  // before a checkpoint
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace bigbatch {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();  // flushes; an error there is reported on stderr (a destructor cannot throw)
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const nlohmann::json& record);
  void flush();
  // The file's length up to the last flush(): where a checkpoint written now stands in it.
  int64_t flushed_bytes() const { return flushed_bytes_; }
  const std::string& path() const { return path_; }

  // How long a written line may wait in memory.
  static constexpr std::chrono::milliseconds kFlushInterval{1000};

 private:
  std::string path_;
  int fd_ = -1;          // opened to append
  std::string pending_;  // whole lines not yet written out
  int64_t flushed_bytes_ = 0;
  std::chrono::steady_clock::time_point last_flush_;
};

}  // namespace bigbatch
