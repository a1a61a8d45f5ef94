#include "console/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

const NameTable<ProgressMode>& progress_mode_names() {
  static const NameTable<ProgressMode> table{"--progress",
                                             "--progress",
                                             {{ProgressMode::Auto, "auto"},
                                              {ProgressMode::Bar, "bar"},
                                              {ProgressMode::Lines, "lines"},
                                              {ProgressMode::Off, "off"}}};
  return table;
}

namespace {

constexpr size_t kBarCells = 24;

// The terminal's width now (a resized window is seen at the next draw); COLUMNS or 80 when
// the stream is no terminal.
size_t terminal_width(std::FILE* stream) {
  winsize size{};
  if (::ioctl(::fileno(stream), TIOCGWINSZ, &size) == 0 && size.ws_col > 0)
    return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    const long value = std::strtol(columns, nullptr, 10);
    if (value > 0)
      return static_cast<size_t>(value);
  }
  return 80;
}

}  // namespace

std::string progress_line(const ProgressState& s, size_t width, bool bar) {
  const double remaining_updates = double(s.total_updates - s.step);
  const double eta = s.step > 0 ? s.elapsed_s / double(s.step) * remaining_updates : -1;
  // In the order they are shown; each with the rank it keeps when the width runs short (0 is
  // kept longest).
  struct Field {
    std::string text;
    int rank;
  };
  std::vector<Field> fields = {
      {"epoch " + std::to_string(s.epoch) + "/" + std::to_string(s.epochs), 0},
      {"update " + std::to_string(s.step_in_epoch) + "/" + std::to_string(s.updates_per_epoch), 2},
      {"loss " + format_loss(s.loss), 0},
      {human_count(s.samples_per_s) + " samples/s", 4},
      {"elapsed " + human_duration(s.elapsed_s), 3},
      {"ETA " + human_duration(eta), 1},
  };
  if (s.memory_bytes > 0)
    fields.push_back({"mem " + human_bytes(double(s.memory_bytes)), 6});
  if (s.noise_scale > 0) {
    fields.push_back(
        {"B " + human_count(double(s.global_batch)) + " B_noise " + human_count(s.noise_scale), 5});
  }
  if (s.lr_gain > 0)
    fields.push_back({"gain " + format_significant(s.lr_gain, 3), 5});
  if (!s.schedule_status.empty())
    fields.push_back({s.schedule_status, 5});
  const auto join_fields = [&](int max_rank) {
    std::string text;
    for (const auto& f : fields) {
      if (f.rank <= max_rank)
        text += (text.empty() ? "" : " ") + f.text;
    }
    return text;
  };
  if (width == 0)
    return join_fields(6);  // no width to fit: every field
  // A bar takes its cells, brackets and a space; the last column stays free, or a terminal
  // wraps the line before the cursor returns.
  const size_t room = width > 1 ? width - 1 : 0;
  int max_rank = 6;
  std::string text = join_fields(max_rank);
  size_t cells = bar ? kBarCells : 0;
  while (max_rank > 0 && text.size() + (bar ? cells + 3 : 0) > room) {
    if (bar && cells > 10) {
      cells = 10;  // a shorter bar before any field goes
      continue;
    }
    text = join_fields(--max_rank);
  }
  if (bar && text.size() + cells + 3 > room)
    cells = 0;  // the essentials first, no bar at all
  if (!bar || cells == 0)
    return text.size() > room ? text.substr(0, room) : text;
  const double fraction =
      s.updates_per_epoch > 0 ? double(s.step_in_epoch) / double(s.updates_per_epoch) : 0;
  const size_t filled =
      std::min(cells, static_cast<size_t>(std::max(0.0, fraction) * double(cells)));
  return "[" + std::string(filled, '#') + std::string(cells - filled, '.') + "] " + text;
}

Progress::Progress(ProgressMode mode, std::FILE* stream) : mode_(mode), stream_(stream) {
  if (mode_ == ProgressMode::Auto)
    mode_ = ::isatty(::fileno(stream)) ? ProgressMode::Bar : ProgressMode::Lines;
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
    // Fitted to the terminal at every draw: a line wider than it wraps, and each redraw then
    // leaves a copy behind.
    std::fprintf(stream_, "\r%s\033[K",
                 progress_line(state, terminal_width(stream_), /*bar=*/true).c_str());
    bar_visible_ = true;
  } else {
    // Logs keep every field, elapsed time included, whatever their width.
    std::fprintf(stream_, "%s\n", progress_line(state, 0, /*bar=*/false).c_str());
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
