#include "report/progress.h"

#include <unistd.h>

#include <algorithm>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

Progress::Progress(ProgressMode mode, std::FILE* stream) : mode_(mode), stream_(stream) {
  if (mode_ == ProgressMode::Auto)
    mode_ = ::isatty(::fileno(stream)) ? ProgressMode::Bar : ProgressMode::Lines;
}

std::string Progress::status_text(const ProgressState& s) const {
  const double remaining_updates = double(s.total_updates - s.step);
  const double eta = s.step > 0 ? s.elapsed_s / double(s.step) * remaining_updates : -1;
  char buffer[256];
  std::snprintf(buffer, sizeof buffer,
                "epoch %lld/%lld update %lld/%lld loss %s %s samples/s ETA %s",
                static_cast<long long>(s.epoch), static_cast<long long>(s.epochs),
                static_cast<long long>(s.step_in_epoch),
                static_cast<long long>(s.updates_per_epoch), format_loss(s.loss).c_str(),
                human_count(s.samples_per_s).c_str(), human_duration(eta).c_str());
  std::string text = buffer;
  if (s.memory_bytes > 0)
    text += " mem " + human_bytes(double(s.memory_bytes));
  if (s.noise_scale > 0) {
    text += " B " + human_count(double(s.global_batch)) + " B_noise " + human_count(s.noise_scale);
  }
  if (s.lr_gain > 0)
    text += " gain " + format_significant(s.lr_gain, 3);
  return text;
}

void Progress::update(const ProgressState& state) {
  if (mode_ == ProgressMode::Off)
    return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = state.step_in_epoch == state.updates_per_epoch;
  // A bar redraws ~10 times a second; lines come every 10 seconds and at each epoch's end.
  const auto cadence =
      mode_ == ProgressMode::Bar ? std::chrono::milliseconds(100) : std::chrono::seconds(10);
  if (!last && now - last_draw_ < cadence)
    return;
  last_draw_ = now;
  if (mode_ == ProgressMode::Bar) {
    constexpr int kWidth = 24;
    const double fraction = state.updates_per_epoch > 0
                                ? double(state.step_in_epoch) / double(state.updates_per_epoch)
                                : 0;
    const int filled = std::clamp(static_cast<int>(fraction * kWidth), 0, kWidth);
    std::fprintf(
        stream_, "\r[%s%s] %s\033[K", std::string(static_cast<size_t>(filled), '#').c_str(),
        std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), status_text(state).c_str());
    bar_visible_ = true;
  } else {
    std::fprintf(stream_, "%s\n", status_text(state).c_str());
  }
  std::fflush(stream_);
}

void Progress::message(const std::string& line) {
  if (bar_visible_) {
    std::fprintf(stream_, "\r\033[K");
    bar_visible_ = false;
  }
  std::fprintf(stream_, "%s\n", line.c_str());
  std::fflush(stream_);
}

}  // namespace bigbatch
