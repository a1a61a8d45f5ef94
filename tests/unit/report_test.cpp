// The run report: SVG line charts (ticks, log axes, thinning, escaping, empty data) and the
// self-contained HTML page built from a run directory's files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "config/option_table.h"
#include "config/train_config.h"
#include "console/progress.h"
#include "core/error.h"
#include "core/files.h"
#include "report/html_report.h"
#include "report/run_records.h"
#include "report/svg_chart.h"
#include "sweep/sweep_summary.h"

namespace bigbatch {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

void expect_ticks(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12) << i;
}

ProgressState busy_state() {
  ProgressState s;
  s.epoch = 3;
  s.epochs = 10;
  s.step_in_epoch = 117;
  s.updates_per_epoch = 234;
  s.step = 585;
  s.total_updates = 2340;
  s.loss = 4.6152e27;  // a diverging run's
  s.samples_per_s = 12345;
  s.elapsed_s = 75;
  s.memory_bytes = int64_t{300} << 20;
  s.global_batch = 256;
  s.noise_scale = 1234;
  s.schedule_status = "auto: check in 12";
  return s;
}

TEST(Progress, TheBarFitsEveryWidthKeepingTheEssentials) {
  // Issue 20: below ~110 columns every redraw wrapped and the screen filled with bars.
  const ProgressState s = busy_state();
  for (size_t width : {20, 40, 60, 80, 100, 120, 200}) {
    const std::string line = progress_line(s, width, /*bar=*/true);
    EXPECT_LT(line.size(), width) << line;  // the last column stays free
    if (width >= 40) {
      EXPECT_NE(line.find("epoch 3/10"), std::string::npos) << line;
      EXPECT_NE(line.find("loss 4.615e+27"), std::string::npos) << line;
    }
  }
  const std::string wide = progress_line(s, 200, true);
  EXPECT_EQ(wide.rfind("[############............] epoch 3/10 update 117/234", 0), 0u) << wide;
  EXPECT_NE(wide.find("elapsed 1m15s"), std::string::npos) << wide;
  EXPECT_NE(wide.find("B_noise"), std::string::npos) << wide;
  EXPECT_NE(wide.find("auto: check in 12"), std::string::npos) << wide;
  const std::string narrow = progress_line(s, 60, true);
  EXPECT_EQ(narrow.find("B_noise"), std::string::npos) << narrow;  // what matters least goes first
  EXPECT_EQ(narrow.find("auto:"), std::string::npos) << narrow;
  EXPECT_NE(narrow.find("ETA"), std::string::npos) << narrow;
}

TEST(Progress, LogLinesKeepEveryField) {
  const std::string line = progress_line(busy_state(), 0, /*bar=*/false);
  for (const char* field : {"epoch 3/10", "update 117/234", "samples/s", "elapsed", "ETA", "mem",
                            "B_noise", "auto: check in 12"})
    EXPECT_NE(line.find(field), std::string::npos) << field << ": " << line;
  EXPECT_EQ(line.find('['), std::string::npos);
}

TEST(SvgChart, NiceTicks) {
  expect_ticks(nice_ticks(0, 1), {0, 0.2, 0.4, 0.6, 0.8, 1.0});
  expect_ticks(nice_ticks(3, 97), {20, 40, 60, 80});
  expect_ticks(nice_ticks(-1, 1, 4), {-1, -0.5, 0, 0.5, 1});
  expect_ticks(nice_ticks(5, 5), {5});
}

TEST(SvgChart, DrawsSeriesWithLegendTicksAndLabels) {
  LineChart chart;
  chart.title = "loss <train> & test";
  chart.x_label = "updates";
  chart.y_label = "loss";
  chart.series.push_back({"train", "#0072B2", {{1, 2.3}, {2, 1.9}, {3, 1.5}}, false});
  chart.series.push_back({"test", "#D55E00", {{3, 1.7}}, true});
  const std::string svg = render_svg(chart);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(count(svg, "<circle"), 1u);
  EXPECT_NE(svg.find("loss &lt;train&gt; &amp; test"), std::string::npos);  // escaped
  EXPECT_EQ(svg.find("<train>"), std::string::npos);
  EXPECT_GE(count(svg, "class=\"tick\""), 4u);
  EXPECT_NE(svg.find(">train</text>"), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 6), "</svg>");
}

TEST(SvgChart, NumbersReadAsPeopleWriteThem) {
  // Issue 20: ticks read "4e+04".
  EXPECT_EQ(chart_number(40000), "40k");
  EXPECT_EQ(chart_number(15000), "15k");
  EXPECT_EQ(chart_number(1.5e6), "1.5M");
  EXPECT_EQ(chart_number(2.5e9), "2.5G");
  EXPECT_EQ(chart_number(1000), "1000");
  EXPECT_EQ(chart_number(0.25), "0.25");
  EXPECT_EQ(chart_number(0), "0");
  EXPECT_EQ(chart_number(3e-5), "3e-5");
  EXPECT_EQ(chart_number(2.5e-7), "2.5e-7");
  EXPECT_EQ(chart_number(1e25), "1e25");
  EXPECT_EQ(chart_number(-40000), "-40k");
  EXPECT_EQ(chart_number(9.9999e-5), "1e-4");  // the rounding carries into the exponent
  EXPECT_EQ(chart_number(9999.6), "10k");      // and into the suffix
  EXPECT_EQ(chart_number(999950), "1M");
  EXPECT_EQ(chart_number(999.96e12), "1e15");
}

TEST(SvgChart, TheLegendSitsAboveThePlotNeverOnTheData) {
  LineChart chart;
  chart.width = 300;
  for (int i = 0; i < 5; ++i) {
    chart.series.push_back({"a series named at length " + std::to_string(i),
                            chart_colour(i),
                            {{0, 1.0 * i}, {1, 2.0 * i}},
                            false});
  }
  chart.series.push_back({"no points", "red", {}, false});  // not in the legend
  const std::string svg = render_svg(chart);
  // Every legend entry lies above the plot's frame, which starts below the legend's rows.
  const auto frame = svg.find("class=\"frame\"");
  const auto frame_y_at = svg.rfind("y=\"", frame) + 3;
  const int frame_top = std::stoi(svg.substr(frame_y_at));
  size_t at = 0;
  int entries = 0;
  while ((at = svg.find("class=\"legend\"", at)) != std::string::npos) {
    const auto y_at = svg.rfind(" y=\"", at) + 4;
    EXPECT_LT(std::stoi(svg.substr(y_at)), frame_top);
    ++at;
    ++entries;
  }
  EXPECT_EQ(entries, 5);
  EXPECT_GT(frame_top, 30 + 14 * 2);  // five long names wrap to several rows at 300 px
  EXPECT_NE(svg.find("height=\"" + std::to_string(chart.height + (frame_top - 30)) + "\""),
            std::string::npos);  // the chart grew by its legend rows
  EXPECT_EQ(svg.find(">no points<"), std::string::npos);
}

TEST(SvgChart, LogAxisDropsWhatItCannotShowAndEmptyChartsSaySo) {
  LineChart chart;
  chart.log_y = true;
  chart.series.push_back({"s", "red", {{1, 0}, {2, -1}, {3, NAN}, {4, 100}, {5, 1000}}, false});
  const std::string svg = render_svg(chart);
  const auto points_at = svg.find("points=\"");
  const auto points_end = svg.find('"', points_at + 8);
  const std::string points = svg.substr(points_at + 8, points_end - points_at - 8);
  EXPECT_EQ(count(points, ","), 2u);  // only (4, 100) and (5, 1000)
  EXPECT_NE(svg.find(">1000<"), std::string::npos);

  LineChart empty;
  empty.title = "nothing yet";
  empty.series.push_back({"s", "red", {{1, NAN}}, false});
  EXPECT_NE(render_svg(empty).find("no data"), std::string::npos);
}

TEST(SvgChart, LongSeriesAreThinnedButKeepTheirEnds) {
  LineChart chart;
  ChartSeries s{"long", "blue", {}, false};
  for (int i = 0; i < 100000; ++i)
    s.points.push_back({double(i), std::sin(i * 0.001)});
  chart.series.push_back(s);
  const std::string svg = render_svg(chart);
  EXPECT_LT(svg.size(), 40000u);
  const auto points_at = svg.find("points=\"");
  const std::string points = svg.substr(points_at, svg.find('"', points_at + 8) - points_at);
  EXPECT_LE(count(points, ","), 1501u);
  // The last point (x = 99999) is at the right edge of the plot area.
  EXPECT_NE(points.find(std::to_string(560 - 16) + ".0,"), std::string::npos);
}

class RunReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("bigbatch_report_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(RunReportTest, SelfContainedPageWithEveryChart) {
  std::string metrics =
      "{\"event\":\"train_start\",\"step\":0,\"tensor_bytes\":10,\"rss_bytes\":99}\n";
  for (int step = 1; step <= 20; ++step) {
    metrics += "{\"step\":" + std::to_string(step) +
               ",\"samples_seen\":" + std::to_string(step * 256) +
               ",\"loss\":" + std::to_string(2.0 / step) +
               ",\"lr\":0.05,\"grad_norm\":1.5,\"items\":256,\"micro_batch\":32,"
               "\"grad_noise_scale\":300,\"samples_per_s\":3000,\"peak_bytes\":1048576,"
               "\"rss_peak_bytes\":4194304}\n";
  }
  metrics +=
      "{\"epoch\":1,\"step\":20,\"samples_seen\":5120,\"train_loss\":0.5,"
      "\"train_accuracy\":0.8,\"test_loss\":0.6,\"test_accuracy\":0.78,"
      "\"train_seconds\":2.0,\"grad_noise_scale\":300,\"grad_noise_scale_low\":210,"
      "\"grad_noise_scale_high\":390,\"grad_noise_scale_run_average\":350,"
      "\"grad_noise_scale_updates\":20}\n";
  // A resume moved the run from a GPU to the CPU: the report names both starts' devices.
  metrics = "{\"event\":\"train_start\",\"device\":\"cuda:0\",\"step\":0}\n" + metrics +
            "{\"event\":\"train_start\",\"device\":\"cpu\",\"step\":20}\n";
  metrics += "{\"step\":21,\"loss\":";  // a line cut short by a crash is skipped
  atomic_write_file((dir_ / "metrics.jsonl").string(), metrics);
  atomic_write_file((dir_ / "plan.txt").string(), "batch plan\n  global batch 256 <x>\n");

  const std::string path = write_run_report(dir_.string());
  const std::string html = read_text_file(path);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* title : {"loss against updates", "loss against samples",
                            "accuracy against updates", "accuracy against samples", "learning rate",
                            "gradient norm", "gradient noise scale", "throughput", "memory"}) {
    EXPECT_NE(html.find(title), std::string::npos) << title;
  }
  EXPECT_EQ(count(html, "<svg "), 9u);
  EXPECT_NE(html.find("78.00%"), std::string::npos);
  EXPECT_NE(html.find("gradient noise scale (last epoch)</th><td>300 samples over the last ~20 "
                      "updates; 210-390 within two standard errors; 350 averaged over the run"),
            std::string::npos);
  EXPECT_NE(html.find("global batch 256 &lt;x&gt;"), std::string::npos);
  EXPECT_NE(html.find("<th>device</th><td>cuda:0, then cpu</td>"), std::string::npos);
  EXPECT_NE(html.find("(not found)"), std::string::npos);  // no config.toml in this directory
  // Nothing is fetched: no scripts, links, images or sources.
  for (const char* fetch : {"<script", "<link", "<img", "src=", "href="})
    EXPECT_EQ(html.find(fetch), std::string::npos) << fetch;
}

TEST_F(RunReportTest, AdaScaleRunsChartTheirGain) {
  std::string metrics;
  for (int step = 1; step <= 5; ++step) {
    metrics += "{\"step\":" + std::to_string(step) +
               ",\"loss\":1,\"lr\":0.1,\"lr_gain\":" + std::to_string(1 + step) +
               ",\"items\":256}\n";
  }
  atomic_write_file((dir_ / "metrics.jsonl").string(), metrics);
  const std::string html = render_run_report(dir_.string());
  EXPECT_NE(html.find("AdaScale gain"), std::string::npos);
  EXPECT_EQ(count(html, "<svg "), 10u);
}

TEST_F(RunReportTest, LanguageModelRunsChartTokensAndBitsPerByte) {
  std::string metrics;
  for (int step = 1; step <= 6; ++step) {
    // The last update is an epoch's short window: 40 samples of a 64-sample plan.
    const int samples = step < 6 ? 64 : 40;
    metrics += "{\"step\":" + std::to_string(step) +
               ",\"samples_seen\":" + std::to_string(step * 64) +
               ",\"tokens_seen\":" + std::to_string(step * 9000) +
               ",\"loss\":2,\"lr\":0.001,\"items\":" + std::to_string(samples * 140) +
               ",\"global_batch\":64,\"tokens_per_s\":12000,\"samples_per_s\":80}\n";
  }
  metrics +=
      "{\"epoch\":1,\"step\":6,\"samples_seen\":360,\"tokens_seen\":54000,\"train_loss\":2,"
      "\"val_loss\":2.1,\"val_bpb\":3.0297,\"val_perplexity\":8.17}\n";
  atomic_write_file((dir_ / "metrics.jsonl").string(), metrics);
  const std::string html = render_run_report(dir_.string());
  for (const char* text :
       {"loss against tokens", "bits per byte against tokens", "tokens / s", "tokens seen", "54.0k",
        "global batch (samples per update)</th><td>64",
        "validation bits per byte (last epoch)</th><td>3.0297", "validation perplexity"}) {
    EXPECT_NE(html.find(text), std::string::npos) << text;
  }
  EXPECT_EQ(html.find("loss against samples"), std::string::npos);
}

// --eval-every's records ("event": "evaluation") join the epochs' on the held-out curves, in
// step order: each is one more marked point on the validation loss and bits-per-byte charts.
TEST_F(RunReportTest, IntervalEvaluationsAreHeldOutPointsBetweenEpochs) {
  std::string metrics;
  for (int step = 1; step <= 6; ++step) {
    metrics += "{\"step\":" + std::to_string(step) +
               ",\"samples_seen\":" + std::to_string(step * 64) +
               ",\"tokens_seen\":" + std::to_string(step * 9000) +
               ",\"loss\":2,\"lr\":0.001,\"items\":9000,\"tokens_per_s\":12000}\n";
  }
  const std::string epoch =
      "{\"epoch\":1,\"step\":6,\"samples_seen\":384,\"tokens_seen\":54000,\"train_loss\":2,"
      "\"val_loss\":2.1,\"val_bpb\":3.0297,\"val_perplexity\":8.17}\n";
  atomic_write_file((dir_ / "metrics.jsonl").string(), metrics + epoch);
  const size_t epochs_only = count(render_run_report(dir_.string()), "<circle");
  std::string evaluations;
  for (int step : {4, 2, 6}) {  // out of order on purpose: held_out() sorts by step
    evaluations += "{\"event\":\"evaluation\",\"step\":" + std::to_string(step) +
                   ",\"epoch\":" + std::to_string(step / 6.0) +
                   ",\"samples_seen\":" + std::to_string(step * 64) +
                   ",\"tokens_seen\":" + std::to_string(step * 9000) +
                   ",\"val_loss\":2.5,\"val_bpb\":3.6,\"val_perplexity\":12.2}\n";
  }
  atomic_write_file((dir_ / "metrics.jsonl").string(), metrics + evaluations + epoch);
  const RunRecords records = read_run_records((dir_ / "metrics.jsonl").string());
  ASSERT_EQ(records.evaluations.size(), 3u);
  const auto held_out = records.held_out();
  ASSERT_EQ(held_out.size(),
            3u);  // step 6's evaluation is the epoch record's (the run ended there)
  EXPECT_EQ(held_out[0]["step"], 2);
  EXPECT_EQ(held_out[1]["step"], 4);
  EXPECT_EQ(held_out[2]["step"], 6);
  EXPECT_EQ(held_out[2]["val_bpb"], 3.0297);
  // Two more points on each chart of validation figures: loss against updates, against tokens,
  // and bits per byte against tokens.
  EXPECT_EQ(count(render_run_report(dir_.string()), "<circle"), epochs_only + 3 * 2);
}

TEST_F(RunReportTest, ADivergedRunSaysSoAndChartsItsLossOnALogAxis) {
  std::string metrics;
  for (int step = 1; step <= 12; ++step) {
    const bool spike = step > 9;
    metrics += "{\"step\":" + std::to_string(step) +
               ",\"samples_seen\":" + std::to_string(step * 64) +
               ",\"loss\":" + (spike ? "4.6e25" : "1.5") +
               ",\"items\":64,\"skipped\":" + (spike ? "true" : "false") +
               ",\"skipped_updates\":" + std::to_string(spike ? step - 9 : 0) +
               (step == 10 ? ",\"loss_spike\":true" : "") + "}\n";
  }
  metrics +=
      "{\"event\":\"diverged\",\"step\":12,\"samples_seen\":768,\"bad_updates_in_a_row\":3,"
      "\"checkpoint_step\":8}\n";
  atomic_write_file((dir_ / "metrics.jsonl").string(), metrics);
  // config.toml: what the run set comes first, the defaults it kept after.
  TrainConfig config;
  config.epochs = 5;
  atomic_write_file((dir_ / "config.toml").string(), render_toml_config(config));
  const std::string html = render_run_report(dir_.string());
  EXPECT_NE(html.find("This run <b>diverged</b> at update 12: 3 updates in a row were skipped"),
            std::string::npos);
  EXPECT_NE(html.find("Its newest checkpoint is at update 8."), std::string::npos);
  EXPECT_NE(html.find("skipped updates</th><td>3 (1 loss spikes, 2 non-finite)"),
            std::string::npos);
  EXPECT_NE(html.find("loss (log)"), std::string::npos);
  EXPECT_NE(html.find(">1e25<"), std::string::npos);  // the spike's decade, plainly written
  const auto set = html.find("Set for this run");
  const auto kept = html.find("the defaults it kept");
  ASSERT_NE(set, std::string::npos);
  ASSERT_NE(kept, std::string::npos);
  const auto epochs = html.find("epochs = 5");
  EXPECT_GT(epochs, set);
  EXPECT_LT(epochs, kept);
  // An SGD run shows its momentum, not AdamW's settings (issue 59 item 6); an AdamW run the
  // other way round.
  EXPECT_GT(html.find("momentum = 0.9"), kept);
  EXPECT_EQ(html.find("adam-"), std::string::npos);
  config.optimizer = OptimizerKind::AdamW;
  atomic_write_file((dir_ / "config.toml").string(), render_toml_config(config));
  const std::string adamw = render_run_report(dir_.string());
  EXPECT_NE(adamw.find("adam-beta1 = 0.9"), std::string::npos);
  EXPECT_EQ(adamw.find("momentum = "), std::string::npos);
}

TEST(SweepReport, WithNoCellAtTheTargetTheBestSoFarLeads) {
  std::vector<CellResult> results;
  for (int64_t batch : {128, 512}) {
    CellResult r;
    r.cell = {batch, "linear", "0"};
    r.status = "done";
    r.best = batch == 128 ? 0.84 : 0.81;
    r.metric = "val_accuracy";
    r.curve_by_updates = {{10, 80}, {20, 84}};
    r.curve_by_samples = {{1280, 80}, {2560, 84}};
    results.push_back(r);
  }
  const std::string html = sweep_report_html(results, StopTarget::accuracy(0.9), "sweep");
  EXPECT_EQ(html.find("no data"), std::string::npos);
  EXPECT_NE(html.find("best accuracy so far against the global batch (no cell reached 90%)"),
            std::string::npos);
  EXPECT_NE(html.find("No cell has reached the target of 90%"), std::string::npos);
  EXPECT_NE(html.find(">target 90%<"), std::string::npos);  // the target, dashed
  EXPECT_EQ(html.find("updates to 90% against the global batch"), std::string::npos);
  // Once a cell reaches it, the updates-to-target chart leads again.
  results[0].reached = true;
  results[0].updates_to_target = 20;
  const std::string reached = sweep_report_html(results, StopTarget::accuracy(0.84), "sweep");
  EXPECT_NE(reached.find("updates to 84% against the global batch"), std::string::npos);

  // A language model's sweep: bits per byte, lower is better, shown as they are.
  for (auto& r : results) {
    r.reached = false;
    r.metric = "val_bpb";
    r.best = r.cell.global_batch == 128 ? 2.31 : 2.45;
  }
  const StopTarget bpb = StopTarget::parse("val_bpb<=1.9");
  const std::string lm = sweep_report_html(results, bpb, "sweep");
  EXPECT_NE(lm.find("best bits per byte so far against the global batch (no cell reached "
                    "val_bpb&lt;=1.9)"),
            std::string::npos);
  EXPECT_NE(lm.find("val_bpb against updates"), std::string::npos);
  EXPECT_NE(lm.find("<td>2.31</td>"), std::string::npos);
  EXPECT_EQ(lm.find("%</td>"), std::string::npos);
  const std::string markdown = summary_markdown(results, bpb);
  EXPECT_NE(markdown.find("updates to val_bpb<=1.9"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("best bits per byte"), std::string::npos) << markdown;
  EXPECT_NE(summary_csv(results).find(",2.31,val_bpb,"), std::string::npos);
}

TEST_F(RunReportTest, AShortLastWindowIsSaidBesideItsItems) {
  // Issue 59 item 6: "items (last update) 608" under "global batch 1024" read as a contradiction.
  const std::string path = (dir_ / "metrics.jsonl").string();
  atomic_write_file(path,
                    "{\"step\":1,\"samples_seen\":1024,\"loss\":2.0,\"items\":1024,"
                    "\"global_batch\":1024}\n{\"step\":2,\"samples_seen\":1632,\"loss\":1.9,"
                    "\"items\":608,\"global_batch\":1024}\n");
  EXPECT_NE(render_run_report(dir_.string()).find("608 (a short last window of 608 samples)"),
            std::string::npos);
  atomic_write_file(path,
                    "{\"step\":1,\"samples_seen\":1024,\"loss\":2.0,\"items\":1024,"
                    "\"global_batch\":1024}\n");
  EXPECT_EQ(render_run_report(dir_.string()).find("short last window"), std::string::npos);
}

TEST_F(RunReportTest, NoMetricsIsAClearError) {
  try {
    render_run_report(dir_.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no metrics.jsonl"), std::string::npos);
  }
}

TEST_F(RunReportTest, WhatCannotBeARecordIsSkippedWithItsReasonAndUnknownFieldsAreIgnored) {
  // Issue 59 item 17: one bad line skips that line, with its own reason, not the whole file.
  const std::string path = (dir_ / "metrics.jsonl").string();
  const auto skipped = [&](const std::string& text) {
    atomic_write_file(path, text);
    return read_run_records(path).skipped;
  };
  const std::string good = "{\"step\":1,\"loss\":2.0}\n";
  // A newer version's field, even a string or a list: ignored.
  EXPECT_TRUE(
      skipped(good + "{\"step\":2,\"loss\":1.5,\"optimizer_note\":\"x\",\"new\":[1]}\n").empty());
  // The last line cut short by a crash: skipped silently.
  EXPECT_TRUE(skipped(good + "{\"step\":2,\"lo").empty());
  const auto one = [&](const std::string& bad) {
    const std::vector<std::string> lines = skipped(bad + good);
    EXPECT_EQ(lines.size(), 1u) << bad;
    EXPECT_EQ(read_run_records(path).updates.size(), 1u) << bad;  // the good line still read
    return lines.empty() ? std::string() : lines[0];
  };
  EXPECT_EQ(one("[1, 2]\n"), "line 1: a JSON array, not a record");
  EXPECT_NE(one("{\"step\":1,\"loss\":NaN}\n").find("(NaN and Infinity are not JSON numbers)"),
            std::string::npos);
  const std::string overflow = one("{\"step\":1,\"loss\":1e400}\n");
  EXPECT_NE(overflow.find("line 1: not JSON: number overflow"), std::string::npos) << overflow;
  EXPECT_EQ(overflow.find("NaN"), std::string::npos) << overflow;
  const std::string utf8 = one("{\"step\":1,\"loss\":2.0,\"event\":\"a\xff\"}\n");
  EXPECT_NE(utf8.find("line 1: not JSON: "), std::string::npos) << utf8;
  EXPECT_NE(utf8.find("UTF-8"), std::string::npos) << utf8;
  EXPECT_EQ(one("{\"step\":\"two\",\"loss\":1.0}\n"), "line 1: \"step\" is a string, not a number");
  // The report lists them on its page.
  atomic_write_file(path, "[1, 2]\n" + good);
  std::vector<std::string> listed;
  const std::string page = render_run_report(dir_.string(), &listed);
  EXPECT_EQ(listed, std::vector<std::string>{"line 1: a JSON array, not a record"});
  EXPECT_NE(page.find("1 line(s) skipped"), std::string::npos);
}

}  // namespace
}  // namespace bigbatch
