#pragma once
// What ends a run early once it is reached: `--target val_bpb<=1.9`, `--target
// val_accuracy>=0.9` (`--target-accuracy 0.9` is its shorthand), checked at the end of each
// epoch on the metrics the epoch record holds. Torch-free.
//
// A metric is accuracy, loss, perplexity, bpb (bits per byte) or rmse, prefixed by the split
// it is read on (val_ or test_); without a prefix, the validation split when the run has one,
// else the test split (the test set is not for decisions when there is a choice). Accuracy is
// reached going up (>=), the others going down (<=): the other way round is an error, since a
// run would stop at its first epoch.
//
//   StopTarget target = StopTarget::parse("val_bpb<=1.9");
//   target.metric_in(/*has_validation=*/true);   // "val_bpb"
//   target.reached(1.85);                        // true
#include <string>

namespace bigbatch {

// A figure the evaluations report, named as the epoch records name it, with or without its
// split ("val_loss", "accuracy"): what --early-stop and --keep-best watch, and what --target
// compares. Accuracy improves going up, the others going down.
struct WatchedMetric {
  std::string split;   // "val", "test", or empty: val when there is a validation split
  std::string metric;  // accuracy, loss, perplexity, bpb or rmse

  // Throws bigbatch::Error (Config) naming `flag`, the text and the accepted names.
  static WatchedMetric parse(const std::string& text, const std::string& flag);
  bool rises() const { return metric == "accuracy"; }
  // The epoch record's key: "val_bpb", "test_accuracy".
  std::string metric_in(bool has_validation) const;
  // As given: "val_loss", "accuracy"; parse(name()) gives the same metric.
  std::string name() const;
};

struct StopTarget : WatchedMetric {
  bool at_least = true;  // >= (accuracy); else <=
  double value = 0;

  // Throws bigbatch::Error (Config) naming the text and the accepted forms.
  static StopTarget parse(const std::string& text);
  // --target-accuracy: accuracy >= fraction on validation, else test.
  static StopTarget accuracy(double fraction);
  bool reached(double observed) const { return at_least ? observed >= value : observed <= value; }
  // "val_bpb<=1.9"; parse(to_string()) gives the same target.
  std::string to_string() const;
};

}  // namespace bigbatch
