#pragma once
// TensorBoard event files in the run directory, beside metrics.jsonl and from the same records:
// `tensorboard --logdir RUN` (or a directory of runs, a sweep's) shows the run, and every tool
// that reads TensorBoard's format (W&B's and MLflow's importers, tbparse) reads it. Written
// with TensorBoard's own layout — TFRecord records (io/tfrecord.h) of `Event` protobuf
// messages, a file version event first, then one event per step with scalar summaries — encoded
// here by hand: three messages of a few fields each do not justify protoc and its runtime.
//
// Tags, grouped as TensorBoard groups them (the part before '/'); step = updates done:
//   train/loss, train/lr, train/grad_norm, train/lr_gain          every update
//   batch/global_batch, batch/micro_batch, batch/micro_steps, batch/micro_batch_tokens
//   noise_scale/update (per update), noise_scale/epoch, noise_scale/epoch_low, _high
//   throughput/samples_per_s, throughput/tokens_per_s
//   memory/peak_bytes, memory/rss_peak_bytes
//   progress/epoch, progress/samples_seen, progress/tokens_seen
//   train/epoch_loss, train/epoch_accuracy, train/epoch_rmse       each epoch
//   val/loss, val/accuracy, val/bpb, val/perplexity, val/rmse, test/...   each evaluation
// and, so that runs at different batch sizes line up, the losses and held-out figures again
// with step = samples seen (by_samples/train_loss, by_samples/val_accuracy, ...) and, for token
// data, tokens seen (by_tokens/...).
//
// A run's process writes a file of its own, named by its start time. A resumed run cuts
// metrics.jsonl back to its checkpoint; its new event file starts with the records kept there
// (their `time` as wall time) and the older event files are then removed, so the events always
// say what metrics.jsonl says. Torch-free.
//
//   TensorBoardLog tensorboard(run_dir, run_dir + "/metrics.jsonl");  // replays what is kept
//   tensorboard.write(metrics.write(record));
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/append_file.h"

namespace bigbatch {

struct TensorBoardScalar {
  std::string tag;
  int64_t step = 0;
  double value = 0;
};

// The scalars a metrics.jsonl record shows, in the order above; none for records that only
// tell (train_start, oom_backoff, ...). Null or missing figures are left out.
std::vector<TensorBoardScalar> tensorboard_scalars(const nlohmann::json& record);

// One Event message: `wall_time` (seconds since the Unix epoch), `step` and the scalars as
// simple values (TensorBoard stores them as 32-bit floats).
std::string scalar_event(double wall_time, int64_t step,
                         const std::vector<TensorBoardScalar>& scalars);
// The Event every file starts with: file_version "brain.Event:2".
std::string file_version_event(double wall_time);

class TensorBoardLog {
 public:
  // A new event file in `run_dir` holding the records of `metrics_path` (none when it does not
  // exist); then the directory's older bigbatch event files are removed.
  TensorBoardLog(const std::string& run_dir, const std::string& metrics_path);

  // Older event files that could not be removed ("NAME (Operation not permitted)"): TensorBoard
  // reads them beside the new one and shows their updates twice, which the run must say.
  const std::vector<std::string>& not_removed() const { return not_removed_; }

  // A record as metrics.jsonl holds it: its "time" is the events' wall time.
  void write(const nlohmann::json& record);
  void flush() { file_.flush(); }
  const std::string& path() const { return file_.path(); }

 private:
  AppendFile file_;
  std::vector<std::string> not_removed_;
};

// Whether `name` is an event file TensorBoardLog writes ("events.out.tfevents.*.bigbatch").
bool is_bigbatch_event_file(const std::string& name);
// Removes the event files TensorBoardLog wrote into `run_dir`, but `keep` (a file name); returns
// how many. A resume under --no-tensorboard removes them all: they may show updates past its
// checkpoint.
int64_t remove_event_files(const std::string& run_dir, const std::string& keep = "",
                           std::vector<std::string>* not_removed = nullptr);

}  // namespace bigbatch
