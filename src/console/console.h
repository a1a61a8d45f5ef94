#pragma once
// What a run says on the terminal: messages and the progress display (console/progress.h),
// from the job's first rank only.
//
//   Console console(job.is_main(), ProgressMode::Auto);
//   console.say("resumed from step 40");
#include <cstdio>
#include <string>

#include "console/progress.h"

namespace bigbatch {

// Messages and the progress display, from rank 0 only: the other ranks of a job train silently.
class Console {
 public:
  Console(bool is_main, ProgressMode mode)
      : is_main_(is_main), progress_(is_main ? mode : ProgressMode::Off, stderr) {}
  void say(const std::string& line) {
    if (is_main_)
      progress_.message(line);
  }
  void show(const ProgressState& state) {
    if (is_main_)
      progress_.update(state);
  }

 private:
  bool is_main_;
  Progress progress_;
};

}  // namespace bigbatch
